//! Idle sessions. A loaded session costs memory and holds its lease; one that nobody has used
//! for `--idle-timeout` (no request, no frame, no subscriber, no run going) is asked to shut
//! down, as a `shutdown` request would, and reloads from the store when it is used again.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

use reel_engine::RunStatus;
use reel_proto::Any;
use tokio::time::Instant;

/// When a session was last used.
pub struct Activity {
    epoch: Instant,
    /// Milliseconds from `epoch` to the last use.
    last: AtomicU64,
    /// A run has started and not ended (a long tool call makes no frames, yet it is use).
    running: AtomicBool,
    /// Tool calls asking a person, not yet decided: a run that waits for them is not use (it
    /// waits in the store as well as here).
    asking: AtomicU64,
}

impl Activity {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            running: AtomicBool::new(false),
            asking: AtomicU64::new(0),
        }
    }

    /// The session is used now.
    pub fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether a run has started and not ended.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Whether a run is going that does not just wait for a person's decision (a session
    /// whose run waits for one may be evicted: the next decision loads it again).
    pub fn is_busy(&self) -> bool {
        self.is_running() && self.asking.load(Ordering::Relaxed) == 0
    }

    /// Counts the questions to a person `event` asks or settles.
    pub fn follow_approvals(&self, event: &Any) {
        match event {
            Any::ChatToolApprovalRequested(_) => {
                self.asking.fetch_add(1, Ordering::Relaxed);
            }
            Any::ChatToolApprovalDecided(decided) if !decided.remembered => {
                // A decision continues a run, also one taken up from the store (whose start
                // this process never saw).
                self.running.store(true, Ordering::Relaxed);
                let _ = self
                    .asking
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            _ => {}
        }
    }

    /// The session's newest run now stands at `status`.
    pub fn run_is(&self, status: RunStatus) {
        self.running
            .store(status == RunStatus::Running, Ordering::Relaxed);
    }

    /// How long since it was last used.
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// How often the idle sweep runs, and how soon a session listened to or busy is looked at
/// again: often enough that none stays loaded much past its timeout, never more than once a
/// second. A sweep looks only at the sessions due (see [`crate::idle_queue`]).
pub fn sweep_interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}
