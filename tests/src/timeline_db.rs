//! Reads a timeline database the way a person with `sqlite3` or `psql` would, to check what
//! reel wrote.

use std::path::Path;

use reel_engine::LogEntry;
use reel_proto::{Any, rpc::SnapshotEntity};
use sqlx::{
    ConnectOptions, Connection, PgConnection, Row, SqliteConnection, sqlite::SqliteConnectOptions,
};

enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// A read connection to a timeline database (it may be written by a live reel meanwhile).
pub struct TimelineDb {
    runtime: tokio::runtime::Runtime,
    conn: Conn,
}

/// A turn's usage columns: (input, output, cached, cost) of the run and of the session.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnUsage {
    pub run: (i64, i64, i64, f64),
    pub session: (i64, i64, i64, f64),
}

/// One entity row: id, kind, created, last event, tombstone, payload.
type EntityRow = (String, String, i64, i64, bool, String);

/// Runs a query on either backend; `$sqlite` uses `?` placeholders, `$pg` `$1`.
macro_rules! on_each {
    ($self:ident, $sqlite:literal, $pg:literal, $session:expr, $fetch:ident, |$row:ident| $map:expr) => {
        match &mut $self.conn {
            Conn::Sqlite(conn) => {
                let query = sqlx::query($sqlite).bind($session);
                $self.runtime.block_on(query.$fetch(conn)).map(|rows| on_each!(@map rows, $fetch, |$row| $map))
            }
            Conn::Postgres(conn) => {
                let query = sqlx::query($pg).bind($session);
                $self.runtime.block_on(query.$fetch(conn)).map(|rows| on_each!(@map rows, $fetch, |$row| $map))
            }
        }
    };
    (@map $rows:ident, fetch_all, |$row:ident| $map:expr) => {
        $rows.iter().map(|$row| $map).collect::<Vec<_>>()
    };
    (@map $rows:ident, fetch_one, |$row:ident| $map:expr) => {{
        let $row = &$rows;
        $map
    }};
}

impl TimelineDb {
    /// A SQLite timeline database file.
    pub fn open(path: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let options = SqliteConnectOptions::new().filename(path).read_only(true);
        let conn = runtime
            .block_on(options.connect())
            .expect("open the timeline database");
        Self {
            runtime,
            conn: Conn::Sqlite(conn),
        }
    }

    /// A PostgreSQL timeline database.
    pub fn connect(dsn: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conn = runtime
            .block_on(PgConnection::connect(dsn))
            .expect("connect to PostgreSQL");
        Self {
            runtime,
            conn: Conn::Postgres(conn),
        }
    }

    /// The session's events, in ordinal order, decoded.
    pub fn events(&mut self, session_id: &str) -> Vec<LogEntry> {
        let rows: Vec<(i64, String, String)> = on_each!(
            self,
            "SELECT ordinal, name, payload_json FROM events WHERE session_id = ? ORDER BY ordinal",
            "SELECT ordinal, name, payload_json FROM events WHERE session_id = $1 ORDER BY ordinal",
            session_id,
            fetch_all,
            |row| (row.get(0), row.get(1), row.get(2))
        )
        .unwrap();
        rows.into_iter()
            .map(|(ordinal, name, payload)| {
                let event: Any = serde_json::from_str(&payload).expect("payload_json decodes");
                assert_eq!(event.type_name(), name, "the name column names the payload");
                LogEntry {
                    ordinal: ordinal as u64,
                    recorded_at_ms: 0,
                    event,
                }
            })
            .collect()
    }

    /// The session's materialized entities, ordered by creation.
    pub fn entities(&mut self, session_id: &str) -> Vec<SnapshotEntity> {
        let rows: Vec<EntityRow> = on_each!(self,
            "SELECT entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json FROM entities WHERE session_id = ? ORDER BY created_ordinal, entity_id",
            "SELECT entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json FROM entities WHERE session_id = $1 ORDER BY created_ordinal, entity_id",
            session_id, fetch_all, |row| (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5)))
        .unwrap();
        rows.into_iter()
            .map(
                |(id, kind, created, last, tombstone, payload)| SnapshotEntity {
                    id,
                    kind,
                    created_ordinal: created as u64,
                    last_event_ordinal: last as u64,
                    tombstone,
                    payload: Some(serde_json::from_str(&payload).expect("entity payload decodes")),
                },
            )
            .collect()
    }

    /// `sessions.last_ordinal` and `sessions.entities_ordinal`.
    pub fn ordinals(&mut self, session_id: &str) -> (u64, u64) {
        let (last, entities): (i64, i64) = on_each!(
            self,
            "SELECT last_ordinal, entities_ordinal FROM sessions WHERE session_id = ?",
            "SELECT last_ordinal, entities_ordinal FROM sessions WHERE session_id = $1",
            session_id,
            fetch_one,
            |row| (row.get(0), row.get(1))
        )
        .unwrap();
        (last as u64, entities as u64)
    }

    /// How many text deltas of the session are stored (0 before the session exists).
    pub fn delta_count(&mut self, session_id: &str) -> u64 {
        let count: Result<i64, sqlx::Error> = on_each!(
            self,
            "SELECT count(*) FROM events WHERE session_id = ? AND name = 'ChatTextDelta'",
            "SELECT count(*) FROM events WHERE session_id = $1 AND name = 'ChatTextDelta'",
            session_id,
            fetch_one,
            |row| row.get(0)
        );
        count.map_or(0, |n| n as u64)
    }

    /// Connections the server still serves for application `name` (PostgreSQL; 0 for SQLite).
    pub fn connections_named(&mut self, name: &str) -> u64 {
        let count: Result<i64, sqlx::Error> = on_each!(
            self,
            "SELECT 0 WHERE ? IS NOT NULL",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            name,
            fetch_one,
            |row| row.get(0)
        );
        count.map_or(0, |n| n as u64)
    }

    /// The session's turns in order: status, last ordinal, and the conversation as JSON.
    pub fn turns(&mut self, session_id: &str) -> Vec<(String, u64, serde_json::Value)> {
        let rows: Vec<(String, i64, String)> = on_each!(self,
            "SELECT status, last_ordinal, context_json FROM turns WHERE session_id = ? ORDER BY last_ordinal",
            "SELECT status, last_ordinal, context_json FROM turns WHERE session_id = $1 ORDER BY last_ordinal",
            session_id, fetch_all, |row| (row.get(0), row.get(1), row.get(2)))
        .unwrap();
        rows.into_iter()
            .map(|(status, ordinal, context)| {
                (
                    status,
                    ordinal as u64,
                    serde_json::from_str(&context).expect("context_json decodes"),
                )
            })
            .collect()
    }

    /// The usage columns of the session's turns, in order: the run's input, output and cached
    /// tokens and cost, then the session's.
    pub fn turn_usage(&mut self, session_id: &str) -> Vec<TurnUsage> {
        on_each!(self,
            "SELECT input_tokens, output_tokens, cached_tokens, cost_usd, session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd FROM turns WHERE session_id = ? ORDER BY last_ordinal",
            "SELECT input_tokens, output_tokens, cached_tokens, cost_usd, session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd FROM turns WHERE session_id = $1 ORDER BY last_ordinal",
            session_id, fetch_all, |row| TurnUsage {
                run: (row.get(0), row.get(1), row.get(2), row.get(3)),
                session: (row.get(4), row.get(5), row.get(6), row.get(7)),
            })
        .unwrap()
    }

    /// `PRAGMA integrity_check` for SQLite ("ok" for a sound file); PostgreSQL checks itself.
    pub fn integrity_check(&mut self) -> String {
        match &mut self.conn {
            Conn::Sqlite(conn) => self
                .runtime
                .block_on(sqlx::query("PRAGMA integrity_check").fetch_one(conn))
                .unwrap()
                .get(0),
            Conn::Postgres(_) => "ok".into(),
        }
    }

    /// PostgreSQL: whether any file of the relations of `schema` (its tables, indexes, and
    /// their TOAST tables) holds `needle`, read raw through the server (`pg_read_binary_file`,
    /// as a superuser) after a CHECKPOINT wrote every changed page out.
    pub fn relation_files_hold(&mut self, schema: &str, needle: &str) -> bool {
        const FILES: &str = "WITH mine AS (SELECT c.oid, c.reltoastrelid FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1) \
             SELECT pg_relation_filepath(oid) FROM mine \
             UNION SELECT pg_relation_filepath(reltoastrelid) FROM mine WHERE reltoastrelid <> 0 \
             UNION SELECT pg_relation_filepath(i.indexrelid) FROM pg_index i \
             JOIN mine m ON i.indrelid = m.reltoastrelid";
        let Conn::Postgres(conn) = &mut self.conn else {
            panic!("relation files are PostgreSQL's");
        };
        self.runtime.block_on(async {
            sqlx::query("CHECKPOINT").execute(&mut *conn).await.unwrap();
            let paths: Vec<Option<String>> = sqlx::query_scalar(FILES)
                .bind(schema)
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            for path in paths.into_iter().flatten() {
                let bytes: Vec<u8> = sqlx::query_scalar("SELECT pg_read_binary_file($1)")
                    .bind(&path)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    return true;
                }
            }
            false
        })
    }
}
