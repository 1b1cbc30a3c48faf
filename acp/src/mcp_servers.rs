//! The MCP servers an editor hands over (`session/new` and `session/load`'s `mcpServers`), as
//! reel's [`McpServerConfig`]s: stdio and streamable HTTP; SSE, which reel does not speak, is
//! left out with a warning (the agent does not advertise it).

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::McpServer;
use reel_mcp::{McpServerConfig, McpTransport};

/// The servers reel can connect to among `servers`.
pub fn configs(servers: &[McpServer]) -> Vec<McpServerConfig> {
    servers
        .iter()
        .filter_map(|server| match server {
            McpServer::Stdio(stdio) => Some(McpServerConfig {
                name: stdio.name.clone(),
                transport: McpTransport::Stdio {
                    command: std::iter::once(stdio.command.display().to_string())
                        .chain(stdio.args.iter().cloned())
                        .collect(),
                    env: stdio
                        .env
                        .iter()
                        .map(|v| (v.name.clone(), v.value.clone()))
                        .collect(),
                },
            }),
            McpServer::Http(http) => Some(McpServerConfig {
                name: http.name.clone(),
                transport: McpTransport::Http {
                    url: http.url.clone(),
                    headers: http
                        .headers
                        .iter()
                        .map(|h| (h.name.clone(), h.value.clone()))
                        .collect::<BTreeMap<_, _>>(),
                },
            }),
            McpServer::Sse(sse) => {
                tracing::warn!(
                    "acp: MCP server {} uses SSE, which reel does not speak; left out",
                    sse.name
                );
                None
            }
            _ => None,
        })
        .collect()
}
