//! Fan-out: hands every output to every attached sink, in order, with back-pressure.
//!
//! Outputs travel in batches: [`Fanout::send`] collects them and delivers a batch when it is
//! full, and [`Fanout::flush`] delivers whatever is collected. The session flushes before it
//! waits for anything (the model, a request), so batching never delays a frame a reader could
//! already see; it only saves a thread wake-up per event when events come fast.
//!
//! Each sink runs as its own task behind a bounded channel, or, in a fan-out made with
//! [`Fanout::on_writer_task`], within the session writer's own future (a host of many sessions:
//! an idle session then holds no task); an [`InlineSink`] (whose work never waits) is handed
//! each batch on the session's task, and holds no task either. When a sink
//! fails, its channel closes; the fan-out detaches it, logs the error on stderr and tells the
//! remaining sinks with a non-terminal `sink_failed` error frame (a durable sink's failure is
//! the session's to report, as a terminal `storage_failed`). The log and the other sinks are
//! never affected.

use std::{future::Future, panic::AssertUnwindSafe, pin::Pin, sync::Arc};

use futures::FutureExt;
use reel_proto::rpc::ErrorFrame;
use tokio::{
    sync::{mpsc, oneshot, watch},
    task::JoinHandle,
};

use crate::{
    idle::IdleSignal,
    output::{Output, OutputKind},
    sink::{Acks, Durability, InlineSink, Reads, Sink, SinkError},
    vocabulary::ErrorCode,
};

/// How many batches may wait for a sink before the session waits for it.
const SINK_QUEUE: usize = 4;
/// Outputs per batch at most.
const BATCH: usize = 128;

/// Outputs in the order they were produced, shared by all sinks.
pub type OutputBatch = Arc<[Output]>;

/// How a sink ended: `Err` with what was said when it panicked.
type SinkEnd = Result<Result<(), SinkError>, String>;

/// A sink's run on its session writer's task, not polled until the writer takes it.
type WriterTaskSink = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a sink runs, and how its end is learnt.
enum SinkTask {
    Spawned(JoinHandle<Result<(), SinkError>>),
    /// On the session writer's task (see [`Fanout::on_writer_task`]).
    OnWriterTask(oneshot::Receiver<SinkEnd>),
}

impl SinkTask {
    async fn end(self) -> SinkEnd {
        match self {
            Self::Spawned(task) => task.await.map_err(|join| join.to_string()),
            Self::OnWriterTask(end) => end
                .await
                .unwrap_or_else(|_| Err("dropped before it ended".into())),
        }
    }
}

struct AttachedSink {
    name: String,
    tx: mpsc::Sender<OutputBatch>,
    task: SinkTask,
    /// For durable sinks: the highest ordinal the sink has committed.
    committed: Option<watch::Receiver<u64>>,
    reads: Reads,
}

/// A sink that failed and was detached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkFailure {
    pub sink: String,
    pub message: String,
    /// Whether the sink was durable: its failure means acknowledged events may not be stored.
    pub durable: bool,
}

/// The set of sinks a session writes to.
#[derive(Default)]
pub struct Fanout {
    sinks: Vec<AttachedSink>,
    /// Handed each batch before the sinks above are.
    inline: Vec<Box<dyn InlineSink>>,
    failures: Vec<SinkFailure>,
    /// Outputs collected and not yet delivered.
    pending: Vec<Output>,
    /// Set for a fan-out whose sinks run on the session writer's task: the session's idle
    /// signal, which those sinks take part in.
    on_writer_task: Option<IdleSignal>,
    /// Those sinks, until the writer takes them.
    writer_task_sinks: Vec<WriterTaskSink>,
}

impl Fanout {
    pub fn new() -> Self {
        Self::default()
    }

    /// A fan-out whose task sinks run within the session writer's future
    /// ([`crate::OpenedSession::write`] runs them) instead of on tasks of their own: a host
    /// of many sessions holds no task for a session whose writer and sinks all wait (see
    /// [`IdleSignal`]). Sinks not taken by a writer start on tasks of their own when the
    /// fan-out closes or is dropped.
    pub fn on_writer_task() -> Self {
        let mut fanout = Self::default();
        fanout.on_writer_task = Some(IdleSignal::default());
        fanout
    }

    /// The session's idle signal (one nobody sets, for a fan-out whose sinks have tasks of
    /// their own).
    pub fn idle_signal(&self) -> IdleSignal {
        self.on_writer_task.clone().unwrap_or_default()
    }

    /// The sinks that run on the writer's task, as one future that ends when they all have.
    pub fn take_writer_task_sinks(&mut self) -> impl Future<Output = ()> + Send + use<> {
        futures::future::join_all(std::mem::take(&mut self.writer_task_sinks)).map(drop)
    }

    /// Starts the sinks no writer took on tasks of their own.
    fn spawn_writer_task_sinks(&mut self) {
        for sink in std::mem::take(&mut self.writer_task_sinks) {
            tokio::spawn(sink);
        }
    }

    /// Starts `sink` on its own task; a durable sink's acknowledgements are waited for by
    /// [`Fanout::wait_committed`]. Must be called inside a tokio runtime.
    pub fn attach(&mut self, sink: Box<dyn Sink>) {
        let (tx, rx) = mpsc::channel(SINK_QUEUE);
        let name = sink.name();
        let reads = sink.reads();
        let (acks, committed) = match sink.durability() {
            Durability::BestEffort => (Acks::channel(0).0, None),
            Durability::Durable { acknowledged } => {
                let (acks, committed) = Acks::channel(acknowledged);
                (acks, Some(committed))
            }
        };
        let task = match &self.on_writer_task {
            None => SinkTask::Spawned(tokio::spawn(sink.run(rx, acks))),
            Some(idle) => {
                let acks = acks.idle_in(Some(idle.sink()));
                let (ended, end) = oneshot::channel();
                self.writer_task_sinks.push(Box::pin(async move {
                    let run = AssertUnwindSafe(sink.run(rx, acks)).catch_unwind().await;
                    let _ = ended.send(run.map_err(|panic| panic_message(&*panic)));
                }));
                SinkTask::OnWriterTask(end)
            }
        };
        self.sinks.push(AttachedSink {
            name,
            tx,
            task,
            committed,
            reads,
        });
    }

    /// Adds `sink`, handed every batch on the caller's task by [`Fanout::flush`].
    pub fn attach_inline(&mut self, sink: Box<dyn InlineSink>) {
        self.inline.push(sink);
    }

    /// What the first durable sink attached (the session's store) has committed: a sink that
    /// keeps a copy of the log elsewhere (JetStream) publishes nothing the store does not hold,
    /// so that a crash never leaves the copy ahead of the store. `None` without a store.
    pub fn store_committed(&self) -> Option<watch::Receiver<u64>> {
        self.sinks.iter().find_map(|sink| sink.committed.clone())
    }

    /// Delivers everything queued and waits until every durable sink has committed `ordinal`.
    /// Fails when a durable sink has failed, now or before.
    pub async fn wait_committed(&mut self, ordinal: u64) -> Result<(), SinkFailure> {
        self.flush().await;
        let mut failed = None;
        for (at, sink) in self.sinks.iter_mut().enumerate() {
            if let Some(committed) = &mut sink.committed
                && committed.wait_for(|&done| done >= ordinal).await.is_err()
            {
                failed = Some(at);
                break;
            }
        }
        if let Some(at) = failed {
            let sink = self.sinks.remove(at);
            let failure = Self::detach(sink).await;
            self.failures.push(failure);
        }
        match self.failures.iter().find(|f| f.durable) {
            Some(failure) => Err(failure.clone()),
            None => Ok(()),
        }
    }

    /// Whether a durable sink is attached (one whose commits a side effect must wait for).
    pub fn has_durable(&self) -> bool {
        self.sinks.iter().any(|sink| sink.committed.is_some())
    }

    /// Whether a sink still attached reads frames (ui events and snapshots), not only the log.
    pub fn reads_frames(&self) -> bool {
        self.sinks.iter().any(|sink| sink.reads == Reads::Frames)
            || self.inline.iter().any(|sink| sink.reads() == Reads::Frames)
    }

    /// Sinks still attached.
    pub fn len(&self) -> usize {
        self.sinks.len() + self.inline.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sinks detached so far.
    pub fn failures(&self) -> &[SinkFailure] {
        &self.failures
    }

    /// Queues `output` for every sink; delivers the batch when it is full.
    pub async fn send(&mut self, output: Output) {
        self.pending.push(output);
        if self.pending.len() >= BATCH {
            self.flush().await;
        }
    }

    /// Delivers every queued output, waiting while a sink's queue is full.
    pub async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch: OutputBatch = std::mem::take(&mut self.pending).into();
        for sink in &mut self.inline {
            sink.deliver(&batch);
        }
        let mut failed = Vec::new();
        for (at, sink) in self.sinks.iter().enumerate() {
            if sink.tx.send(Arc::clone(&batch)).await.is_err() {
                failed.push(at);
            }
        }
        if failed.is_empty() {
            return;
        }
        let last = batch.last().expect("batches are never empty").clone();
        let mut notices = Vec::new();
        for at in failed.into_iter().rev() {
            let sink = self.sinks.remove(at);
            notices.push(Self::detach(sink).await);
        }
        for failure in notices.into_iter().rev() {
            if failure.durable {
                // The session reports a durable sink's failure itself, as the terminal
                // storage_failed error that ends the request.
                self.failures.push(failure);
                continue;
            }
            let notice = ErrorFrame {
                code: ErrorCode::SinkFailed.into(),
                message: format!(
                    "output {} failed and was detached: {}",
                    failure.sink, failure.message
                ),
                detail: String::new(),
                terminal: false,
            };
            self.failures.push(failure);
            self.pending.push(Output {
                kind: OutputKind::Error(Arc::new(notice)),
                ..last.clone()
            });
        }
        // Boxed because a sink may fail while hearing of another sink's failure.
        Box::pin(self.flush()).await;
    }

    /// Closes every sink's queue and waits until each has written what it received.
    /// Returns every failure, including those found while closing.
    pub async fn close(mut self) -> Vec<SinkFailure> {
        self.spawn_writer_task_sinks();
        self.flush().await;
        // They have everything: dropped first, as a sink whose queue closes ends first.
        self.inline.clear();
        for sink in std::mem::take(&mut self.sinks) {
            let AttachedSink {
                name,
                tx,
                task,
                committed,
                ..
            } = sink;
            drop(tx);
            if let Some(failure) = Self::outcome(name, task, committed.is_some()).await {
                self.failures.push(failure);
            }
        }
        std::mem::take(&mut self.failures)
    }

    async fn detach(sink: AttachedSink) -> SinkFailure {
        let AttachedSink {
            name,
            tx,
            task,
            committed,
            ..
        } = sink;
        let durable = committed.is_some();
        drop(tx);
        Self::outcome(name.clone(), task, durable)
            .await
            .unwrap_or(SinkFailure {
                sink: name,
                message: "stopped reading".into(),
                durable,
            })
    }

    async fn outcome(name: String, task: SinkTask, durable: bool) -> Option<SinkFailure> {
        let message = match task.end().await {
            Ok(Ok(())) => return None,
            Ok(Err(error)) => crate::store::error_chain(&error),
            Err(crash) => format!("crashed: {crash}"),
        };
        tracing::error!(sink = %name, "output failed: {message}");
        Some(SinkFailure {
            sink: name,
            message,
            durable,
        })
    }
}

impl Drop for Fanout {
    /// Sinks that were to run on a writer that never took them still end as sinks do (their
    /// queues are closed now): a durable one commits what it has and releases its session.
    fn drop(&mut self) {
        if !self.writer_task_sinks.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            self.spawn_writer_task_sinks();
        }
    }
}

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|says| (*says).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
#[path = "fanout_tests.rs"]
mod tests;
