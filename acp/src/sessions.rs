//! Where the agent gets its sessions: the binary knows command files, providers and databases;
//! the agent only drives what it is handed.

use std::path::Path;

use reel_engine::{InlineSink, OpenedSession, SessionCatalog};
use reel_mcp::McpServerConfig;

/// Why a session could not be created, opened or read.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error("{0}")]
    NotFound(String),
    /// Another process writes the session.
    #[error("{0}")]
    Busy(String),
    /// The database or the command failed; the message says which and what to do.
    #[error("{0}")]
    Failed(String),
}

/// The sessions an agent runs.
#[async_trait::async_trait]
pub trait AgentSessions: Send + Sync + 'static {
    /// Stores a new session `id` whose command tools run in `cwd` (recorded on its log, so a
    /// later load runs them there too).
    async fn create(&self, id: &str, cwd: &Path) -> Result<(), SessionsError>;

    /// Opens the stored session `id` for writing, with `updates` among its sinks, connected to
    /// the MCP servers of its command and to `servers` (the editor's).
    async fn open(
        &self,
        id: &str,
        updates: Box<dyn InlineSink>,
        servers: &[McpServerConfig],
    ) -> Result<OpenedSession, SessionsError>;

    /// A reading connection to the sessions' store: their list and their logs.
    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SessionsError>;

    /// Stores a new session `new_id` whose history is a copy of session `id`'s.
    async fn fork(&self, id: &str, new_id: &str) -> Result<(), SessionsError>;

    /// The working directory session `id` was created with, if it recorded one.
    async fn cwd(&self, id: &str) -> Result<Option<std::path::PathBuf>, SessionsError>;
}
