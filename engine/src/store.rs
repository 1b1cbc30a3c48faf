//! The `LogStore` trait: where a session's log is made durable, and found again.
//!
//! A store keeps the events (the log itself), the timeline entities materialized at run ends,
//! and snapshots of the projections' state, so that resuming does not replay from ordinal 1.
//! The engine defines what a store must do; `reel-storage` implements it for SQLite.

use std::sync::Arc;

use reel_proto::rpc::SnapshotEntity;

use crate::{ModelContextProjection, TimelineProjection, log::LogEntry, projection::Projection};

/// Everything the projections know at one ordinal: what a snapshot stores.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionState {
    pub timeline: TimelineProjection,
    pub context: ModelContextProjection,
    #[serde(default)]
    pub usage: crate::usage::UsageProjection,
    /// The tools allowed for the rest of the session (absent from snapshots older than it).
    #[serde(default)]
    pub allowed_always: crate::tools::AllowedAlways,
}

impl SessionState {
    /// Folds one entry into both projections.
    pub fn apply(&mut self, entry: &LogEntry) {
        self.timeline.fold(entry);
        self.context.apply(entry);
        self.usage.apply(entry);
        self.allowed_always.apply(entry);
    }

    /// The ordinal this state is as of.
    pub fn ordinal(&self) -> u64 {
        self.timeline.last_ordinal()
    }
}

/// A session as a store holds it: its newest snapshot and the events after it.
#[derive(Debug)]
pub struct StoredSession {
    /// The state at the snapshot's ordinal (the empty state when there is no snapshot).
    pub state: SessionState,
    /// The events after the snapshot, in ordinal order.
    pub events: Vec<LogEntry>,
    /// The ordinal the store's materialized entities are as of (they lag the log after a
    /// crash in the middle of a run).
    pub entities_ordinal: u64,
}

impl StoredSession {
    /// Replays the events after the snapshot: the state as of the newest stored ordinal, and the
    /// log that continues from there. A gap or a repeated ordinal is [`StoreError::Damaged`].
    pub fn replay(self) -> Result<(SessionState, crate::EventLog), StoreError> {
        let StoredSession {
            mut state, events, ..
        } = self;
        let mut last = state.ordinal();
        for entry in &events {
            if entry.ordinal != last + 1 {
                let error = crate::log::ordinal_error(entry.ordinal, last + 1);
                return Err(StoreError::Damaged(error));
            }
            state.apply(entry);
            last = entry.ordinal;
        }
        Ok((state, crate::EventLog::after(last)))
    }
}

/// What one transaction makes durable.
#[derive(Debug, Default)]
pub struct Commit {
    /// New events, in ordinal order, continuing the stored log without a gap.
    pub events: Vec<Arc<LogEntry>>,
    /// Entities created or changed since they were last materialized (empty when this commit
    /// does not materialize them).
    pub entities: Vec<SnapshotEntity>,
    /// The ordinal the stored entities are as of after this commit, when they were materialized.
    pub entities_ordinal: Option<u64>,
    /// A snapshot of the projections, when one is due: the state and its JSON.
    pub snapshot: Option<(u64, String)>,
    /// The session's title (its first prompt), when it is first known.
    pub title: Option<String>,
}

/// The failure under a [`StoreError::Database`]: the driver's or the file system's own error.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another live process holds the session.
    #[error("{0}")]
    Busy(String),
    /// The session, or the database, is not there.
    #[error("{0}")]
    NotFound(String),
    /// The store's data is not what reel wrote: it is left untouched.
    #[error("{0}")]
    Damaged(String),
    /// The database belongs to another program (or a newer reel): it is left untouched.
    #[error("{0}")]
    Foreign(String),
    /// The database cannot be used for this as it is (a read-only command and an older
    /// reel's schema, for instance); the message says what to do.
    #[error("{0}")]
    Unusable(String),
    /// A query the store's syntax does not take (a search); the message says why.
    #[error("{0}")]
    Query(String),
    /// The database failed (locked, read-only, full, unreachable): what reel was doing, and
    /// the database's own error as the source.
    #[error("{doing}")]
    Database {
        doing: String,
        #[source]
        cause: Cause,
    },
}

impl StoreError {
    /// The database failed while reel was `doing` something.
    pub fn database(doing: impl Into<String>, cause: impl Into<Cause>) -> Self {
        StoreError::Database {
            doing: doing.into(),
            cause: cause.into(),
        }
    }

    /// The same error, said as part of `context` (a database's name, a larger step): a
    /// database failure reads `context: doing: cause`, and the others keep their words.
    pub fn within(self, context: &str) -> Self {
        match self {
            StoreError::Database { doing, cause } if doing.is_empty() => StoreError::Database {
                doing: context.to_owned(),
                cause,
            },
            StoreError::Database { doing, cause } => StoreError::Database {
                doing: format!("{context}: {doing}"),
                cause,
            },
            other => other,
        }
    }
}

/// An error and every source under it, as one line: `what: why: deeper why`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// The model context after one run: what the next run of the session starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    pub session_id: String,
    pub run_id: String,
    /// How the run ended.
    pub status: crate::RunStatus,
    /// The run's last ordinal.
    pub last_ordinal: u64,
    /// Model calls the session had made by the end of the run.
    pub model_calls: u64,
    pub context: Vec<Arc<crate::ContextMessage>>,
    /// The run's usage (its model calls together) and the session's up to its end.
    pub usage: reel_proto::chat::UsageInfo,
    pub session_usage: reel_proto::chat::UsageInfo,
}

/// A durable home for turns (the model context after each run).
#[async_trait::async_trait]
pub trait TurnStore: Send + 'static {
    async fn save_turn(&mut self, turn: &Turn) -> Result<(), StoreError>;

    /// The session's newest turn.
    async fn latest_turn(&mut self, session_id: &str) -> Result<Option<Turn>, StoreError>;
}

/// A durable home for session logs.
#[async_trait::async_trait]
pub trait LogStore: Send + 'static {
    /// Whether the store holds `session_id`.
    async fn exists(&mut self, session_id: &str) -> Result<bool, StoreError>;

    /// Takes the session for this process, or fails at once if another live process holds it.
    async fn lease(&mut self, session_id: &str) -> Result<(), StoreError>;

    /// Takes the session even from a process that seems alive, and says from whom (`None` when
    /// nobody held it). The old holder's next write fails: it no longer owns the session.
    async fn steal_lease(&mut self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// Deletes the session: its events, entities, snapshots and turns. Call it holding the
    /// session's lease, so no writer is in the middle of it.
    async fn remove(&mut self, session_id: &str) -> Result<(), StoreError>;

    /// Removes the session as [`LogStore::remove`] does, for its age, and remembers that it
    /// was pruned (see [`crate::SessionCatalog::pruned_at`]).
    async fn prune(&mut self, session_id: &str) -> Result<(), StoreError> {
        self.remove(session_id).await
    }

    /// The state at the session's newest snapshot (the empty state when it has none).
    async fn snapshot(&mut self, session_id: &str) -> Result<SessionState, StoreError>;

    /// The ordinal the stored entities are as of.
    async fn entities_ordinal(&mut self, session_id: &str) -> Result<u64, StoreError>;

    /// The newest snapshot of the session and the events after it.
    async fn load(&mut self, session_id: &str) -> Result<StoredSession, StoreError> {
        let state = self.snapshot(session_id).await?;
        let events = self.events(session_id, state.ordinal()).await?;
        let entities_ordinal = self.entities_ordinal(session_id).await?;
        Ok(StoredSession {
            state,
            events,
            entities_ordinal,
        })
    }

    /// The stored events after ordinal `after`, in ordinal order.
    async fn events(&mut self, session_id: &str, after: u64) -> Result<Vec<LogEntry>, StoreError>;

    /// The materialized entities (ordered by creation) and the ordinal they are as of.
    async fn entities(
        &mut self,
        session_id: &str,
    ) -> Result<(u64, Vec<SnapshotEntity>), StoreError>;

    /// Makes `commit` durable in one transaction.
    async fn commit(&mut self, session_id: &str, commit: &Commit) -> Result<(), StoreError>;

    /// Gives the session up (the process is done with it).
    async fn release(&mut self, session_id: &str) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_keeps_its_cause_and_reads_as_one_chain() {
        let cause = std::io::Error::other("disk full");
        let error = StoreError::database("", cause).within("timeline database t.db");
        assert_eq!(error.to_string(), "timeline database t.db");
        let source = std::error::Error::source(&error).expect("the cause is kept");
        assert_eq!(source.to_string(), "disk full");
        assert_eq!(error_chain(&error), "timeline database t.db: disk full");
        let inner = StoreError::database("committing", std::io::Error::other("locked"));
        assert_eq!(
            error_chain(&inner.within("t.db")),
            "t.db: committing: locked"
        );
        // Other kinds keep their words; a wrapper that repeats its source says it once.
        assert_eq!(
            StoreError::Busy("taken".into()).within("x").to_string(),
            "taken"
        );
        let sink = crate::SinkError::Io(std::io::Error::other("pipe closed"));
        assert_eq!(error_chain(&sink), "pipe closed");
    }
}
