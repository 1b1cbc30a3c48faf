//! `reel serve --retain DURATION`: once at start and then once an hour, the stored sessions
//! not written for that long are removed (never one a process holds: this server's loaded
//! sessions are held by it). A request for one afterwards is answered 410 `session_pruned`.

use std::{sync::Arc, time::Duration};

use crate::host::Host;

/// How often the store is pruned.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Prunes the sessions older than `age` every [`PRUNE_EVERY`] until the server stops.
pub async fn prune_until_stopped(host: Arc<Host>, age: Duration) {
    let mut rounds = tokio::time::interval(PRUNE_EVERY);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !host.is_stopping() {
        rounds.tick().await;
        match host.source().prune(age).await {
            Ok(removed) if removed.is_empty() => {}
            Ok(removed) => tracing::info!(
                "pruned {} sessions not written for {}",
                removed.len(),
                humantime::format_duration(age)
            ),
            Err(error) => tracing::warn!("cannot prune the stored sessions: {error}"),
        }
    }
}
