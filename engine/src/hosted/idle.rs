//! Whether a hosted session's writer has nothing to do but wait for its next request. A host
//! of many sessions may then put the writer's future aside instead of keeping a task for it
//! (an idle session then holds no task), and run it again when a request comes.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// Set by the writer while it waits for a request with no run going and nothing else to do;
/// read by its host after each poll of the writer's future.
#[derive(Clone, Debug, Default)]
pub struct IdleSignal(Arc<AtomicBool>);

impl IdleSignal {
    /// Whether the writer's last poll left it waiting for a request and nothing else: it is
    /// woken by a request only (or by its `stop` token).
    pub fn is_idle(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Says whether the writer now waits for a request and nothing else.
    pub fn set(&self, idle: bool) {
        self.0.store(idle, Ordering::Release);
    }
}
