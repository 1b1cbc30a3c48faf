//! Where the server gets its sessions: the binary knows command files, providers and databases,
//! the server only hosts what it is handed.

use reel_engine::{
    Budgets, ContextPolicy, ModelSettings, Provider, Session, SessionCatalog, Sink, Toolbox,
};

/// What every run of a hosted session is made with (its command file, prepared).
pub struct RunSetup {
    pub provider: Box<dyn Provider>,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub tools: Toolbox,
    pub budgets: Budgets,
    pub context_policy: ContextPolicy,
}

/// A session opened for writing: its lease taken, its durable sinks and `frames` attached.
pub struct OpenedSession {
    pub session: Session,
    pub runs: RunSetup,
}

/// Why a session could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Exists(String),
    /// Another process writes the session.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    InvalidId(String),
    /// The database or the command failed; the message says which and what to do.
    #[error("{0}")]
    Failed(String),
}

/// The sessions a server hosts.
#[async_trait::async_trait]
pub trait SessionSource: Send + Sync + 'static {
    /// Stores a new, empty session `id`; [`SourceError::Exists`] when there is one.
    async fn create(&self, id: &str) -> Result<(), SourceError>;

    /// Opens the stored session `id` for writing, with `frames` among its sinks.
    async fn open(&self, id: &str, frames: Box<dyn Sink>) -> Result<OpenedSession, SourceError>;

    /// A reading connection to the sessions' store: listings, summaries, and the frames a
    /// subscriber catches up on.
    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SourceError>;
}
