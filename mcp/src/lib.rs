//! reel as a [Model Context Protocol](https://modelcontextprotocol.io) client, on the official
//! Rust SDK (`rmcp`): the tools of a session's MCP servers join its toolbox.
//!
//! A session's servers ([`McpServerConfig`]: a command run as a child process over stdio, or
//! a streamable HTTP URL) start once when it opens ([`McpServers::start`]); each offered tool
//! becomes a [`reel_engine::Tool`] named `SERVER__TOOL` whose calls are ordinary tool calls on
//! the log. The servers and their tools are listed in one log event
//! (`ChatToolServersStarted`), and they stop when the toolbox holding them is dropped (with the
//! session). A call dropped by a stopped run is cancelled on the server (MCP's
//! `notifications/cancelled`).

mod config;
mod servers;
mod tool;

pub use config::{McpConfigError, McpServerConfig, McpTransport};
pub use servers::{McpServers, McpStartError};
