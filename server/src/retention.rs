//! `reel serve --retain DURATION`: at start and then once an hour (or every DURATION when that
//! is shorter), the stored sessions not written for that long are removed, never one a
//! process holds: not one this server has loaded (a request that would load one waits while
//! it is pruned), not one another process writes. A request for one afterwards is answered
//! 410 `session_pruned`.

use std::{sync::Arc, time::Duration};

use reel_engine::Retention;

use crate::host::Host;

/// How often the store is pruned at most.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Prunes the sessions older than `age` until the server stops.
pub async fn prune_until_stopped(host: Arc<Host>, age: Duration) {
    let mut rounds = tokio::time::interval(PRUNE_EVERY.min(age).max(Duration::from_secs(1)));
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !host.is_stopping() {
        rounds.tick().await;
        match prune_once(&host, age).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(
                "pruned {removed} sessions not written for {}",
                humantime::format_duration(age)
            ),
            Err(error) => tracing::warn!("cannot prune the stored sessions: {error}"),
        }
    }
}

/// One round: the sessions last written before `age` ago, each pruned unless held.
async fn prune_once(host: &Host, age: Duration) -> Result<usize, crate::SourceError> {
    let sessions = match host.source().catalog().await?.sessions().await {
        Ok(sessions) => sessions,
        Err(error) => return Err(crate::SourceError::Failed(error.to_string())),
    };
    let mut removed = 0;
    let expired = Retention::OlderThan(age).expired(&sessions, reel_engine::now_ms());
    for session in expired {
        if host.prune_unless_loaded(&session.session_id).await? {
            removed += 1;
        }
    }
    Ok(removed)
}
