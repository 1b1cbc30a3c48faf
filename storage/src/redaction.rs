//! Writing a redaction (`reel redact`): a session's erased events, the event that records the
//! erasure, and everything derived from the log (entities, the search index, the snapshot, the
//! turns), in one transaction, so no reader ever sees erased
//! events beside the old text.
//!
//! Then the old bytes are made to go from the files where the backend allows it. SQLite
//! writes with `secure_delete` (reel's writing connections always do: freed space is zeroed,
//! so no earlier write left a stale copy either), merges the full-text index (whose old
//! segments still hold the erased words), and checkpoints the WAL into the database,
//! truncating it. PostgreSQL keeps an updated row's old version until VACUUM, and VACUUM only
//! marks its space reusable; `VACUUM FULL` rewrites the tables into new files (it locks them
//! while it does), which [`Erasure::Vacuum`] asks for; on SQLite it runs `VACUUM`, which
//! rewrites the whole file (for a database an older reel wrote without `secure_delete`).
//! Neither backend can reach copies elsewhere: backups, replicas, PostgreSQL's WAL archive.

use std::sync::Arc;

use reel_engine::{ContextMessage, LogEntry, StoreError, now_ms};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{Row, SqliteConnection};

use crate::{
    PostgresStore, SqliteStore, TimelineStore,
    postgres_notices::notify_commit,
    postgres_search_docs,
    rows::{ENTITY_COLUMNS, EntityRow, context_json, db, event_json, to_i64},
    sql_store::INSERT_SNAPSHOT,
    timeline_store::delegate,
    turns::UPDATE_CONTEXT,
};

/// A session with content erased, as [`TimelineStore::redact`] writes it.
#[derive(Debug)]
pub struct Redacted {
    /// The events whose content changed, at their ordinals.
    pub rewritten: Vec<LogEntry>,
    /// The event that records the redaction: the stored log's next.
    pub appended: LogEntry,
    /// Every entity as of `appended`, folded from the rewritten log.
    pub entities: Vec<SnapshotEntity>,
    /// The projections' state as of `appended`, as JSON: the session's only snapshot after.
    pub snapshot: String,
    /// The session's title (its first prompt) as it reads now.
    pub title: String,
    /// The model context after each stored turn, by the turn's last ordinal.
    pub turns: Vec<(u64, Vec<Arc<ContextMessage>>)>,
}

/// What is done after the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Erasure {
    /// Nothing more than the backend's own erasing: on PostgreSQL the old row versions stay
    /// in the files until VACUUM reuses their space.
    Commit,
    /// Rewrite the files: `VACUUM FULL` of the tables that held the content on PostgreSQL,
    /// `VACUUM` of the whole file on SQLite.
    Vacuum,
}

/// What became of the old bytes, beyond the transaction.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Erased {
    /// SQLite: another connection was reading an older state, so the WAL could not be
    /// truncated and keeps the old pages until the next checkpoint.
    pub wal_kept: bool,
}

/// The session row, ending where the log now ends, with its title as it reads now. It only
/// matches while the stored log ends where the redaction found it.
const UPDATE_SESSION: &str = "UPDATE sessions SET last_ordinal = $2, entities_ordinal = $2, \
     updated_at = $3, title = $4 WHERE session_id = $1 AND last_ordinal = $5";
/// Rows per multi-row statement (SQLite takes 32,766 parameters; an entity has 7).
const ROWS_PER_STATEMENT: usize = 200;

/// `rows` events' new payloads, `$1` the session and then (ordinal, payload) pairs; a VALUES
/// list's columns are `column1`, `column2` on both backends.
fn update_events(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|n| format!("(${}, ${})", 2 * n + 2, 2 * n + 3))
        .collect();
    format!(
        "UPDATE events SET payload_json = v.column2 FROM (VALUES {}) AS v \
         WHERE events.session_id = $1 AND events.ordinal = v.column1",
        values.join(", ")
    )
}

/// `rows` entities, seven values each.
fn insert_entities(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|n| {
            let first = 7 * n + 1;
            let places: Vec<String> = (first..first + 7).map(|p| format!("${p}")).collect();
            format!("({})", places.join(", "))
        })
        .collect();
    format!("INSERT INTO {ENTITY_COLUMNS} VALUES {}", values.join(", "))
}
const INSERT_EVENT: &str = "INSERT INTO events (session_id, ordinal, name, payload_json, created_at) \
     VALUES ($1, $2, $3, $4, $5)";

/// The tables whose rows held the content (the search index follows `entities`).
const VACUUMED: &str = "VACUUM FULL events, entities, snapshots, turns, search_docs, sessions";

/// The statements of a redaction, on either backend's connection.
macro_rules! write_redaction {
    ($conn:expr, $session_id:expr, $redacted:expr) => {{
        let (conn, session_id, redacted): (_, &str, &Redacted) = ($conn, $session_id, $redacted);
        let appended = &redacted.appended;
        let now = to_i64(now_ms());
        let updated = sqlx::query(UPDATE_SESSION)
            .bind(session_id)
            .bind(to_i64(appended.ordinal))
            .bind(now)
            .bind(&redacted.title)
            .bind(to_i64(appended.ordinal - 1))
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        if updated.rows_affected() != 1 {
            return Err(StoreError::Busy(format!(
                "session {session_id:?} no longer ends at ordinal {}: another process wrote it meanwhile; nothing was changed",
                appended.ordinal - 1
            )));
        }
        // A few hundred rows a statement: a million statements would each be a round trip.
        for chunk in redacted.rewritten.chunks(ROWS_PER_STATEMENT) {
            let sql = update_events(chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(session_id);
            for entry in chunk {
                query = query.bind(to_i64(entry.ordinal)).bind(event_json(entry)?);
            }
            query.execute(&mut *conn).await.map_err(db)?;
        }
        sqlx::query(INSERT_EVENT)
            .bind(session_id)
            .bind(to_i64(appended.ordinal))
            .bind(appended.name())
            .bind(event_json(appended)?)
            .bind(to_i64(appended.recorded_at_ms))
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        for table in ["entities", "snapshots"] {
            let sql = format!("DELETE FROM {table} WHERE session_id = $1");
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(session_id)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
        }
        for chunk in redacted.entities.chunks(ROWS_PER_STATEMENT) {
            let sql = insert_entities(chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for entity in chunk {
                let row = EntityRow::of(entity)?;
                query = query
                    .bind(session_id)
                    .bind(row.id)
                    .bind(row.kind)
                    .bind(row.created_ordinal)
                    .bind(row.last_event_ordinal)
                    .bind(row.tombstone)
                    .bind(row.payload_json);
            }
            query.execute(&mut *conn).await.map_err(db)?;
        }
        sqlx::query(INSERT_SNAPSHOT)
            .bind(session_id)
            .bind(to_i64(appended.ordinal))
            .bind(&redacted.snapshot)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        for (last_ordinal, context) in &redacted.turns {
            sqlx::query(UPDATE_CONTEXT)
                .bind(session_id)
                .bind(to_i64(*last_ordinal))
                .bind(context_json(context)?)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
        }
        Ok::<(), StoreError>(())
    }};
}

impl TimelineStore {
    /// Writes `redacted` in one transaction, then erases the old bytes as the backend allows
    /// (see the module's doc). Call it holding the session's lease.
    pub async fn redact(
        &mut self,
        session_id: &str,
        redacted: &Redacted,
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        match self {
            TimelineStore::Sqlite(store) => store.redact(session_id, redacted, erasure).await,
            TimelineStore::Postgres(store) => store.redact(session_id, redacted, erasure).await,
        }
    }

    /// The last ordinals of the session's stored turns (what [`Redacted::turns`] rewrites).
    pub async fn turn_ends(&mut self, session_id: &str) -> Result<Vec<u64>, StoreError> {
        delegate!(self, store => store.turn_ends(session_id).await)
    }

    /// Replaces the contexts of the session's stored turns in this database used as a turns
    /// database, in one transaction, then erases the old bytes as [`TimelineStore::redact`]
    /// does.
    pub async fn redact_turns(
        &mut self,
        session_id: &str,
        turns: &[(u64, Vec<Arc<ContextMessage>>)],
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        delegate!(self, store => store.redact_turns(session_id, turns, erasure).await)
    }
}

impl SqliteStore {
    async fn redact(
        &mut self,
        session_id: &str,
        redacted: &Redacted,
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        // Writing connections have it on already; a store opened otherwise gets it here.
        self.statement("PRAGMA secure_delete = ON").await?;
        let session = session_id.to_owned();
        let written = self
            .immediate(async |conn: &mut SqliteConnection| {
                write_redaction!(&mut *conn, &session, redacted)?;
                // The index's old segments still hold the erased words until merged.
                sqlx::query("INSERT INTO search_fts (search_fts) VALUES ('optimize')")
                    .execute(&mut *conn)
                    .await
                    .map_err(db)?;
                Ok(())
            })
            .await;
        written?;
        self.erase_old_bytes(erasure).await
    }

    /// Replaces the session's stored turns, then takes the old contexts out of the files.
    async fn redact_turns(
        &mut self,
        session_id: &str,
        turns: &[(u64, Vec<Arc<ContextMessage>>)],
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        self.statement("PRAGMA secure_delete = ON").await?;
        self.rewrite_turns(session_id, turns).await?;
        self.erase_old_bytes(erasure).await
    }

    /// After a committed redaction: rewrites the file if asked, then checkpoints the WAL
    /// into it and truncates the WAL, whose frames still hold the pages as they were.
    async fn erase_old_bytes(&mut self, erasure: Erasure) -> Result<Erased, StoreError> {
        if erasure == Erasure::Vacuum {
            self.statement("VACUUM").await?;
        }
        let row = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        let busy: i64 = row.get(0);
        Ok(Erased {
            wal_kept: busy != 0,
        })
    }

    async fn statement(&mut self, sql: &'static str) -> Result<(), StoreError> {
        sqlx::query(sql)
            .execute(&mut *self.conn.lock().await)
            .await
            .map(drop)
            .map_err(|e| self.error(e))
    }
}

impl PostgresStore {
    async fn redact(
        &mut self,
        session_id: &str,
        redacted: &Redacted,
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        use sqlx::Connection;
        let written = async {
            let mut conn = self.conn.lock().await;
            let mut tx = conn.begin().await.map_err(db)?;
            write_redaction!(&mut *tx, session_id, redacted)?;
            // The entities were written anew (their old documents went with the old rows).
            postgres_search_docs::write(&mut tx, session_id, &redacted.entities, self.writing)
                .await?;
            // A follower (`reel tail`, a server's stream) hears of the new event.
            notify_commit(&mut tx, session_id).await?;
            tx.commit().await.map_err(db)?;
            if erasure == Erasure::Vacuum {
                sqlx::query(VACUUMED)
                    .execute(&mut *conn)
                    .await
                    .map_err(db)?;
            }
            Ok::<_, StoreError>(())
        }
        .await;
        written.map_err(|e| e.within(&format!("timeline database {}", self.shown)))?;
        Ok(Erased::default())
    }

    async fn redact_turns(
        &mut self,
        session_id: &str,
        turns: &[(u64, Vec<Arc<ContextMessage>>)],
        erasure: Erasure,
    ) -> Result<Erased, StoreError> {
        self.rewrite_turns(session_id, turns).await?;
        if erasure == Erasure::Vacuum {
            let mut conn = self.conn.lock().await;
            sqlx::query("VACUUM FULL turns")
                .execute(&mut *conn)
                .await
                .map_err(db)
                .map_err(|e| e.within(&format!("turns database {}", self.shown)))?;
        }
        Ok(Erased::default())
    }
}
