//! Waiting for a session's next committed event, for long-polls and SSE readers.
//!
//! A session loaded here says what its store has committed (a watch), so a reader of it wakes
//! at the commit. A session nobody writes here is looked at in the store (PostgreSQL tells of
//! commits; SQLite is looked at again every [`STORE_POLL`]), and the reader wakes at once when
//! this server loads it. Waiting holds no lease and loads nothing: a reader never keeps a
//! writer out.

use std::time::Duration;

use tokio::time::Instant;

use crate::{error::ApiError, host::Host};

/// How often the store is looked at for a session nobody writes here.
const STORE_POLL: Duration = Duration::from_secs(1);

/// How long a reader whose session is unloading waits before it looks again.
const UNLOADING: Duration = Duration::from_millis(10);

/// Waits until session `id` has a committed event after `after`, or until `deadline`; true
/// when it has.
pub async fn wait_past(
    host: &Host,
    id: &str,
    after: u64,
    deadline: Instant,
) -> Result<bool, ApiError> {
    loop {
        if let Some(mut committed) = host.committed(id) {
            let waited = tokio::time::timeout_at(deadline, committed.wait_for(|at| *at > after))
                .await
                .map(|seen| seen.is_ok());
            match waited {
                Ok(true) => return Ok(true),
                Err(_timed_out) => return Ok(false),
                // The session is unloading: look again once it has (a moment, so that a
                // slot not yet cleared is not looked at in a spin).
                Ok(false) => {
                    tokio::time::sleep(UNLOADING).await;
                    continue;
                }
            }
        }
        // Not loaded here: the notice of its load is made before looking again, so that a
        // load between that look and the wait is not missed (a loaded session, the common
        // case, needs none).
        let notice = host.load_notice(id);
        let loaded = notice.notified();
        if host.committed(id).is_some() {
            continue;
        }
        let mut catalog = host.source().catalog().await?;
        let stored = crate::api::summary(catalog.as_mut(), id).await?.events;
        if stored > after {
            return Ok(true);
        }
        let poll = STORE_POLL.min(deadline.saturating_duration_since(Instant::now()));
        if poll.is_zero() {
            return Ok(false);
        }
        tokio::select! {
            heard = catalog.wait_for_commits(id, poll) => heard?,
            () = loaded => {}
        }
    }
}
