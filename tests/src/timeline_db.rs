//! Reads a timeline database the way a person with `sqlite3` would, to check what reel wrote.

use std::path::Path;

use reel_engine::LogEntry;
use reel_proto::{Any, rpc::SnapshotEntity};
use sqlx::{ConnectOptions, Row, SqliteConnection, sqlite::SqliteConnectOptions};

/// A read connection to a timeline database (it may be written by a live reel meanwhile).
pub struct TimelineDb {
    runtime: tokio::runtime::Runtime,
    conn: SqliteConnection,
}

impl TimelineDb {
    pub fn open(path: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let options = SqliteConnectOptions::new().filename(path).read_only(true);
        let conn = runtime
            .block_on(options.connect())
            .expect("open the timeline database");
        Self { runtime, conn }
    }

    /// The session's events, in ordinal order, decoded.
    pub fn events(&mut self, session_id: &str) -> Vec<LogEntry> {
        let query = sqlx::query(
            "SELECT ordinal, name, payload_json FROM events WHERE session_id = ? ORDER BY ordinal",
        )
        .bind(session_id)
        .fetch_all(&mut self.conn);
        let rows = self.runtime.block_on(query).unwrap();
        rows.iter()
            .map(|row| {
                let event: Any =
                    serde_json::from_str(row.get::<&str, _>(2)).expect("payload_json decodes");
                assert_eq!(
                    event.type_name(),
                    row.get::<&str, _>(1),
                    "the name column names the payload"
                );
                LogEntry {
                    ordinal: row.get::<i64, _>(0) as u64,
                    recorded_at_ms: 0,
                    event,
                }
            })
            .collect()
    }

    /// The session's materialized entities, ordered by creation.
    pub fn entities(&mut self, session_id: &str) -> Vec<SnapshotEntity> {
        let query = sqlx::query(
            "SELECT entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json FROM entities \
             WHERE session_id = ? ORDER BY created_ordinal, entity_id",
        )
        .bind(session_id)
        .fetch_all(&mut self.conn);
        let rows = self.runtime.block_on(query).unwrap();
        rows.iter()
            .map(|row| SnapshotEntity {
                id: row.get(0),
                kind: row.get(1),
                created_ordinal: row.get::<i64, _>(2) as u64,
                last_event_ordinal: row.get::<i64, _>(3) as u64,
                tombstone: row.get(4),
                payload: Some(
                    serde_json::from_str(row.get::<&str, _>(5)).expect("entity payload decodes"),
                ),
            })
            .collect()
    }

    /// `sessions.last_ordinal` and `sessions.entities_ordinal`.
    pub fn ordinals(&mut self, session_id: &str) -> (u64, u64) {
        let query =
            sqlx::query("SELECT last_ordinal, entities_ordinal FROM sessions WHERE session_id = ?")
                .bind(session_id)
                .fetch_one(&mut self.conn);
        let row = self.runtime.block_on(query).unwrap();
        (row.get::<i64, _>(0) as u64, row.get::<i64, _>(1) as u64)
    }

    /// How many text deltas of the session are stored.
    pub fn delta_count(&mut self, session_id: &str) -> u64 {
        let query = sqlx::query(
            "SELECT count(*) FROM events WHERE session_id = ? AND name = 'ChatTextDelta'",
        )
        .bind(session_id)
        .fetch_one(&mut self.conn);
        self.runtime
            .block_on(query)
            .map(|row| row.get::<i64, _>(0) as u64)
            .unwrap_or(0)
    }

    pub fn integrity_check(&mut self) -> String {
        let query = sqlx::query("PRAGMA integrity_check").fetch_one(&mut self.conn);
        self.runtime.block_on(query).unwrap().get(0)
    }
}
