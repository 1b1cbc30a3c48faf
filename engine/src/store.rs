//! The `LogStore` trait: where a session's log is made durable, and found again.
//!
//! A store keeps the events (the log itself), the timeline entities materialized at run ends,
//! and snapshots of the projections' state, so that resuming does not replay from ordinal 1.
//! The engine defines what a store must do; `reel-storage` implements it for SQLite.

use std::{sync::Arc, time::Duration};

use reel_proto::rpc::SnapshotEntity;

use crate::{ModelContextProjection, TimelineProjection, log::LogEntry, projection::Projection};

/// Everything the projections know at one ordinal: what a snapshot stores.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionState {
    pub timeline: TimelineProjection,
    pub context: ModelContextProjection,
    #[serde(default)]
    pub usage: crate::usage::UsageProjection,
}

impl SessionState {
    /// Folds one entry into both projections.
    pub fn apply(&mut self, entry: &LogEntry) {
        self.timeline.apply(entry);
        self.context.apply(entry);
        self.usage.apply(entry);
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

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another live process holds the session.
    #[error("{0}")]
    Busy(String),
    /// The session is not in the store.
    #[error("{0}")]
    NotFound(String),
    /// The store's data is not what reel wrote: it is left untouched.
    #[error("{0}")]
    Damaged(String),
    /// The database belongs to another program (or a newer reel): it is left untouched.
    #[error("{0}")]
    Foreign(String),
    /// The database failed (locked, read-only, full, unreachable).
    #[error("{0}")]
    Database(String),
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

/// How often a writer renews its lease ([`LogStore::renew_lease`]) while it holds a session.
pub const LEASE_HEARTBEAT: Duration = Duration::from_secs(5);

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

    /// Tells the store this process still holds the session (stores whose leases expire
    /// without it). Fails when the session's lease now belongs to another process.
    async fn renew_lease(&mut self, _session_id: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// Deletes the session: its events, entities, snapshots and turns. Call it holding the
    /// session's lease, so no writer is in the middle of it.
    async fn remove(&mut self, session_id: &str) -> Result<(), StoreError>;

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
