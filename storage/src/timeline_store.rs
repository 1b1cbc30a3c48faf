//! Choosing a store from what the user gave: a file path or a DSN. The same store serves as a
//! timeline database and as a turns database (one schema holds both).

use reel_engine::{
    Commit, LogEntry, LogStore, SessionCatalog, SessionState, SessionSummary, StoreError, Turn,
    TurnStore, WaitingSession,
};
use reel_proto::rpc::SnapshotEntity;

use crate::{Access, Location, PostgresStore, SqliteStore};

/// A timeline database of either kind.
pub enum TimelineStore {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// Opens the database at `location` for `access` (see [`SqliteStore::open`] and
/// [`PostgresStore::connect`]).
pub async fn open_timeline(
    location: &Location,
    access: Access,
) -> Result<TimelineStore, StoreError> {
    match location {
        Location::Sqlite(path) => SqliteStore::open(path, access)
            .await
            .map(TimelineStore::Sqlite),
        Location::Postgres(dsn) => PostgresStore::connect(dsn, access)
            .await
            .map(TimelineStore::Postgres),
    }
}

impl TimelineStore {
    /// A connection to the same database for reading beside this one's writes (a session
    /// reading back the entities it let go); the first call opens it, and every reader of this
    /// store and of the stores [`Self::shared`] with it shares it. For SQLite it opens only the connection:
    /// opening and closing the file itself, as a first open does to look at it, would drop the
    /// locks this process's writing connection holds on it (POSIX locks belong to the process,
    /// and closing any descriptor of the file releases them all).
    pub async fn reader(&self) -> Result<TimelineStore, StoreError> {
        match self {
            TimelineStore::Sqlite(store) => store.reader().await.map(TimelineStore::Sqlite),
            TimelineStore::Postgres(store) => store.reader().await.map(TimelineStore::Postgres),
        }
    }
}

impl TimelineStore {
    /// Another store on this store's own connection, for a process that hosts many sessions
    /// (`reel serve`): a connection per session would cost a thread and a page cache each in
    /// SQLite and a server process each in PostgreSQL. The stores take turns on the
    /// connection, an operation (a whole transaction) at a time, and their [`Self::reader`]s
    /// share one reading connection. A PostgreSQL session lock is the connection's, so every
    /// session leased through it is freed together when the connection ends.
    pub fn shared(&self) -> TimelineStore {
        match self {
            TimelineStore::Sqlite(store) => TimelineStore::Sqlite(store.shared()),
            TimelineStore::Postgres(store) => TimelineStore::Postgres(store.shared()),
        }
    }

    /// A second read-write connection to the same database (see [`SqliteStore::sibling`]).
    pub async fn sibling(&self) -> Result<TimelineStore, StoreError> {
        match self {
            TimelineStore::Sqlite(store) => store.sibling().await.map(TimelineStore::Sqlite),
            TimelineStore::Postgres(store) => store.sibling().await.map(TimelineStore::Postgres),
        }
    }
}

/// Scale-out of `reel serve` (see [`PostgresStore::register_node`]): PostgreSQL only, since
/// only a server lets several processes on several machines share a database.
impl TimelineStore {
    /// Registers or renews this process as node `node_id`, reached at `public_url`.
    pub async fn register_node(
        &mut self,
        node_id: &str,
        public_url: &str,
    ) -> Result<(), StoreError> {
        match self {
            TimelineStore::Postgres(store) => store.register_node(node_id, public_url).await,
            TimelineStore::Sqlite(store) => Err(StoreError::Unusable(format!(
                "{} is a SQLite file, which one process writes at a time: several nodes need a PostgreSQL database (--timeline-dsn)",
                store.path
            ))),
        }
    }

    /// Whether the connection still answers: a PostgreSQL connection ends with its server (a
    /// restart, a network failure, a `--steal-lease` that ended it), and nothing reconnects it.
    /// A SQLite connection is a file this process holds: always.
    pub async fn ping(&mut self) -> Result<(), StoreError> {
        match self {
            TimelineStore::Postgres(store) => store.ping().await,
            TimelineStore::Sqlite(_) => Ok(()),
        }
    }

    /// Removes node `node_id`.
    pub async fn unregister_node(&mut self, node_id: &str) -> Result<(), StoreError> {
        match self {
            TimelineStore::Postgres(store) => store.unregister_node(node_id).await,
            TimelineStore::Sqlite(_) => Ok(()),
        }
    }

    /// Where the node writing session `session_id` is reached, if a live node writes it.
    pub async fn node_writing(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        match self {
            TimelineStore::Postgres(store) => store.node_writing(session_id).await,
            TimelineStore::Sqlite(_) => Ok(None),
        }
    }
}

macro_rules! delegate {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            TimelineStore::Sqlite($store) => $call,
            TimelineStore::Postgres($store) => $call,
        }
    };
}
pub(crate) use delegate;

#[async_trait::async_trait]
impl LogStore for TimelineStore {
    async fn exists(&mut self, session_id: &str) -> Result<bool, StoreError> {
        delegate!(self, store => store.exists(session_id).await)
    }

    async fn lease(&mut self, session_id: &str) -> Result<(), StoreError> {
        delegate!(self, store => store.lease(session_id).await)
    }

    async fn steal_lease(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        delegate!(self, store => store.steal_lease(session_id).await)
    }

    async fn remove(&mut self, session_id: &str) -> Result<(), StoreError> {
        delegate!(self, store => store.remove(session_id).await)
    }

    async fn prune(&mut self, session_id: &str) -> Result<(), StoreError> {
        delegate!(self, store => store.prune(session_id).await)
    }

    async fn snapshot(&mut self, session_id: &str) -> Result<SessionState, StoreError> {
        delegate!(self, store => store.snapshot(session_id).await)
    }

    async fn entities_ordinal(&mut self, session_id: &str) -> Result<u64, StoreError> {
        delegate!(self, store => store.entities_ordinal(session_id).await)
    }

    async fn events(&mut self, session_id: &str, after: u64) -> Result<Vec<LogEntry>, StoreError> {
        delegate!(self, store => store.events(session_id, after).await)
    }

    async fn entities(
        &mut self,
        session_id: &str,
    ) -> Result<(u64, Vec<SnapshotEntity>), StoreError> {
        delegate!(self, store => store.entities(session_id).await)
    }

    async fn commit(&mut self, session_id: &str, commit: &Commit) -> Result<(), StoreError> {
        delegate!(self, store => store.commit(session_id, commit).await)
    }

    async fn release(&mut self, session_id: &str) -> Result<(), StoreError> {
        delegate!(self, store => store.release(session_id).await)
    }
}

#[async_trait::async_trait]
impl TurnStore for TimelineStore {
    async fn save_turn(&mut self, turn: &Turn) -> Result<(), StoreError> {
        delegate!(self, store => store.save_turn(turn).await)
    }

    async fn latest_turn(&mut self, session_id: &str) -> Result<Option<Turn>, StoreError> {
        delegate!(self, store => store.latest_turn(session_id).await)
    }
}

#[async_trait::async_trait]
impl SessionCatalog for TimelineStore {
    async fn sessions(&mut self) -> Result<Vec<SessionSummary>, StoreError> {
        delegate!(self, store => store.sessions().await)
    }

    async fn waiting(
        &mut self,
        after: &str,
        limit: usize,
    ) -> Result<Vec<WaitingSession>, StoreError> {
        delegate!(self, store => store.waiting(after, limit).await)
    }

    async fn approvals_due(
        &mut self,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        delegate!(self, store => store.approvals_due(now_ms, limit).await)
    }

    async fn summary(&mut self, session_id: &str) -> Result<Option<SessionSummary>, StoreError> {
        delegate!(self, store => store.summary(session_id).await)
    }

    async fn search(
        &mut self,
        query: &reel_engine::SearchQuery,
    ) -> Result<Vec<reel_engine::SearchHit>, StoreError> {
        delegate!(self, store => store.search(query).await)
    }

    async fn pruned_at(&mut self, session_id: &str) -> Result<Option<u64>, StoreError> {
        delegate!(self, store => store.pruned_at(session_id).await)
    }

    async fn events_page(
        &mut self,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        delegate!(self, store => store.events_page(session_id, after, limit).await)
    }

    async fn snapshot_at_most(
        &mut self,
        session_id: &str,
        ordinal: u64,
    ) -> Result<SessionState, StoreError> {
        delegate!(self, store => store.snapshot_at_most(session_id, ordinal).await)
    }

    async fn stored_entities(
        &mut self,
        session_id: &str,
    ) -> Result<Vec<reel_proto::rpc::SnapshotEntity>, StoreError> {
        delegate!(self, store => store.stored_entities(session_id).await)
    }

    async fn writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        delegate!(self, store => store.writer(session_id).await)
    }

    async fn wait_for_commits(
        &mut self,
        session_id: &str,
        poll: std::time::Duration,
    ) -> Result<(), StoreError> {
        delegate!(self, store => store.wait_for_commits(session_id, poll).await)
    }
}
