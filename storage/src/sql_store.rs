//! The SQL both backends share. SQLite and PostgreSQL hold the same tables and both take `$N`
//! placeholders, so reading sessions, their events, entities and snapshots, and the parts of a
//! commit that are plain SQL (the session's row, snapshots) are written once, here. What differs
//! is each backend's [`Backend`]: how a session is leased (a `leases` row or an advisory lock),
//! how a commit's transaction is opened and its rows batched (multi-row `VALUES` or `UNNEST`),
//! and how a follower hears of commits (polling or LISTEN/NOTIFY).
//!
//! [`sql_store!`] implements the engine's `LogStore` and `SessionCatalog` for a store from the
//! two: the shared SQL, and the backend's own pieces.

use std::{collections::HashMap, time::Duration};

use reel_engine::{
    Commit, LogEntry, LogStore, SessionCatalog, SessionState, SessionSummary, StoreError,
    WaitingSession, pending_approvals,
};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{PgConnection, Row, SqliteConnection};

use crate::{
    PostgresStore, SqliteStore,
    rows::{db, entity_from, state_from, to_i64},
};

/// Whether the store holds the session.
pub const EXISTS: &str = "SELECT 1 FROM sessions WHERE session_id = $1";

/// The ordinal the session's stored entities are as of.
pub const ENTITIES_ORDINAL: &str = "SELECT entities_ordinal FROM sessions WHERE session_id = $1";

/// The session's entities, in the order they were created.
pub const ENTITIES: &str = "SELECT entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json \
     FROM entities WHERE session_id = $1 ORDER BY created_ordinal, entity_id";

/// Every session's summary, most recently updated first.
pub const SESSIONS: &str = "SELECT session_id, title, created_at, updated_at, last_ordinal, runs, last_run_status \
     FROM sessions ORDER BY updated_at DESC, session_id";

/// One session's summary (the columns of [`SESSIONS`]).
pub const SUMMARY: &str = "SELECT session_id, title, created_at, updated_at, last_ordinal, runs, last_run_status \
     FROM sessions WHERE session_id = $1";

/// The sessions of a page of the inbox, up to `$2` after session `$1` (from the first when
/// `$1` is empty) in the order of [`SESSIONS`], as the end of a statement.
macro_rules! waiting_page {
    ($columns:literal) => {
        concat!(
            "SELECT ", $columns, " FROM sessions WHERE pending_approvals > 0 AND ($1 = '' \
             OR updated_at < (SELECT c.updated_at FROM sessions c WHERE c.session_id = $1) \
             OR (updated_at = (SELECT c.updated_at FROM sessions c WHERE c.session_id = $1) AND session_id > $1)) \
             ORDER BY updated_at DESC, session_id LIMIT $2"
        )
    };
}

/// A page of the sessions whose run waits for a person (the columns of [`SESSIONS`]).
pub const WAITING_SESSIONS: &str =
    waiting_page!("session_id, title, created_at, updated_at, last_ordinal, runs, last_run_status");

/// The tool call entities that may wait (the status is checked on the decoded payload) of the
/// same page's sessions, in each session's creation order: the session id, then the columns of
/// [`ENTITIES`].
pub const WAITING_CALLS: &str = concat!(
    "SELECT e.session_id, e.entity_id, e.kind, e.created_ordinal, e.last_event_ordinal, e.tombstone, e.payload_json \
     FROM entities e JOIN (",
    waiting_page!("session_id"),
    ") p ON p.session_id = e.session_id \
     WHERE e.kind = 'ChatToolCall' AND e.payload_json LIKE '%awaiting_approval%' \
     ORDER BY e.session_id, e.created_ordinal, e.entity_id"
);

/// The newest snapshot at or before ordinal `$2`.
pub const SNAPSHOT_AT_MOST: &str = "SELECT ordinal, state_json FROM snapshots \
     WHERE session_id = $1 AND ordinal <= $2 ORDER BY ordinal DESC LIMIT 1";

/// A session's row, made by its first commit (so a writer that fails before storing anything
/// leaves no empty session behind).
pub const CREATE_SESSION: &str = "INSERT INTO sessions (session_id, created_at, updated_at) \
     VALUES ($1, $2, $2) ON CONFLICT (session_id) DO NOTHING";

/// The session's stored last ordinal (a backend that must lock the row appends its clause).
pub const LAST_ORDINAL: &str = "SELECT last_ordinal FROM sessions WHERE session_id = $1";

/// A snapshot, then every snapshot but the newest two goes (a snapshot holds the whole state).
pub const INSERT_SNAPSHOT: &str = "INSERT INTO snapshots (session_id, ordinal, state_json, created_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (session_id, ordinal) DO NOTHING";
pub const PRUNE_SNAPSHOTS: &str = "DELETE FROM snapshots WHERE session_id = $1 AND ordinal < \
     (SELECT min(ordinal) FROM (SELECT ordinal FROM snapshots WHERE session_id = $1 ORDER BY ordinal DESC LIMIT 2) AS newest)";

/// What a commit changes in the session's row: its last ordinal, time, entities' ordinal,
/// title (once), run count, newest run's status, and how many calls wait for a person (from
/// 0 again when a run ended, `$8`; then `$9` more or fewer; see `approval_tally`).
pub const UPDATE_SESSION: &str = "UPDATE sessions SET \
     last_ordinal = CASE WHEN last_ordinal > $1 THEN last_ordinal ELSE $1 END, updated_at = $2, \
     entities_ordinal = coalesce($3, entities_ordinal), \
     title = CASE WHEN title = '' THEN coalesce($4, '') ELSE title END, \
     runs = runs + $5, last_run_status = coalesce($6, last_run_status), \
     pending_approvals = CASE WHEN (CASE WHEN $8 THEN 0 ELSE pending_approvals END) + $9 > 0 \
     THEN (CASE WHEN $8 THEN 0 ELSE pending_approvals END) + $9 ELSE 0 END \
     WHERE session_id = $7";

/// A commit's changes to the session's approval deadlines (see `DeadlineChanges`): all of
/// them dropped (a run ended), one call's dropped, one call's written.
pub const CLEAR_DEADLINES: &str = "DELETE FROM approval_deadlines WHERE session_id = $1";
pub const REMOVE_DEADLINE: &str =
    "DELETE FROM approval_deadlines WHERE session_id = $1 AND tool_call_id = $2";
pub const SET_DEADLINE: &str = "INSERT INTO approval_deadlines (session_id, tool_call_id, expires_at) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id, tool_call_id) DO UPDATE SET expires_at = excluded.expires_at";

/// Up to `$2` sessions with a deadline at or before `$1`, the earliest first.
const APPROVALS_DUE: &str = "SELECT session_id FROM approval_deadlines WHERE expires_at <= $1 \
     GROUP BY session_id ORDER BY min(expires_at), session_id LIMIT $2";

/// Records a pruned session (again: its newest pruning counts).
const MARK_PRUNED: &str = "INSERT INTO pruned_sessions (session_id, pruned_at) VALUES ($1, $2) \
     ON CONFLICT (session_id) DO UPDATE SET pruned_at = excluded.pruned_at";

/// When a session was pruned.
const PRUNED_AT: &str = "SELECT pruned_at FROM pruned_sessions WHERE session_id = $1";

/// The tables that hold a session, emptied by `remove` (its row last).
const SESSION_TABLES: [&str; 6] = [
    "events",
    "entities",
    "snapshots",
    "turns",
    "approval_deadlines",
    "sessions",
];

/// What differs between the backends, implemented by each store.
#[async_trait::async_trait]
pub trait Backend {
    /// Takes the session for this process; with `steal`, from a live holder too, whom it names.
    async fn take_lease(
        &mut self,
        session_id: &str,
        steal: bool,
    ) -> Result<Option<String>, StoreError>;

    /// Deletes the session's rows from every table, in one transaction; with `pruned_at`
    /// (milliseconds since the epoch), it also records that the session was pruned then.
    async fn delete_session(
        &mut self,
        session_id: &str,
        pruned_at: Option<u64>,
    ) -> Result<(), StoreError>;

    /// Makes `commit` durable in one transaction; `last` is the ordinal it ends at.
    async fn write_commit(
        &mut self,
        session_id: &str,
        commit: &Commit,
        last: u64,
    ) -> Result<(), StoreError>;

    /// Gives the session up.
    async fn give_up_lease(&mut self, session_id: &str) -> Result<(), StoreError>;

    /// The live process writing the session, if any.
    async fn live_writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// Waits until new events of the session may have been committed.
    async fn commits_heard(&mut self, session_id: &str, poll: Duration) -> Result<(), StoreError>;
}

/// Fails when a commit does not continue the stored log: its first event must follow the
/// stored last ordinal (another writer got in between otherwise).
pub fn check_continues(
    session_id: &str,
    place: &str,
    stored: i64,
    commit: &Commit,
) -> Result<(), StoreError> {
    match commit.events.first() {
        Some(first) if first.ordinal != stored as u64 + 1 => Err(StoreError::Damaged(format!(
            "session {session_id:?} in {place} ends at ordinal {stored}, but the next event is {}: another writer?",
            first.ordinal
        ))),
        _ => Ok(()),
    }
}

/// Implements `LogStore` and `SessionCatalog` for `$store` (with a `conn: $conn`, an
/// `error(&sqlx::Error)` that names the database, and a [`Backend`]) from the shared SQL, and
/// gives it `delete_rows` for its `delete_session`.
macro_rules! sql_store {
    ($store:ty, $conn:ty) => {
        impl $store {
            /// Deletes the session's rows from every table (its row last); with `pruned_at`,
            /// records that it was pruned then.
            pub(crate) async fn delete_rows(
                conn: &mut $conn,
                session_id: &str,
                pruned_at: Option<u64>,
            ) -> Result<(), StoreError> {
                for table in SESSION_TABLES {
                    let sql = format!("DELETE FROM {table} WHERE session_id = $1");
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .bind(session_id)
                        .execute(&mut *conn)
                        .await
                        .map_err(db)?;
                }
                if let Some(at) = pruned_at {
                    sqlx::query(MARK_PRUNED)
                        .bind(session_id)
                        .bind(to_i64(at))
                        .execute(&mut *conn)
                        .await
                        .map_err(db)?;
                }
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl LogStore for $store {
            async fn exists(&mut self, session_id: &str) -> Result<bool, StoreError> {
                let row = sqlx::query(EXISTS)
                    .bind(session_id)
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(row.is_some())
            }

            async fn lease(&mut self, session_id: &str) -> Result<(), StoreError> {
                self.take_lease(session_id, false).await.map(drop)
            }

            async fn steal_lease(
                &mut self,
                session_id: &str,
            ) -> Result<Option<String>, StoreError> {
                self.take_lease(session_id, true).await
            }

            async fn remove(&mut self, session_id: &str) -> Result<(), StoreError> {
                self.delete_session(session_id, None).await
            }

            async fn prune(&mut self, session_id: &str) -> Result<(), StoreError> {
                self.delete_session(session_id, Some(reel_engine::now_ms()))
                    .await
            }

            async fn snapshot(&mut self, session_id: &str) -> Result<SessionState, StoreError> {
                self.snapshot_at_most(session_id, u64::MAX).await
            }

            async fn entities_ordinal(&mut self, session_id: &str) -> Result<u64, StoreError> {
                let row = sqlx::query(ENTITIES_ORDINAL)
                    .bind(session_id)
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(row.map_or(0, |row| row.get::<i64, _>(0) as u64))
            }

            async fn events(
                &mut self,
                session_id: &str,
                after: u64,
            ) -> Result<Vec<LogEntry>, StoreError> {
                // Every event: as rows, which no limit on one value's size can cut short.
                self.event_rows(session_id, after, u32::MAX).await
            }

            async fn entities(
                &mut self,
                session_id: &str,
            ) -> Result<(u64, Vec<SnapshotEntity>), StoreError> {
                let ordinal = self.entities_ordinal(session_id).await?;
                let rows = sqlx::query(ENTITIES)
                    .bind(session_id)
                    .fetch_all(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                let entities = rows
                    .iter()
                    .map(|row| {
                        entity_from(
                            session_id,
                            row.get(0),
                            row.get(1),
                            row.get(2),
                            row.get(3),
                            row.get(4),
                            row.get(5),
                        )
                    })
                    .collect::<Result<_, _>>()?;
                Ok((ordinal, entities))
            }

            async fn commit(
                &mut self,
                session_id: &str,
                commit: &Commit,
            ) -> Result<(), StoreError> {
                let last = commit.events.last().map(|e| e.ordinal);
                match last.or(commit.entities_ordinal) {
                    Some(last) => self.write_commit(session_id, commit, last).await,
                    None => Ok(()),
                }
            }

            async fn release(&mut self, session_id: &str) -> Result<(), StoreError> {
                self.give_up_lease(session_id).await
            }
        }

        #[async_trait::async_trait]
        impl SessionCatalog for $store {
            async fn sessions(&mut self) -> Result<Vec<SessionSummary>, StoreError> {
                let rows = sqlx::query(SESSIONS)
                    .fetch_all(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(rows.iter().map(|row| summary!(row)).collect())
            }

            async fn waiting(
                &mut self,
                after: &str,
                limit: usize,
            ) -> Result<Vec<WaitingSession>, StoreError> {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut conn = self.conn.lock().await;
                let sessions = sqlx::query(WAITING_SESSIONS)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(|e| self.error(e))?;
                let calls = sqlx::query(WAITING_CALLS)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(|e| self.error(e))?;
                drop(conn);
                let mut entities: HashMap<String, Vec<SnapshotEntity>> = HashMap::new();
                for row in &calls {
                    let session_id: String = row.get(0);
                    let entity = entity_from(
                        &session_id,
                        row.get(1),
                        row.get(2),
                        row.get(3),
                        row.get(4),
                        row.get(5),
                        row.get(6),
                    )?;
                    entities.entry(session_id).or_default().push(entity);
                }
                Ok(sessions
                    .iter()
                    .map(|row| {
                        let summary = summary!(row);
                        let stored = entities.remove(&summary.session_id).unwrap_or_default();
                        WaitingSession {
                            pending: pending_approvals(&stored),
                            summary,
                        }
                    })
                    .collect())
            }

            async fn approvals_due(
                &mut self,
                now_ms: u64,
                limit: usize,
            ) -> Result<Vec<String>, StoreError> {
                let rows = sqlx::query(APPROVALS_DUE)
                    .bind(to_i64(now_ms))
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(rows.iter().map(|row| row.get(0)).collect())
            }

            async fn summary(
                &mut self,
                session_id: &str,
            ) -> Result<Option<SessionSummary>, StoreError> {
                let row = sqlx::query(SUMMARY)
                    .bind(session_id)
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(row.map(|row| summary!(row)))
            }

            async fn search(
                &mut self,
                query: &reel_engine::SearchQuery,
            ) -> Result<Vec<reel_engine::SearchHit>, StoreError> {
                self.full_text_search(query).await
            }

            async fn pruned_at(&mut self, session_id: &str) -> Result<Option<u64>, StoreError> {
                let row = sqlx::query(PRUNED_AT)
                    .bind(session_id)
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(row.map(|row| u64::try_from(row.get::<i64, _>(0)).unwrap_or(0)))
            }

            async fn events_page(
                &mut self,
                session_id: &str,
                after: u64,
                limit: u32,
            ) -> Result<Vec<LogEntry>, StoreError> {
                self.read_page(session_id, after, limit).await
            }

            async fn snapshot_at_most(
                &mut self,
                session_id: &str,
                ordinal: u64,
            ) -> Result<SessionState, StoreError> {
                let row = sqlx::query(SNAPSHOT_AT_MOST)
                    .bind(session_id)
                    .bind(to_i64(ordinal))
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                let mut state = match row {
                    Some(row) => state_from(session_id, row.get(0), row.get(1))?,
                    None => SessionState::default(),
                };
                if state.timeline.is_partial() {
                    let stored = SessionCatalog::stored_entities(self, session_id).await?;
                    state.timeline.restore(stored);
                }
                Ok(state)
            }

            async fn stored_entities(
                &mut self,
                session_id: &str,
            ) -> Result<Vec<SnapshotEntity>, StoreError> {
                let (_, entities) = LogStore::entities(self, session_id).await?;
                Ok(entities)
            }

            async fn writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
                self.live_writer(session_id).await
            }

            async fn wait_for_commits(
                &mut self,
                session_id: &str,
                poll: Duration,
            ) -> Result<(), StoreError> {
                self.commits_heard(session_id, poll).await
            }
        }
    };
}

/// A row of [`SESSIONS`] or [`SUMMARY`] as a summary.
macro_rules! summary {
    ($row:expr) => {
        SessionSummary {
            session_id: $row.get(0),
            title: $row.get(1),
            created_at_ms: $row.get(2),
            updated_at_ms: $row.get(3),
            events: $row.get::<i64, _>(4) as u64,
            runs: $row.get::<i64, _>(5) as u64,
            last_run_status: $row.get(6),
        }
    };
}

sql_store!(SqliteStore, SqliteConnection);
sql_store!(PostgresStore, PgConnection);
