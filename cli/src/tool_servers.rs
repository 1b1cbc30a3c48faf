//! A session's MCP servers (its command file's `mcp_servers:`, and an editor's over ACP):
//! started when the session opens, their tools added to its toolbox, and the event that lists
//! them for its log.

use std::path::Path;

use anyhow::Context;
use reel_engine::Toolbox;
use reel_mcp::{McpServerConfig, McpServers};
use reel_proto::Any;

/// `tools` with the tools of `servers` (started in `cwd`, when given), and the event that
/// lists them; `tools` as it is, and no event, when there are no servers.
pub async fn connect(
    tools: Toolbox,
    servers: &[McpServerConfig],
    cwd: Option<&Path>,
) -> anyhow::Result<(Toolbox, Option<Any>)> {
    if servers.is_empty() {
        return Ok((tools, None));
    }
    let started = McpServers::start(servers, cwd).await;
    let tools = tools
        .with_tools(started.tools)
        .context("the MCP servers' tools")?;
    Ok((tools, Some(Any::from(started.event))))
}
