//! One heartbeat for every lease a process holds in an SQLite database: a single `UPDATE` every
//! [`HEARTBEAT`] renews them all, however many sessions the process holds.
//!
//! Each session's writer used to renew its own lease on a timer: a `reel serve` holding 10,000
//! idle sessions woke 10,000 timers and wrote 2,000 transactions a second to say it was alive,
//! and an idle session was never quite idle. A lease says which process writes a session, so
//! it is the process's liveness that the heartbeat carries; a lease another process took is
//! not renewed (its owner is not this process), and the old writer learns it at its next
//! commit, which checks its lease.
//!
//! The heartbeat of a database file runs while this process holds a lease in it, on one of the
//! connections that took them (held weakly: a heartbeat never keeps a closed store open).

use std::{
    collections::BTreeMap,
    sync::{Mutex, MutexGuard, Weak},
    time::Duration,
};

use sqlx::SqliteConnection;
use tokio::sync::Mutex as AsyncMutex;

use crate::{
    lease::{self, HEARTBEAT},
    rows::now_ms,
};

/// A connection that took a lease.
type Taker = Weak<AsyncMutex<SqliteConnection>>;

/// A database file's heartbeat: the connections that took leases there, and its task.
#[derive(Default)]
struct Beat {
    takers: Vec<Taker>,
    /// `None` before it starts; finished when its runtime has gone (then another starts).
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The heartbeat of each database file this process holds leases in.
static BEATING: Mutex<BTreeMap<String, Beat>> = Mutex::new(BTreeMap::new());

fn beating() -> MutexGuard<'static, BTreeMap<String, Beat>> {
    // The map is whole after a panic elsewhere (single inserts and removals).
    BEATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Renews every lease of this process in the database.
const RENEW_ALL: &str = "UPDATE leases SET heartbeat_at = $1 WHERE owner = $2";

/// Keeps this process's leases in `file` alive, now that `conn` took one there: starts the
/// file's heartbeat when none runs. `holds_leases` says whether the process still holds a
/// lease in the file; the heartbeat ends when it does not. Call it inside a tokio runtime.
pub(crate) fn keep_alive(file: &str, conn: Taker, holds_leases: fn(&str) -> bool) {
    keep_alive_every(HEARTBEAT, file, conn, holds_leases);
}

/// [`keep_alive`] with a heartbeat every `period`.
fn keep_alive_every(period: Duration, file: &str, conn: Taker, holds_leases: fn(&str) -> bool) {
    let mut beating = beating();
    let beat = beating.entry(file.to_owned()).or_default();
    if !beat.takers.iter().any(|taker| taker.ptr_eq(&conn)) {
        beat.takers.push(conn);
    }
    if beat.task.as_ref().is_none_or(|task| task.is_finished()) {
        beat.task = Some(tokio::spawn(beat_every(
            period,
            file.to_owned(),
            holds_leases,
        )));
    }
}

/// The heartbeat of `file`, until the process holds no lease there or every connection that
/// took one has closed.
async fn beat_every(period: Duration, file: String, holds_leases: fn(&str) -> bool) {
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(conn) = still_needed(&file, holds_leases) else {
            return;
        };
        let renewed = sqlx::query(RENEW_ALL)
            .bind(now_ms())
            .bind(lease::this_process())
            .execute(&mut *conn.lock().await)
            .await;
        if let Err(error) = renewed {
            // The next commit of each session says what is wrong with the database; a
            // heartbeat that fails once is tried again at the next beat.
            tracing::warn!("cannot renew this process's leases in {file}: {error}");
        }
    }
}

/// A live connection to renew the leases of `file` on, or `None` (and the heartbeat
/// forgotten, so that the next lease taken starts another) when none is needed.
fn still_needed(
    file: &str,
    holds_leases: fn(&str) -> bool,
) -> Option<std::sync::Arc<AsyncMutex<SqliteConnection>>> {
    let mut beating = beating();
    let beat = beating.get_mut(file)?;
    beat.takers.retain(|taker| taker.strong_count() > 0);
    let conn = beat.takers.iter().find_map(Weak::upgrade);
    if conn.is_none() || !holds_leases(file) {
        beating.remove(file);
        return None;
    }
    conn
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sqlx::Connection;

    use super::*;

    fn holds(_: &str) -> bool {
        true
    }

    const PERIOD: Duration = Duration::from_millis(20);

    /// A connection to `file` holding a `leases` table with `leases` (session, owner) in it,
    /// none renewed yet.
    async fn leases_in(file: &std::path::Path, leases: &[(&str, &str)]) -> SqliteConnection {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS leases (session_id TEXT PRIMARY KEY, owner TEXT, heartbeat_at INTEGER)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        for (session, owner) in leases {
            sqlx::query("INSERT OR REPLACE INTO leases VALUES (?, ?, 0)")
                .bind(session)
                .bind(owner)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        conn
    }

    #[tokio::test]
    async fn one_heartbeat_renews_every_lease_of_the_process_and_ends_with_its_connections() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.db");
        let leases = [
            ("a", lease::this_process()),
            ("b", lease::this_process()),
            ("c", "another/1/1"),
        ];
        let conn = Arc::new(AsyncMutex::new(leases_in(&file, &leases).await));
        let key = file.display().to_string();
        keep_alive_every(PERIOD, &key, Arc::downgrade(&conn), holds);
        keep_alive_every(PERIOD, &key, Arc::downgrade(&conn), holds);
        assert_eq!(beating()[&key].takers.len(), 1, "a connection is kept once");
        tokio::time::sleep(PERIOD * 5).await;
        let beats: Vec<(String, i64)> =
            sqlx::query_as("SELECT session_id, heartbeat_at FROM leases ORDER BY session_id")
                .fetch_all(&mut *conn.lock().await)
                .await
                .unwrap();
        assert!(beats[0].1 > 0 && beats[1].1 > 0, "{beats:?}");
        assert_eq!(beats[2].1, 0, "another process's lease is not renewed");
        drop(conn);
        for _ in 0..100 {
            if !beating().contains_key(&key) {
                return;
            }
            tokio::time::sleep(PERIOD).await;
        }
        panic!("the heartbeat outlived its connection");
    }

    /// A heartbeat whose runtime has gone (a process that opened the file from another
    /// runtime before) is started again by the next lease taken there.
    #[test]
    fn a_heartbeat_whose_runtime_ended_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.db");
        let key = file.display().to_string();
        let open = |runtime: &tokio::runtime::Runtime| {
            runtime.block_on(async {
                let conn = leases_in(&file, &[("a", lease::this_process())]).await;
                let conn = Arc::new(AsyncMutex::new(conn));
                keep_alive_every(PERIOD, &key, Arc::downgrade(&conn), holds);
                conn
            })
        };
        let first = tokio::runtime::Runtime::new().unwrap();
        let kept = open(&first);
        drop(first);
        let second = tokio::runtime::Runtime::new().unwrap();
        let conn = open(&second);
        drop(kept);
        let renewed = second.block_on(async {
            for _ in 0..100 {
                tokio::time::sleep(PERIOD).await;
                let (beat,): (i64,) = sqlx::query_as("SELECT heartbeat_at FROM leases")
                    .fetch_one(&mut *conn.lock().await)
                    .await
                    .unwrap();
                if beat > 0 {
                    return true;
                }
            }
            false
        });
        assert!(renewed, "the second runtime's heartbeat renewed the lease");
    }
}
