//! Which MCP servers a session connects to: from a command file's `mcp_servers:` list, or
//! handed over by an editor (ACP's `session/new.mcpServers`).

use std::collections::BTreeMap;

/// One MCP server.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "Declared")]
pub struct McpServerConfig {
    /// Its name: the prefix of its tools' names (`NAME__TOOL`), so 1 to 32 ASCII letters,
    /// digits, `_` or `-`.
    pub name: String,
    pub transport: McpTransport,
}

/// How reel reaches an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Environment variables it gets besides reel's.
        env: BTreeMap<String, String>,
    },
    /// A server reached over streamable HTTP.
    Http {
        url: String,
        /// Headers sent with each request (e.g. an authorization).
        headers: BTreeMap<String, String>,
    },
}

/// A server as a command file declares it: `command` (and `env`) or `url` (and `headers`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    name: String,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Why a declared MCP server cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    #[error("MCP server {0}: give either command (and env) or url (and headers)")]
    Transport(String),
    #[error("MCP server name {0:?} must be 1 to 32 ASCII letters, digits, '_' or '-'")]
    Name(String),
    #[error("MCP server {0}: its command is empty")]
    EmptyCommand(String),
    #[error("MCP server {server}: {url:?} is not an http:// or https:// URL")]
    Url { server: String, url: String },
}

impl TryFrom<Declared> for McpServerConfig {
    type Error = McpConfigError;

    fn try_from(declared: Declared) -> Result<Self, McpConfigError> {
        let transport = match (declared.command, declared.url) {
            (Some(command), None) if declared.headers.is_empty() => McpTransport::Stdio {
                command,
                env: declared.env,
            },
            (None, Some(url)) if declared.env.is_empty() => McpTransport::Http {
                url,
                headers: declared.headers,
            },
            _ => return Err(McpConfigError::Transport(declared.name)),
        };
        Ok(Self {
            name: declared.name,
            transport,
        })
    }
}

impl McpServerConfig {
    /// Why this server cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), McpConfigError> {
        let plain = (1..=32).contains(&self.name.len())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !plain {
            return Err(McpConfigError::Name(self.name.clone()));
        }
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.is_empty() => {
                Err(McpConfigError::EmptyCommand(self.name.clone()))
            }
            McpTransport::Http { url, .. } if !url.starts_with("http") => {
                Err(McpConfigError::Url {
                    server: self.name.clone(),
                    url: url.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// "stdio" or "http", and the command line or URL, for the log.
    pub fn shown(&self) -> (&'static str, String) {
        match &self.transport {
            McpTransport::Stdio { command, .. } => ("stdio", command.join(" ")),
            McpTransport::Http { url, .. } => ("http", url.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_file_declares_either_transport() {
        let servers: Vec<McpServerConfig> = serde_saphyr::from_str(
            "- {name: files, command: [npx, server], env: {A: b}}\n- {name: web, url: http://127.0.0.1:1/mcp}\n",
        )
        .unwrap();
        assert!(
            matches!(&servers[0].transport, McpTransport::Stdio { command, .. } if command[0] == "npx")
        );
        assert!(
            matches!(&servers[1].transport, McpTransport::Http { url, .. } if url.ends_with("/mcp"))
        );
        assert!(servers.iter().all(|s| s.check().is_ok()));
        let bad = McpServerConfig {
            name: "a b".into(),
            transport: McpTransport::Stdio {
                command: vec!["x".into()],
                env: BTreeMap::new(),
            },
        };
        assert!(bad.check().is_err());
    }
}
