//! Fan-out: hands every output to every attached sink, in order, with back-pressure.
//!
//! Outputs travel in batches: [`Fanout::send`] collects them and delivers a batch when it is
//! full, and [`Fanout::flush`] delivers whatever is collected. The session flushes before it
//! waits for anything (the model, a request), so batching never delays a frame a reader could
//! already see; it only saves a thread wake-up per event when events come fast.
//!
//! Each sink runs as its own task behind a bounded channel. When a sink fails, its channel
//! closes; the fan-out detaches it, logs the error on stderr and tells the remaining sinks with
//! a non-terminal `sink_failed` error frame (a durable sink's failure is the session's to
//! report, as a terminal `storage_failed`). The log and the other sinks are never affected.

use std::sync::Arc;

use reel_proto::rpc::ErrorFrame;
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::{
    output::{Output, OutputKind},
    sink::{Sink, SinkError},
};

/// How many batches may wait for a sink before the session waits for it.
const SINK_QUEUE: usize = 4;
/// Outputs per batch at most.
const BATCH: usize = 128;

/// Outputs in the order they were produced, shared by all sinks.
pub type OutputBatch = Arc<[Output]>;

struct AttachedSink {
    name: String,
    tx: mpsc::Sender<OutputBatch>,
    task: JoinHandle<Result<(), SinkError>>,
    /// For durable sinks: the highest ordinal the sink has committed.
    committed: Option<watch::Receiver<u64>>,
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
    failures: Vec<SinkFailure>,
    /// Outputs collected and not yet delivered.
    pending: Vec<Output>,
}

impl Fanout {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `sink` on its own task. Must be called inside a tokio runtime.
    pub fn attach(&mut self, sink: Box<dyn Sink>) {
        self.attach_with(sink, None);
    }

    /// Starts a durable sink: one that reports, through `committed`, the highest ordinal it has
    /// made durable. [`Fanout::wait_committed`] waits for it.
    pub fn attach_durable(&mut self, sink: Box<dyn Sink>, committed: watch::Receiver<u64>) {
        self.attach_with(sink, Some(committed));
    }

    fn attach_with(&mut self, sink: Box<dyn Sink>, committed: Option<watch::Receiver<u64>>) {
        let (tx, rx) = mpsc::channel(SINK_QUEUE);
        let name = sink.name();
        let task = tokio::spawn(sink.run(rx));
        self.sinks.push(AttachedSink {
            name,
            tx,
            task,
            committed,
        });
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

    /// Sinks still attached.
    pub fn len(&self) -> usize {
        self.sinks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
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
                code: "sink_failed".into(),
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
        self.flush().await;
        for sink in std::mem::take(&mut self.sinks) {
            let AttachedSink {
                name,
                tx,
                task,
                committed,
            } = sink;
            drop(tx);
            if let Some(failure) = Self::outcome(name, task, committed.is_some()).await {
                self.failures.push(failure);
            }
        }
        self.failures
    }

    async fn detach(sink: AttachedSink) -> SinkFailure {
        let AttachedSink {
            name,
            tx,
            task,
            committed,
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

    async fn outcome(
        name: String,
        task: JoinHandle<Result<(), SinkError>>,
        durable: bool,
    ) -> Option<SinkFailure> {
        let message = match task.await {
            Ok(Ok(())) => return None,
            Ok(Err(error)) => error.to_string(),
            Err(join) => format!("crashed: {join}"),
        };
        tracing::error!(sink = %name, "output failed: {message}");
        Some(SinkFailure {
            sink: name,
            message,
            durable,
        })
    }
}
