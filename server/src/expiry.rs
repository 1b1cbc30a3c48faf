//! Approvals that expire while no process holds their session. A call of a tool with an
//! `approval_timeout` is decided `expired` by the process that waits on it; a session nobody has
//! loaded (evicted while it waited, or stored before this server started) is loaded when one of
//! its calls is past its time, and loading it decides the call (see the engine's
//! `Session::resume_waiting_run`). It is then idle, and unloads as any idle session does.

use std::{sync::Arc, time::Duration};

use crate::host::Host;

/// How often the store's inbox is read for calls past their time: the delay an expiry may
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

/// One sweep: the sessions whose earliest expiry has passed, each loaded once.
async fn expire_due(host: &Host) {
    let waiting = match host.source().catalog().await {
        Ok(mut catalog) => catalog.waiting("", usize::MAX).await,
        Err(error) => {
            tracing::warn!("cannot read the waiting sessions: {error}");
            return;
        }
    };
    let waiting = match waiting {
        Ok(waiting) => waiting,
        Err(error) => {
            tracing::warn!("cannot read the waiting sessions: {error}");
            return;
        }
    };
    let now = reel_engine::now_ms();
    for session in waiting {
        let due = session
            .pending
            .iter()
            .filter_map(|call| call.expires_at_ms)
            .any(|at| at <= now);
        if !due || host.is_loaded(&session.summary.session_id) {
            continue;
        }
        let id = &session.summary.session_id;
        // Another node may hold it (it expires the call itself): nothing to do here then.
        if let Err(error) = host.session(id).await {
            tracing::debug!("session {id}: not loaded to expire its approval: {error}");
        }
    }
}
