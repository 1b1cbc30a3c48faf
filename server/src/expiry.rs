//! Approvals that expire while no process holds their session. A call of a tool with an
//! `approval_timeout` is decided `expired` by the process that waits on it; a session nobody has
//! loaded (evicted while it waited, or stored before this server started) is loaded when one of
//! its calls is past its time, and loading it decides the call (see the engine's
//! `Session::resume_waiting_run`). It is then idle, and unloads as any idle session does.

use std::{sync::Arc, time::Duration};

use crate::host::Host;

/// How often the store is asked for calls past their time: the delay an expiry may
/// have beyond its `approval_timeout` while nobody holds the session.
pub const EXPIRY_SWEEP: Duration = Duration::from_secs(2);

/// Loads, until the server stops, every stored session with a waiting call past its time.
pub async fn expire_approvals_until_stopped(host: Arc<Host>) {
    let mut sweeps = tokio::time::interval(EXPIRY_SWEEP);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !host.is_stopping() {
        sweeps.tick().await;
        expire_due(&host).await;
    }
}

/// The most sessions one sweep loads: a backlog (a server down for a while) is worked through
/// over the sweeps that follow, the earliest deadlines first.
const LOADS_PER_SWEEP: usize = 1_000;

/// One sweep: the sessions with a deadline passed, each loaded once. The store answers from
/// the deadlines alone (an index on them), so a sweep costs what is due, not what waits.
async fn expire_due(host: &Host) {
    let mut catalog = match host.source().catalog().await {
        Ok(catalog) => catalog,
        Err(error) => {
            tracing::warn!("cannot read the approvals past their time: {error}");
            return;
        }
    };
    let due = match catalog
        .approvals_due(reel_engine::now_ms(), LOADS_PER_SWEEP)
        .await
    {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!("cannot read the approvals past their time: {error}");
            return;
        }
    };
    drop(catalog);
    for id in due {
        if host.is_loaded(&id) {
            continue;
        }
        // Another node may hold it (it expires the call itself): nothing to do here then.
        if let Err(error) = host.session(&id).await {
            tracing::debug!("session {id}: not loaded to expire its approval: {error}");
        }
    }
}
