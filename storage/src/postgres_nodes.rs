//! The nodes of a scale-out: `reel serve` processes sharing one PostgreSQL database. Each
//! registers where it is reached (`--public-url`) beside the server process of its writing
//! connection, the one every session lock it takes is held on; a session's lock holder then
//! names the node to forward a write to. A node that died lost its connection, and with it its
//! locks: its sessions are free for the next node that writes them.

use reel_engine::StoreError;
use sqlx::Row;

use crate::{PostgresStore, rows::now_ms};

/// A node whose heartbeat is older than this is gone.
const NODE_EXPIRY_MS: i64 = 30_000;

/// How far ahead of this node's clock another node's heartbeat may be (their clocks differ a
/// little); a row further ahead is forged or broken and is ignored, or it would be live for
/// ever.
const CLOCK_SKEW_MS: i64 = 5_000;

impl PostgresStore {
    /// Registers (or, called again, renews) node `node_id`, reached at `public_url`, as the
    /// holder of this store's connection's locks.
    pub async fn register_node(
        &mut self,
        node_id: &str,
        public_url: &str,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO serve_nodes (node_id, public_url, backend_pid, started_at, heartbeat_at) \
             VALUES ($1, $2, pg_backend_pid(), $3, $3) \
             ON CONFLICT (node_id) DO UPDATE SET public_url = excluded.public_url, \
             backend_pid = excluded.backend_pid, heartbeat_at = excluded.heartbeat_at",
        )
        .bind(node_id)
        .bind(public_url)
        .bind(now)
        .execute(&mut *self.conn.lock().await)
        .await
        .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Removes node `node_id` (it is stopping).
    pub async fn unregister_node(&mut self, node_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM serve_nodes WHERE node_id = $1")
            .bind(node_id)
            .execute(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Where the live node writing session `session_id` is reached; `None` when no node holds
    /// it (or whoever holds it is no node: a `run-command`, say). Only rows a node could have
    /// written count: an http(s) URL and a heartbeat neither stale nor in the future.
    pub async fn node_writing(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        let Some((pid, _)) = self.lock_holder(session_id).await? else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT public_url FROM serve_nodes WHERE backend_pid = $1 \
             AND heartbeat_at > $2 AND heartbeat_at <= $3 \
             AND (public_url LIKE 'http://%' OR public_url LIKE 'https://%') \
             ORDER BY heartbeat_at DESC LIMIT 1",
        )
        .bind(pid)
        .bind(now_ms() - NODE_EXPIRY_MS)
        .bind(now_ms() + CLOCK_SKEW_MS)
        .fetch_optional(&mut *self.conn.lock().await)
        .await
        .map_err(|e| self.error(e))?;
        Ok(row.map(|row| row.get(0)))
    }
}
