//! Reading sessions from a PostgreSQL timeline database: the session list, log pages, snapshots
//! at or before an ordinal, and whether a live process writes a session (holds its advisory
//! lock, seen in `pg_locks` without taking it).

use reel_engine::{LogEntry, SessionCatalog, SessionState, SessionSummary, StoreError};
use sqlx::{Row, postgres::PgRow};

use crate::{
    PostgresStore,
    postgres::LOCK_HOLDER,
    rows::{event_from, state_from, to_i64},
};

const SUMMARY_COLUMNS: &str =
    "session_id, title, created_at, updated_at, last_ordinal, runs, last_run_status";

fn summary(row: &PgRow) -> SessionSummary {
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
impl SessionCatalog for PostgresStore {
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
        let sql = format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE session_id = $1");
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
            "SELECT ordinal, payload_json, created_at FROM events WHERE session_id = $1 AND ordinal > $2 \
             ORDER BY ordinal LIMIT $3",
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
            "SELECT ordinal, state_json FROM snapshots WHERE session_id = $1 AND ordinal <= $2 \
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

    async fn wait_for_commits(
        &mut self,
        _session_id: &str,
        _poll: std::time::Duration,
    ) -> Result<(), StoreError> {
        // Every commit notifies the channel; a second's timeout also notices a writer that
        // died (its lease gone without a last commit).
        let listener = self.listener().await?;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), listener.recv()).await;
        Ok(())
    }

    async fn writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(LOCK_HOLDER)
            .bind(session_id)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(row.map(|row| row.get::<Option<String>, _>(1).unwrap_or_default()))
    }
}
