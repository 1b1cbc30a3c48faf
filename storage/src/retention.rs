//! Retention: which whole sessions `reel prune` and `reel serve --retain` remove, and removing
//! them. A session a process holds (a live lease) is never removed; each removal takes the
//! session's lease first, so no writer can start in the middle of it, and records that the
//! session was pruned, so a reader asking for it later is told it is gone.

use std::time::Duration;

use reel_engine::{LogStore, SessionCatalog, SessionSummary, StoreError, now_ms};

/// Which sessions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Those not written for this long.
    OlderThan(Duration),
    /// All but the N written last.
    KeepLast(usize),
}

impl Retention {
    /// The sessions of `sessions` (newest first, as the catalog lists them) this retention
    /// removes, at `now_ms`.
    pub fn expired<'a>(
        &self,
        sessions: &'a [SessionSummary],
        now_ms: u64,
    ) -> impl Iterator<Item = &'a SessionSummary> {
        let (keep, cutoff) = match *self {
            Retention::KeepLast(n) => (n, i64::MAX),
            Retention::OlderThan(age) => {
                let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
                (0, now.saturating_sub(age))
            }
        };
        sessions
            .iter()
            .skip(keep)
            .filter(move |session| session.updated_at_ms < cutoff)
    }
}

/// What a pruning did (or, dry, would do).
#[derive(Debug, Default)]
pub struct Pruned {
    /// The sessions removed (or that would be).
    pub removed: Vec<SessionSummary>,
    /// The sessions a live process holds, kept, with why.
    pub held: Vec<(String, String)>,
}

/// Removes the sessions of `store` that `retention` says go (only lists them when `dry_run`).
pub async fn prune<S: LogStore + SessionCatalog + ?Sized>(
    store: &mut S,
    retention: Retention,
    dry_run: bool,
) -> Result<Pruned, StoreError> {
    let sessions = store.sessions().await?;
    let mut pruned = Pruned::default();
    for session in retention.expired(&sessions, now_ms()) {
        if dry_run {
            pruned.removed.push(session.clone());
            continue;
        }
        let id = session.session_id.as_str();
        match store.lease(id).await {
            Ok(()) => {}
            Err(StoreError::Busy(why)) => {
                pruned.held.push((id.to_owned(), why));
                continue;
            }
            Err(error) => return Err(error),
        }
        let removed = store.prune(id).await;
        let released = store.release(id).await;
        removed?;
        released?;
        pruned.removed.push(session.clone());
    }
    Ok(pruned)
}
