//! The PostgreSQL store: the same tables as SQLite (schema in `migrations/postgres`), shared by
//! many processes on many machines, one writer per session.
//!
//! The lease is a session-level advisory lock on the store's connection: the server drops it
//! when the connection ends, so a killed process frees its sessions by itself. Events go in with
//! one `INSERT ... SELECT FROM UNNEST(...)` per commit (about 100k rows/s) instead of a
//! statement per row (about 0.5k/s).
//!
//! reel's tables live in the connection's current schema (the first of its `search_path`, which
//! a DSN sets with `?options=-csearch_path%3DNAME`). Other programs' tables may share that
//! schema; tables named like reel's without reel's migration table, or another program's
//! migration table, make reel refuse the database untouched. A read-only store's connection
//! refuses every write.

use std::str::FromStr;

use reel_engine::{
    Commit, LogEntry, LogStore, RunStatus, SessionCatalog, SessionState, StoreError, run_tally,
};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{
    Connection, PgConnection, Row,
    postgres::{PgConnectOptions, PgListener},
};

use crate::{
    Access,
    rows::{entity_from, entity_json, event_json, now_ms, to_i64},
    schema::{self, MIGRATION_TABLE, POSTGRES_MIGRATIONS, REEL_TABLES, Schema},
};

/// The channel every commit notifies, with the session id as payload.
pub(crate) const NOTIFY_CHANNEL: &str = "reel_events";

/// How a commit's lease check finds the holder of a session's advisory lock (a bigint lock
/// shows in pg_locks as classid, the high half, and objid, the low half).
pub(crate) const LOCK_HOLDER: &str = "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid, \
     (SELECT hashtextextended($1, 0) AS h) k \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid::text::bigint = ((k.h >> 32) & 4294967295) \
     AND l.objid::text::bigint = (k.h & 4294967295) \
     AND l.pid <> pg_backend_pid() LIMIT 1";

/// A timeline database on a PostgreSQL server.
pub struct PostgresStore {
    pub(crate) conn: PgConnection,
    /// The DSN without its password, for messages.
    shown: String,
    /// The DSN itself (never shown): a follower's listener connects with it.
    dsn: String,
    /// Hears of commits, once a follower asks ([`SessionCatalog::wait_for_commits`]).
    listener: Option<PgListener>,
}

impl PostgresStore {
    /// Connects to `dsn` (`postgres://user@host:port/database`). For writing, reel's schema is
    /// created or brought up to date; for reading, it must be there and current, and the
    /// connection refuses writes.
    pub async fn connect(dsn: &str, access: Access) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(dsn)
            .map_err(|e| StoreError::Database(format!("invalid PostgreSQL DSN: {e}")))?
            .application_name(&format!("reel/{}", std::process::id()));
        let shown = format!(
            "postgres://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        let mut conn = PgConnection::connect_with(&options)
            .await
            .map_err(|e| StoreError::Database(format!("cannot connect to {shown}: {e}")))?;
        let schema = read_schema(&mut conn)
            .await
            .map_err(|e| StoreError::Database(format!("cannot read the schema of {shown}: {e}")))?;
        match (schema, access) {
            (Err(why), _) => {
                return Err(StoreError::Foreign(format!(
                    "{shown} is not a reel timeline database: {why}; it was left untouched (give reel a schema of its own with ?options=-csearch_path%3Dreel)"
                )));
            }
            (Ok(Schema::Empty), Access::ReadOnly) => {
                return Err(StoreError::NotFound(format!(
                    "{shown} holds no reel timeline yet (a writing command such as run-command --session-id creates one)"
                )));
            }
            (Ok(Schema::Reel { pending }), Access::ReadOnly) if pending > 0 => {
                return Err(StoreError::Database(format!(
                    "{shown} was written by an older reel; a writing command (run-command --resume, replay, fork) upgrades it, and read-only commands never change a database"
                )));
            }
            (Ok(_), Access::ReadOnly) => {
                sqlx::query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                    .execute(&mut conn)
                    .await
                    .map_err(|e| StoreError::Database(format!("{shown}: {e}")))?;
            }
            (Ok(_), Access::ReadWrite) => {
                POSTGRES_MIGRATIONS.run(&mut conn).await.map_err(|e| {
                    StoreError::Database(format!("cannot bring {shown} up to reel's schema: {e}"))
                })?;
            }
        }
        Ok(Self {
            conn,
            shown,
            dsn: dsn.to_owned(),
            listener: None,
        })
    }

    /// The connection that hears every commit's notification, made on first use.
    pub(crate) async fn listener(&mut self) -> Result<&mut PgListener, StoreError> {
        if self.listener.is_none() {
            let failed = |e: sqlx::Error| {
                StoreError::Database(format!("cannot listen for commits on {}: {e}", self.shown))
            };
            let mut listener = PgListener::connect(&self.dsn).await.map_err(failed)?;
            listener.listen(NOTIFY_CHANNEL).await.map_err(failed)?;
            self.listener = Some(listener);
        }
        Ok(self.listener.as_mut().expect("made above"))
    }

    pub(crate) fn error(&self, error: &sqlx::Error) -> StoreError {
        StoreError::Database(format!("timeline database {}: {error}", self.shown))
    }

    /// The server process holding `session_id`'s lock, and its application name.
    async fn lock_holder(&mut self, session_id: &str) -> Result<Option<(i32, String)>, StoreError> {
        let row = sqlx::query(LOCK_HOLDER)
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.map(|row| {
            (
                row.get(0),
                row.get::<Option<String>, _>(1).unwrap_or_default(),
            )
        }))
    }

    async fn try_lock(&mut self, session_id: &str) -> Result<bool, StoreError> {
        let locked = sqlx::query("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
            .bind(session_id)
            .fetch_one(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?
            .get(0);
        Ok(locked)
    }
}

/// What the connection's current schema holds: reel's schema, nothing of reel's, or why reel
/// must not touch it.
async fn read_schema(conn: &mut PgConnection) -> Result<Result<Schema, String>, sqlx::Error> {
    let tables: Vec<String> = sqlx::query(
        "SELECT c.relname::text FROM pg_class c \
         WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
         AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect();
    if tables.iter().any(|t| t == MIGRATION_TABLE) {
        let applied: Vec<schema::Applied> =
            sqlx::query("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect();
        return Ok(schema::judge(&applied, &POSTGRES_MIGRATIONS));
    }
    // Other programs' tables may share a PostgreSQL schema; only reel's names matter here.
    let clashing: Vec<String> = tables
        .into_iter()
        .filter(|t| REEL_TABLES.contains(&t.as_str()))
        .collect();
    Ok(schema::judge_tables(&clashing))
}

fn db(error: sqlx::Error) -> StoreError {
    StoreError::Database(error.to_string())
}

#[async_trait::async_trait]
impl LogStore for PostgresStore {
    async fn exists(&mut self, session_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT 1 FROM sessions WHERE session_id = $1")
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.is_some())
    }

    async fn lease(&mut self, session_id: &str) -> Result<(), StoreError> {
        if self.try_lock(session_id).await? {
            return Ok(());
        }
        let holder = match self.lock_holder(session_id).await? {
            Some((_, name)) if !name.is_empty() => format!(" ({name})"),
            _ => String::new(),
        };
        Err(StoreError::Busy(format!(
            "session {session_id:?} is open in another process{holder} on {}; one process writes a session at a time (--steal-lease takes it over, ending that process's connection)",
            self.shown
        )))
    }

    async fn steal_lease(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        if self.try_lock(session_id).await? {
            return Ok(None);
        }
        let Some((pid, name)) = self.lock_holder(session_id).await? else {
            return Err(StoreError::Busy(format!(
                "session {session_id:?} is locked on {} by a connection reel cannot see (another database user?)",
                self.shown
            )));
        };
        // The lock is the holder's connection's: ending the connection frees it.
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        for _ in 0..50 {
            if self.try_lock(session_id).await? {
                return Ok(Some(format!("{name} (server process {pid})")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(StoreError::Busy(format!(
            "session {session_id:?} on {} is still locked 5 s after ending its holder's connection",
            self.shown
        )))
    }

    async fn remove(&mut self, session_id: &str) -> Result<(), StoreError> {
        let mut tx = self.conn.begin().await.map_err(db)?;
        for table in ["events", "entities", "snapshots", "turns", "sessions"] {
            let sql = format!("DELETE FROM {table} WHERE session_id = $1");
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(session_id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn snapshot(&mut self, session_id: &str) -> Result<SessionState, StoreError> {
        self.snapshot_at_most(session_id, u64::MAX).await
    }

    async fn entities_ordinal(&mut self, session_id: &str) -> Result<u64, StoreError> {
        let row = sqlx::query("SELECT entities_ordinal FROM sessions WHERE session_id = $1")
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
             WHERE session_id = $1 ORDER BY created_ordinal, entity_id",
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
        let shown = self.shown.clone();
        let mut tx = self.conn.begin().await.map_err(db)?;
        // A session's row is made by its first commit, so a writer that fails before storing
        // anything leaves no empty session behind.
        let now = now_ms();
        sqlx::query("INSERT INTO sessions (session_id, created_at, updated_at) VALUES ($1, $2, $2) ON CONFLICT (session_id) DO NOTHING")
            .bind(session_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        let stored: i64 =
            sqlx::query("SELECT last_ordinal FROM sessions WHERE session_id = $1 FOR UPDATE")
                .bind(session_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(db)?
                .get(0);
        if let Some(first) = commit.events.first()
            && first.ordinal != stored as u64 + 1
        {
            return Err(StoreError::Damaged(format!(
                "session {session_id:?} on {shown} ends at ordinal {stored}, but the next event is {}: another writer?",
                first.ordinal
            )));
        }
        if !commit.events.is_empty() {
            let mut ordinals = Vec::with_capacity(commit.events.len());
            let mut names = Vec::with_capacity(commit.events.len());
            let mut payloads = Vec::with_capacity(commit.events.len());
            let mut times = Vec::with_capacity(commit.events.len());
            for entry in &commit.events {
                ordinals.push(to_i64(entry.ordinal));
                names.push(entry.name().to_owned());
                payloads.push(event_json(entry)?);
                times.push(to_i64(entry.recorded_at_ms));
            }
            sqlx::query(
                "INSERT INTO events (session_id, ordinal, name, payload_json, created_at) \
                 SELECT $1, o, n, p, t FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS e(o, n, p, t)",
            )
            .bind(session_id)
            .bind(&ordinals)
            .bind(&names)
            .bind(&payloads)
            .bind(&times)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        if !commit.entities.is_empty() {
            let mut ids = Vec::new();
            let mut kinds = Vec::new();
            let mut created = Vec::new();
            let mut changed = Vec::new();
            let mut tombstones = Vec::new();
            let mut payloads = Vec::new();
            for entity in &commit.entities {
                ids.push(entity.id.clone());
                kinds.push(entity.kind.clone());
                created.push(to_i64(entity.created_ordinal));
                changed.push(to_i64(entity.last_event_ordinal));
                tombstones.push(entity.tombstone);
                payloads.push(entity_json(entity)?);
            }
            sqlx::query(
                "INSERT INTO entities (session_id, entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json) \
                 SELECT $1, i, k, c, l, d, p FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::boolean[], $7::text[]) AS e(i, k, c, l, d, p) \
                 ON CONFLICT (session_id, entity_id) DO UPDATE SET kind = excluded.kind, created_ordinal = excluded.created_ordinal, \
                 last_event_ordinal = excluded.last_event_ordinal, tombstone = excluded.tombstone, payload_json = excluded.payload_json",
            )
            .bind(session_id)
            .bind(&ids)
            .bind(&kinds)
            .bind(&created)
            .bind(&changed)
            .bind(&tombstones)
            .bind(&payloads)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        if let Some((ordinal, state)) = &commit.snapshot {
            sqlx::query("INSERT INTO snapshots (session_id, ordinal, state_json, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                .bind(session_id)
                .bind(to_i64(*ordinal))
                .bind(state)
                .bind(now_ms())
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            sqlx::query("DELETE FROM snapshots WHERE session_id = $1 AND ordinal < (SELECT min(ordinal) FROM (SELECT ordinal FROM snapshots WHERE session_id = $1 ORDER BY ordinal DESC LIMIT 2) AS newest)")
                .bind(session_id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        let (runs, status) = run_tally(&commit.events);
        sqlx::query("UPDATE sessions SET last_ordinal = greatest(last_ordinal, $1), updated_at = $2, entities_ordinal = coalesce($3, entities_ordinal), title = CASE WHEN title = '' THEN coalesce($4, '') ELSE title END, runs = runs + $6, last_run_status = coalesce($7, last_run_status) WHERE session_id = $5")
            .bind(to_i64(last))
            .bind(now_ms())
            .bind(commit.entities_ordinal.map(to_i64))
            .bind(commit.title.as_deref())
            .bind(session_id)
            .bind(to_i64(runs))
            .bind(status.map(RunStatus::as_str))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        // Followers (`reel tail`) hear of the commit when it becomes visible.
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn release(&mut self, session_id: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
            .bind(session_id)
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
    }
}
