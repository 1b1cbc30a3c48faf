//! `reel acp`: reel's sessions as an [Agent Client Protocol](https://agentclientprotocol.com)
//! agent, for editors (Zed, JetBrains IDEs, Neovim plugins) that speak ACP over stdio.
//!
//! Built on the official SDK (`agent-client-protocol`). Each ACP session is a reel session: its
//! log is the history `session/load` replays after any restart, its prompts are the engine's
//! runs, and each log event reaches the editor as a `session/update` ([`updates`] maps them).
//! The binary hands the agent its sessions through [`AgentSessions`].

mod agent;
mod approver;
mod idle;
mod loaded;
mod mcp_servers;
mod prompt_end;
mod prompt_text;
mod sessions;
mod updates;

pub use agent::run_agent;
pub use agent_client_protocol::Lines;
pub use sessions::{AgentSessions, SessionsError};
