//! Reading sessions from a SQLite timeline database: the session list, log pages, snapshots at
//! or before an ordinal, and whether a live process writes a session (its lease's owner).

use reel_engine::{LogEntry, SessionCatalog, SessionState, SessionSummary, StoreError};
use sqlx::{Row, sqlite::SqliteRow};

use crate::{
    SqliteStore, lease,
    rows::{event_from, now_ms, state_from, to_i64},
};

const SUMMARY_COLUMNS: &str =
    "session_id, title, created_at, updated_at, last_ordinal, runs, last_run_status";

fn summary(row: &SqliteRow) -> SessionSummary {
    SessionSummary {
        session_id: row.get(0),
        title: row.get(1),
        created_at_ms: row.get(2),
        updated_at_ms: row.get(3),
        events: row.get::<i64, _>(4) as u64,
        runs: row.get::<i64, _>(5) as u64,
        last_run_status: row.get(6),
    }
}

#[async_trait::async_trait]
impl SessionCatalog for SqliteStore {
    async fn sessions(&mut self) -> Result<Vec<SessionSummary>, StoreError> {
        let sql =
            format!("SELECT {SUMMARY_COLUMNS} FROM sessions ORDER BY updated_at DESC, session_id");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(rows.iter().map(summary).collect())
    }

    async fn summary(&mut self, session_id: &str) -> Result<Option<SessionSummary>, StoreError> {
        let sql = format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE session_id = ?");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.as_ref().map(summary))
    }

    async fn events_page(
        &mut self,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT ordinal, payload_json, created_at FROM events WHERE session_id = ? AND ordinal > ? \
             ORDER BY ordinal LIMIT ?",
        )
        .bind(session_id)
        .bind(to_i64(after))
        .bind(i64::from(limit))
        .fetch_all(&mut self.conn)
        .await
        .map_err(|e| self.error(&e))?;
        rows.iter()
            .map(|row| event_from(session_id, row.get(0), row.get(1), row.get(2)))
            .collect()
    }

    async fn snapshot_at_most(
        &mut self,
        session_id: &str,
        ordinal: u64,
    ) -> Result<SessionState, StoreError> {
        let row = sqlx::query(
            "SELECT ordinal, state_json FROM snapshots WHERE session_id = ? AND ordinal <= ? \
             ORDER BY ordinal DESC LIMIT 1",
        )
        .bind(session_id)
        .bind(to_i64(ordinal))
        .fetch_optional(&mut self.conn)
        .await
        .map_err(|e| self.error(&e))?;
        match row {
            Some(row) => state_from(session_id, row.get(0), row.get(1)),
            None => Ok(SessionState::default()),
        }
    }

    async fn writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT owner, heartbeat_at FROM leases WHERE session_id = ?")
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.and_then(|row| {
            let owner: String = row.get(0);
            match lease::holder(&owner, row.get(1), now_ms()) {
                lease::Holder::Live { .. } => Some(owner),
                lease::Holder::Free => None,
            }
        }))
    }
}
