//! SQLite leases: the `leases` table row that names a session's writer, taken inside a write
//! transaction and renewed by every commit and by the process's heartbeat (see
//! [`crate::sqlite_heartbeat`], and [`crate::lease`] for who counts as alive).
//!
//! Within one process a lease is counted, as PostgreSQL counts a connection's advisory locks:
//! a `reel serve` that holds a loaded session's lease and takes it again (to refuse creating
//! that id, say) keeps it when it gives the second one up. The row goes with the last release.

use std::{
    collections::BTreeMap,
    sync::{Mutex, MutexGuard},
};

use reel_engine::StoreError;
use sqlx::Row;

/// How many times this process holds each lease, by database file and session.
static HELD: Mutex<BTreeMap<(String, String), u32>> = Mutex::new(BTreeMap::new());

fn held() -> MutexGuard<'static, BTreeMap<(String, String), u32>> {
    // The map is whole after a panic elsewhere (single inserts and removals).
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether this process holds a lease in the database `file`.
fn holds_a_lease_in(file: &str) -> bool {
    let from = (file.to_owned(), String::new());
    held()
        .range(from..)
        .next()
        .is_some_and(|((held_in, _), _)| held_in == file)
}

use crate::{
    SqliteStore, lease,
    rows::{db, now_ms},
    sqlite_heartbeat,
};

impl SqliteStore {
    /// Takes the session's lease inside a write transaction; `steal` takes it from a live
    /// holder too. Returns the previous holder that was overruled.
    pub(crate) async fn lease_row(
        &mut self,
        session_id: &str,
        steal: bool,
    ) -> Result<Option<String>, StoreError> {
        let key = self.lease_key(session_id);
        let overruled = self.write_lease_row(session_id, steal).await?;
        let file = key.0.clone();
        *held().entry(key).or_default() += 1;
        sqlite_heartbeat::keep_alive(&file, self.conn.downgrade(), holds_a_lease_in);
        Ok(overruled)
    }

    fn lease_key(&self, session_id: &str) -> (String, String) {
        (self.file.display().to_string(), session_id.to_owned())
    }

    async fn write_lease_row(
        &mut self,
        session_id: &str,
        steal: bool,
    ) -> Result<Option<String>, StoreError> {
        let session_id = session_id.to_owned();
        let path = self.path.clone();
        self.immediate(async move |conn| {
            let now = now_ms();
            let row = sqlx::query("SELECT owner, heartbeat_at FROM leases WHERE session_id = ?")
                .bind(&session_id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db)?;
            let mut overruled = None;
            if let Some(row) = row {
                let owner: String = row.get(0);
                if let lease::Holder::Live { silent } = lease::holder(&owner, row.get(1), now) {
                    if !steal {
                        return Err(StoreError::Busy(format!(
                            "session {session_id:?} is open in another process ({owner}, last heartbeat {} s ago) on {path}; one process writes a session at a time (--steal-lease takes it over if that process is gone)",
                            silent.as_secs()
                        )));
                    }
                    overruled = Some(format!("{owner}, last heartbeat {} s ago", silent.as_secs()));
                }
            }
            sqlx::query("INSERT INTO leases (session_id, owner, acquired_at, heartbeat_at) VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at")
                .bind(&session_id)
                .bind(lease::this_process())
                .bind(now)
                .bind(now)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
            Ok(overruled)
        })
        .await
    }
}

impl SqliteStore {
    /// Gives up this process's lease of the session: its row goes once every holder in this
    /// process has given it up.
    pub(crate) async fn release_row(&mut self, session_id: &str) -> Result<(), StoreError> {
        {
            let mut held = held();
            let key = self.lease_key(session_id);
            if let Some(count) = held.get_mut(&key) {
                *count -= 1;
                if *count > 0 {
                    return Ok(());
                }
                held.remove(&key);
            }
        }
        sqlx::query("DELETE FROM leases WHERE session_id = $1 AND owner = $2")
            .bind(session_id)
            .bind(lease::this_process())
            .execute(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The owner of the session's lease while it is alive (see [`lease::holder`]).
    pub(crate) async fn lease_holder(
        &mut self,
        session_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT owner, heartbeat_at FROM leases WHERE session_id = $1")
            .bind(session_id)
            .fetch_optional(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(row.and_then(|row| {
            let owner: String = row.get(0);
            match lease::holder(&owner, row.get(1), now_ms()) {
                lease::Holder::Live { .. } => Some(owner),
                lease::Holder::Free => None,
            }
        }))
    }
}

/// Renews the lease of session `$2` held by `$3` (this process) at time `$1`.
pub(crate) const RENEW_LEASE: &str =
    "UPDATE leases SET heartbeat_at = $1 WHERE session_id = $2 AND owner = $3";

/// The error of a writer whose lease of `session_id` another process took.
pub(crate) fn lost_lease(session_id: &str) -> StoreError {
    StoreError::Busy(format!(
        "this process no longer holds session {session_id:?}: another process took its lease (--steal-lease); it stops writing"
    ))
}
