//! Whether a hosted session has nothing to do but wait for its next request: its writer waits
//! for one with no run going, and every sink that runs on the writer's task (see
//! [`crate::Fanout::on_writer_task`]) waits for its next batch with nothing in flight. A host
//! of many sessions may then set the session's future aside instead of keeping a task for it
//! (an idle session holds no task), and run it again when a request comes.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

/// Set by a session's writer and its sinks; read by its host after each poll of the writer.
#[derive(Clone, Debug, Default)]
pub struct IdleSignal(Arc<Parts>);

#[derive(Debug, Default)]
struct Parts {
    /// The writer waits for a request and nothing else.
    writer: AtomicBool,
    /// Sinks on the writer's task that have work or have not said they wait.
    busy_sinks: AtomicUsize,
}

impl IdleSignal {
    /// Whether the session's last poll left it waiting for a request and nothing else: only
    /// a request (or its `stop` token) wakes it.
    pub fn is_idle(&self) -> bool {
        self.0.writer.load(Ordering::Acquire) && self.0.busy_sinks.load(Ordering::Acquire) == 0
    }

    /// Says whether the writer now waits for a request and nothing else.
    pub fn set(&self, idle: bool) {
        self.0.writer.store(idle, Ordering::Release);
    }

    /// A sink's part: busy until it says it waits.
    pub(crate) fn sink(&self) -> SinkIdle {
        self.0.busy_sinks.fetch_add(1, Ordering::AcqRel);
        SinkIdle {
            signal: self.clone(),
            waiting: AtomicBool::new(false),
        }
    }
}

/// One sink's part of its session's [`IdleSignal`].
#[derive(Debug)]
pub(crate) struct SinkIdle {
    signal: IdleSignal,
    waiting: AtomicBool,
}

impl SinkIdle {
    pub(crate) fn set(&self, waiting: bool) {
        if self.waiting.swap(waiting, Ordering::AcqRel) == waiting {
            return;
        }
        let busy = &self.signal.0.busy_sinks;
        if waiting {
            busy.fetch_sub(1, Ordering::AcqRel);
        } else {
            busy.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for SinkIdle {
    /// A sink that has ended keeps nobody busy.
    fn drop(&mut self) {
        self.set(true);
    }
}
