//! Retention: which whole sessions `reel prune` and `reel serve --retain` remove, and removing
//! them. A session a process holds (a live lease) is never removed; each removal takes the
//! session's lease first, so no writer can start in the middle of it, and records that the
//! session was pruned, so a reader asking for it later is told it is gone.

use reel_engine::{LogStore, Retention, SessionCatalog, SessionSummary, StoreError, now_ms};

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
