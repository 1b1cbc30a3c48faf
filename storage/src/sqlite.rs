//! The SQLite store: one file holds the logs of many sessions, their materialized entities and
//! snapshots (schema in `migrations/sqlite`).
//!
//! One connection, WAL journal, `synchronous = NORMAL`: a committed transaction survives the
//! process being killed. Writes start with `BEGIN IMMEDIATE`, so a second writer waits for the
//! busy timeout instead of failing halfway. A file that is not reel's database is refused and
//! left as it is; nothing here ever deletes or "resets" data.

use std::{path::Path, time::Duration};

use reel_engine::{
    Commit, LogEntry, LogStore, SessionCatalog, SessionState, StoreError, Turn, TurnStore,
    run_tally,
};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{
    AssertSqlSafe, ConnectOptions, Row, SqliteConnection,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

use crate::{
    lease,
    rows::{
        context_from, context_json, entity_from, entity_json, event_json, now_ms, to_i64,
        usage_columns, usage_from,
    },
};

/// Rows per multi-row INSERT: one statement costs about 10 us in sqlx, a row far less.
const ROWS_PER_STATEMENT: usize = 200;

/// A timeline database in one SQLite file.
pub struct SqliteStore {
    pub(crate) conn: SqliteConnection,
    pub(crate) path: String,
}

impl SqliteStore {
    /// Opens (creating it, and its folder, if missing) and migrates the database at `path`.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(folder).map_err(|e| {
                StoreError::Database(format!("cannot create the folder of {shown}: {e}"))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5));
        let mut conn = options
            .connect()
            .await
            .map_err(|e| open_error(&shown, &e))?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut conn)
            .await
            .map_err(|e| open_error(&shown, &e))?;
        Ok(Self { conn, path: shown })
    }

    /// `PRAGMA integrity_check`: "ok" for a sound file.
    pub async fn integrity_check(&mut self) -> Result<String, StoreError> {
        let row = sqlx::query("PRAGMA integrity_check")
            .fetch_one(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        row.try_get::<String, _>(0).map_err(|e| self.error(&e))
    }

    /// Checkpoints the WAL into the main file (on shutdown, so the file stands alone).
    pub async fn checkpoint(&mut self) -> Result<(), StoreError> {
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
    }

    pub(crate) fn error(&self, error: &sqlx::Error) -> StoreError {
        let hint = if error.to_string().contains("database is locked") {
            " (another program holds its write lock; reel waited 5 s for it)"
        } else {
            ""
        };
        StoreError::Database(format!("timeline database {}: {error}{hint}", self.path))
    }

    /// Runs `work` inside `BEGIN IMMEDIATE ... COMMIT`, rolling back on error.
    async fn immediate<T>(
        &mut self,
        work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        match work(&mut self.conn).await {
            Ok(value) => {
                sqlx::query("COMMIT")
                    .execute(&mut self.conn)
                    .await
                    .map_err(|e| self.error(&e))?;
                Ok(value)
            }
            Err(error) => {
                let _ = sqlx::query("ROLLBACK").execute(&mut self.conn).await;
                Err(match error {
                    StoreError::Database(message) => {
                        StoreError::Database(format!("timeline database {}: {message}", self.path))
                    }
                    other => other,
                })
            }
        }
    }
}

fn open_error(path: &str, error: &dyn std::fmt::Display) -> StoreError {
    let text = error.to_string();
    if text.contains("not a database") || text.contains("malformed") || text.contains("migration") {
        StoreError::Damaged(format!(
            "{path} is not a reel timeline database or is damaged ({text}); it was left untouched"
        ))
    } else if read_only(path) {
        StoreError::Database(format!(
            "cannot open timeline database {path}: it is read-only, and reel writes to it (and to its -wal and -shm files beside it) ({text})"
        ))
    } else {
        StoreError::Database(format!("cannot open timeline database {path}: {text}"))
    }
}

/// Whether `path` exists and cannot be opened for writing (a read-only file or file system).
fn read_only(path: &str) -> bool {
    Path::new(path).exists() && std::fs::OpenOptions::new().append(true).open(path).is_err()
}

fn db(error: sqlx::Error) -> StoreError {
    StoreError::Database(error.to_string())
}

#[async_trait::async_trait]
impl LogStore for SqliteStore {
    async fn exists(&mut self, session_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT 1 FROM sessions WHERE session_id = ?")
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.is_some())
    }

    async fn lease(&mut self, session_id: &str) -> Result<(), StoreError> {
        let session_id = session_id.to_owned();
        let path = self.path.clone();
        self.immediate(async move |conn| {
            let holder: Option<String> = sqlx::query("SELECT owner FROM leases WHERE session_id = ?")
                .bind(&session_id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db)?
                .map(|row| row.get(0));
            if let Some(owner) = holder.filter(|owner| lease::held_by_another(owner)) {
                return Err(StoreError::Busy(format!(
                    "session {session_id:?} is open in another process ({owner}) on {path}; one process writes a session at a time"
                )));
            }
            let now = now_ms();
            sqlx::query("INSERT INTO leases (session_id, owner, acquired_at) VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at")
                .bind(&session_id)
                .bind(lease::this_process())
                .bind(now)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
            sqlx::query("INSERT INTO sessions (session_id, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (session_id) DO NOTHING")
                .bind(&session_id)
                .bind(now)
                .bind(now)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn snapshot(&mut self, session_id: &str) -> Result<SessionState, StoreError> {
        self.snapshot_at_most(session_id, u64::MAX).await
    }

    async fn entities_ordinal(&mut self, session_id: &str) -> Result<u64, StoreError> {
        let row = sqlx::query("SELECT entities_ordinal FROM sessions WHERE session_id = ?")
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.map_or(0, |row| row.get::<i64, _>(0) as u64))
    }

    async fn events(&mut self, session_id: &str, after: u64) -> Result<Vec<LogEntry>, StoreError> {
        self.events_page(session_id, after, u32::MAX).await
    }

    async fn entities(
        &mut self,
        session_id: &str,
    ) -> Result<(u64, Vec<SnapshotEntity>), StoreError> {
        let ordinal = self.entities_ordinal(session_id).await?;
        let rows = sqlx::query(
            "SELECT entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json FROM entities \
             WHERE session_id = ? ORDER BY created_ordinal, entity_id",
        )
        .bind(session_id)
        .fetch_all(&mut self.conn)
        .await
        .map_err(|e| self.error(&e))?;
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

    async fn commit(&mut self, session_id: &str, commit: &Commit) -> Result<(), StoreError> {
        let Some(last) = commit
            .events
            .last()
            .map(|e| e.ordinal)
            .or(commit.entities_ordinal)
        else {
            return Ok(());
        };
        let session_id = session_id.to_owned();
        let path = self.path.clone();
        self.immediate(async move |conn| {
            let stored: i64 = sqlx::query("SELECT last_ordinal FROM sessions WHERE session_id = ?")
                .bind(&session_id)
                .fetch_one(&mut *conn)
                .await
                .map_err(db)?
                .get(0);
            if let Some(first) = commit.events.first()
                && first.ordinal != stored as u64 + 1
            {
                return Err(StoreError::Damaged(format!(
                    "session {session_id:?} in {path} ends at ordinal {stored}, but the next event is {}: another writer?",
                    first.ordinal
                )));
            }
            insert_events(conn, &session_id, commit).await?;
            upsert_entities(conn, &session_id, commit).await?;
            if let Some((ordinal, state)) = &commit.snapshot {
                sqlx::query("INSERT INTO snapshots (session_id, ordinal, state_json, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (session_id, ordinal) DO NOTHING")
                    .bind(&session_id)
                    .bind(to_i64(*ordinal))
                    .bind(state)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await
                    .map_err(db)?;
                sqlx::query("DELETE FROM snapshots WHERE session_id = ?1 AND ordinal < (SELECT min(ordinal) FROM (SELECT ordinal FROM snapshots WHERE session_id = ?1 ORDER BY ordinal DESC LIMIT 2))")
                    .bind(&session_id)
                    .execute(&mut *conn)
                    .await
                    .map_err(db)?;
            }
            let (runs, status) = run_tally(&commit.events);
            sqlx::query("UPDATE sessions SET last_ordinal = max(last_ordinal, ?), updated_at = ?, entities_ordinal = coalesce(?, entities_ordinal), title = CASE WHEN title = '' THEN coalesce(?, '') ELSE title END, runs = runs + ?, last_run_status = coalesce(?, last_run_status) WHERE session_id = ?")
                .bind(to_i64(last))
                .bind(now_ms())
                .bind(commit.entities_ordinal.map(to_i64))
                .bind(commit.title.as_deref())
                .bind(to_i64(runs))
                .bind(status)
                .bind(&session_id)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn release(&mut self, session_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE session_id = ? AND owner = ?")
            .bind(session_id)
            .bind(lease::this_process())
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        self.checkpoint().await
    }
}

#[async_trait::async_trait]
impl TurnStore for SqliteStore {
    async fn save_turn(&mut self, turn: &Turn) -> Result<(), StoreError> {
        let query = sqlx::query(
            "INSERT INTO turns (session_id, run_id, status, last_ordinal, model_calls, context_json, created_at, \
             input_tokens, output_tokens, cached_tokens, cost_usd, \
             session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, run_id) DO UPDATE SET status = excluded.status, \
             last_ordinal = excluded.last_ordinal, model_calls = excluded.model_calls, context_json = excluded.context_json, \
             input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, \
             cached_tokens = excluded.cached_tokens, cost_usd = excluded.cost_usd, \
             session_input_tokens = excluded.session_input_tokens, session_output_tokens = excluded.session_output_tokens, \
             session_cached_tokens = excluded.session_cached_tokens, session_cost_usd = excluded.session_cost_usd",
        )
        .bind(&turn.session_id)
        .bind(&turn.run_id)
        .bind(&turn.status)
        .bind(to_i64(turn.last_ordinal))
        .bind(to_i64(turn.model_calls))
        .bind(context_json(&turn.context)?)
        .bind(now_ms());
        let (input, output, cached, cost) = usage_columns(&turn.usage);
        let query = query.bind(input).bind(output).bind(cached).bind(cost);
        let (input, output, cached, cost) = usage_columns(&turn.session_usage);
        let query = query.bind(input).bind(output).bind(cached).bind(cost);
        query
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
    }

    async fn latest_turn(&mut self, session_id: &str) -> Result<Option<Turn>, StoreError> {
        let row = sqlx::query(
            "SELECT run_id, status, last_ordinal, model_calls, context_json, \
             input_tokens, output_tokens, cached_tokens, cost_usd, \
             session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd \
             FROM turns WHERE session_id = ? \
             ORDER BY last_ordinal DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&mut self.conn)
        .await
        .map_err(|e| self.error(&e))?;
        row.map(|row| {
            let run_id: String = row.get(0);
            Ok(Turn {
                session_id: session_id.to_owned(),
                context: context_from(session_id, &run_id, row.get(4))?,
                status: row.get(1),
                last_ordinal: row.get::<i64, _>(2) as u64,
                model_calls: row.get::<i64, _>(3) as u64,
                usage: usage_from(row.get(5), row.get(6), row.get(7), row.get(8)),
                session_usage: usage_from(row.get(9), row.get(10), row.get(11), row.get(12)),
                run_id,
            })
        })
        .transpose()
    }
}

async fn insert_events(
    conn: &mut SqliteConnection,
    session_id: &str,
    commit: &Commit,
) -> Result<(), StoreError> {
    for chunk in commit.events.chunks(ROWS_PER_STATEMENT) {
        let mut sql = String::from(
            "INSERT INTO events (session_id, ordinal, name, payload_json, created_at) VALUES ",
        );
        for at in 0..chunk.len() {
            sql.push_str(if at == 0 {
                "(?, ?, ?, ?, ?)"
            } else {
                ", (?, ?, ?, ?, ?)"
            });
        }
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for entry in chunk {
            let payload = event_json(entry)?;
            query = query
                .bind(session_id)
                .bind(to_i64(entry.ordinal))
                .bind(entry.name())
                .bind(payload)
                .bind(to_i64(entry.recorded_at_ms));
        }
        query.execute(&mut *conn).await.map_err(db)?;
    }
    Ok(())
}

async fn upsert_entities(
    conn: &mut SqliteConnection,
    session_id: &str,
    commit: &Commit,
) -> Result<(), StoreError> {
    for chunk in commit.entities.chunks(ROWS_PER_STATEMENT) {
        let mut sql = String::from(
            "INSERT INTO entities (session_id, entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json) VALUES ",
        );
        for at in 0..chunk.len() {
            sql.push_str(if at == 0 {
                "(?, ?, ?, ?, ?, ?, ?)"
            } else {
                ", (?, ?, ?, ?, ?, ?, ?)"
            });
        }
        sql.push_str(
            " ON CONFLICT (session_id, entity_id) DO UPDATE SET kind = excluded.kind, created_ordinal = excluded.created_ordinal, \
             last_event_ordinal = excluded.last_event_ordinal, tombstone = excluded.tombstone, payload_json = excluded.payload_json",
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for entity in chunk {
            let payload = entity_json(entity)?;
            query = query
                .bind(session_id)
                .bind(&entity.id)
                .bind(&entity.kind)
                .bind(to_i64(entity.created_ordinal))
                .bind(to_i64(entity.last_event_ordinal))
                .bind(entity.tombstone)
                .bind(payload);
        }
        query.execute(&mut *conn).await.map_err(db)?;
    }
    Ok(())
}
