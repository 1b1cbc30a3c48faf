//! The PostgreSQL store: the same tables as SQLite (schema in `migrations/postgres`), shared by
//! many processes on many machines, one writer per session.
//!
//! The lease is a session-level advisory lock on the store's connection: the server drops it
//! when the connection ends, so a killed process frees its sessions by itself. Events go in with
//! one `INSERT ... SELECT FROM UNNEST(...)` per commit (about 100k rows/s) instead of a
//! statement per row (about 0.5k/s).

use std::str::FromStr;

use reel_engine::{
    Commit, LogEntry, LogStore, SessionCatalog, SessionState, StoreError, Turn, TurnStore,
    run_tally,
};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{Connection, PgConnection, Row, postgres::PgConnectOptions};

use crate::rows::{
    context_from, context_json, entity_from, entity_json, event_json, now_ms, to_i64,
    usage_columns, usage_from,
};

/// The channel every commit notifies, with the session id as payload.
pub const NOTIFY_CHANNEL: &str = "reel_events";

/// A timeline database on a PostgreSQL server.
pub struct PostgresStore {
    pub(crate) conn: PgConnection,
    /// The DSN without its password, for messages.
    shown: String,
}

impl PostgresStore {
    /// Connects to `dsn` (`postgres://user@host:port/database`) and migrates the schema.
    pub async fn connect(dsn: &str) -> Result<Self, StoreError> {
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
        sqlx::migrate!("../migrations/postgres")
            .run(&mut conn)
            .await
            .map_err(|e| {
                StoreError::Damaged(format!(
                    "{shown}: the timeline schema cannot be migrated ({e}); nothing was changed"
                ))
            })?;
        Ok(Self { conn, shown })
    }

    pub(crate) fn error(&self, error: &sqlx::Error) -> StoreError {
        StoreError::Database(format!("timeline database {}: {error}", self.shown))
    }
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
        let locked: bool = sqlx::query("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
            .bind(session_id)
            .fetch_one(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?
            .get(0);
        if !locked {
            return Err(StoreError::Busy(format!(
                "session {session_id:?} is open in another process on {}; one process writes a session at a time",
                self.shown
            )));
        }
        let now = now_ms();
        sqlx::query("INSERT INTO sessions (session_id, created_at, updated_at) VALUES ($1, $2, $2) ON CONFLICT (session_id) DO NOTHING")
            .bind(session_id)
            .bind(now)
            .execute(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
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
            .bind(status)
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

#[async_trait::async_trait]
impl TurnStore for PostgresStore {
    async fn save_turn(&mut self, turn: &Turn) -> Result<(), StoreError> {
        let query = sqlx::query(
            "INSERT INTO turns (session_id, run_id, status, last_ordinal, model_calls, context_json, created_at, \
             input_tokens, output_tokens, cached_tokens, cost_usd, \
             session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) ON CONFLICT (session_id, run_id) DO UPDATE SET status = excluded.status, \
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
             FROM turns WHERE session_id = $1 \
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
