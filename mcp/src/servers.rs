//! Starting a session's MCP servers and listing their tools.

use std::{path::Path, process::Stdio, sync::Arc};

use reel_engine::{Tool, ToolDefinition, ToolExecutor};
use reel_proto::chat::{ChatServerTool, ChatToolServer, ChatToolServersStarted};
use rmcp::{
    RoleClient, ServiceExt,
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use crate::{
    config::{McpConfigError, McpServerConfig, McpTransport},
    tool::McpTool,
};

/// A connection to one MCP server; it stops the server (or closes the HTTP session) when the
/// last of its tools is dropped.
pub(crate) type Connection = RunningService<RoleClient, ()>;

/// How long a server may take to start and list its tools.
const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The tools of a session's MCP servers, and the log event that lists them.
pub struct McpServers {
    /// Each runs its call on its server; the servers live as long as these do.
    pub tools: Vec<Tool>,
    /// `ChatToolServersStarted`: each server with its tools, or the error it failed with.
    pub event: ChatToolServersStarted,
}

impl McpServers {
    /// Starts `configs` (a stdio server's process in `cwd`, when given) and lists their
    /// tools. A server that cannot be started or listed is left out, with its error in the
    /// event and on stderr: the session goes on with the others.
    pub async fn start(configs: &[McpServerConfig], cwd: Option<&Path>) -> Self {
        let mut tools = Vec::new();
        let mut servers = Vec::new();
        for config in configs {
            let (transport, target) = config.shown();
            let mut server = ChatToolServer {
                name: config.name.clone(),
                transport: transport.into(),
                target,
                ..Default::default()
            };
            match tokio::time::timeout(START_TIMEOUT, start_one(config, cwd)).await {
                Ok(Ok(offered)) => {
                    server.tools = offered.iter().map(listed).collect();
                    tools.extend(offered);
                    tracing::info!("MCP server {}: {} tool(s)", config.name, server.tools.len());
                }
                Ok(Err(error)) => server.error = reel_engine::error_chain(&error),
                Err(_) => {
                    server.error = format!("did not start within {} s", START_TIMEOUT.as_secs())
                }
            }
            if !server.error.is_empty() {
                tracing::warn!("MCP server {} left out: {}", config.name, server.error);
            }
            servers.push(server);
        }
        Self {
            tools,
            event: ChatToolServersStarted { servers },
        }
    }
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum McpStartError {
    #[error(transparent)]
    Config(#[from] McpConfigError),
    #[error("cannot start {program:?}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("header {name:?}: not a header")]
    Header { name: String },
    #[error("cannot make an HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("did not answer MCP's initialize{at}")]
    Initialize {
        at: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot list its tools")]
    List(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Connects to one server and makes a tool of each it offers.
async fn start_one(
    config: &McpServerConfig,
    cwd: Option<&Path>,
) -> Result<Vec<Tool>, McpStartError> {
    config.check()?;
    let connection = connect(config, cwd).await?;
    let offered = connection
        .list_all_tools()
        .await
        .map_err(|e| McpStartError::List(Box::new(e)))?;
    let connection = Arc::new(connection);
    let mut tools = Vec::with_capacity(offered.len());
    for tool in offered {
        let name = format!("{}__{}", config.name, tool.name);
        let definition = ToolDefinition {
            name,
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters: serde_json::Value::Object((*tool.input_schema).clone()),
        };
        let call = McpTool::new(Arc::clone(&connection), &config.name, &tool.name);
        tools.push(Tool {
            definition,
            executor: ToolExecutor::Service(Arc::new(call)),
            approval: Default::default(),
            approval_timeout: None,
            on_interrupted: Default::default(),
        });
    }
    Ok(tools)
}

async fn connect(
    config: &McpServerConfig,
    cwd: Option<&Path>,
) -> Result<Connection, McpStartError> {
    match &config.transport {
        McpTransport::Stdio { command, env } => {
            let mut process = tokio::process::Command::new(&command[0]);
            process.args(&command[1..]).envs(env);
            if let Some(cwd) = cwd {
                process.current_dir(cwd);
            }
            let (transport, _) = TokioChildProcess::builder(process)
                // Its log joins reel's, on stderr.
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|source| McpStartError::Spawn {
                    program: command[0].clone(),
                    source,
                })?;
            ().serve(transport)
                .await
                .map_err(|e| McpStartError::Initialize {
                    at: String::new(),
                    source: Box::new(e),
                })
        }
        McpTransport::Http { url, headers } => {
            let mut header_map = reqwest::header::HeaderMap::new();
            for (name, value) in headers {
                let refused = || McpStartError::Header { name: name.clone() };
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| refused())?;
                let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| refused())?;
                header_map.insert(name, value);
            }
            let client = reqwest::Client::builder()
                .default_headers(header_map)
                .build()
                .map_err(McpStartError::Client)?;
            let transport = StreamableHttpClientTransport::with_client(
                client,
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            ().serve(transport)
                .await
                .map_err(|e| McpStartError::Initialize {
                    at: format!(" at {url}"),
                    source: Box::new(e),
                })
        }
    }
}

fn listed(tool: &Tool) -> ChatServerTool {
    let server_name = tool
        .definition
        .name
        .split_once("__")
        .map(|(_, name)| name.to_owned())
        .unwrap_or_default();
    ChatServerTool {
        name: tool.definition.name.clone(),
        server_name,
        description: tool.definition.description.clone(),
        parameters: tool.definition.parameters.to_string(),
    }
}
