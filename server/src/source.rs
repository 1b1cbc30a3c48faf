//! Where the server gets its sessions: the binary knows command files, providers and databases,
//! the server only hosts what it is handed.

use std::collections::BTreeMap;

use reel_engine::{InlineSink, OpenedSession, SessionCatalog};

/// What a new session runs.
#[derive(Clone, Debug, Default)]
pub struct SessionConfig {
    /// A command file's name in the server's commands folder; `None` for its default command.
    pub command: Option<String>,
    /// Values of the command's variables (the rest take their defaults).
    pub variables: BTreeMap<String, String>,
}

/// What a stored session exports to (`reel export --format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// The frames a client would have seen, one JSON line each.
    Jsonl,
    /// A readable transcript.
    Markdown,
    /// One self-contained HTML page.
    Html,
    /// The model context, as a JSON list of OpenAI chat messages.
    Turns,
}

impl ExportFormat {
    /// The `Content-Type` of an export in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Jsonl => "application/jsonl; charset=utf-8",
            Self::Markdown => "text/markdown; charset=utf-8",
            Self::Html => "text/html; charset=utf-8",
            Self::Turns => "application/json",
        }
    }
}

/// Why a session could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    NotFound(String),
    /// It was removed for its age (`reel prune`, `--retain`).
    #[error("{0}")]
    Pruned(String),
    #[error("{0}")]
    Exists(String),
    /// Another process writes the session.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    InvalidId(String),
    /// The command a new session asks for is not the server's, or its variables are wrong.
    #[error("{0}")]
    InvalidCommand(String),
    /// The server is stopping.
    #[error("{0}")]
    Stopping(String),
    /// An ordinal past the session's last event.
    #[error("{0}")]
    OutOfRange(String),
    /// The database or the command failed; the message says which and what to do.
    #[error("{0}")]
    Failed(String),
}

/// The sessions a server hosts.
#[async_trait::async_trait]
pub trait SessionSource: Send + Sync + 'static {
    /// Stores a new session `id` that runs `config`; [`SourceError::Exists`] when there is
    /// one, [`SourceError::InvalidCommand`] when `config` names no command the server has or
    /// values its command does not take.
    async fn create(&self, id: &str, config: &SessionConfig) -> Result<(), SourceError>;

    /// Opens the stored session `id` for writing, with `frames` among its sinks.
    async fn open(
        &self,
        id: &str,
        frames: Box<dyn InlineSink>,
    ) -> Result<OpenedSession, SourceError>;

    /// Session `id` as it was at ordinal `at` (default: its newest), rendered in `format` into
    /// an anonymous file, rewound: an export of any size costs the server no memory.
    async fn export(
        &self,
        id: &str,
        format: ExportFormat,
        at: Option<u64>,
    ) -> Result<std::fs::File, SourceError>;

    /// Stores a new session `new_id` whose history is session `id`'s first `at` events
    /// (default: all of them); [`SourceError::Exists`] when `new_id` is taken.
    async fn fork(&self, id: &str, at: Option<u64>, new_id: &str) -> Result<(), SourceError>;

    /// A reading connection to the sessions' store: listings, summaries, and the frames a
    /// subscriber catches up on.
    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SourceError>;

    /// Where the node that writes session `id` is reached, when it is another `reel serve`
    /// of a scale-out (several servers on one database): a write for the session is
    /// forwarded there. `None` by default: one server alone.
    async fn node_writing(&self, _id: &str) -> Result<Option<String>, SourceError> {
        Ok(None)
    }

    /// Removes the stored session `id` for its age, under its lease ([`SourceError::Busy`]
    /// when another process holds it), and remembers that it was pruned. The host calls it
    /// only for a session it has not loaded. Unsupported by default.
    async fn prune_session(&self, id: &str) -> Result<(), SourceError> {
        Err(SourceError::Failed(format!(
            "this server's store cannot prune session {id}"
        )))
    }
}
