//! The `Sink` trait: an independent consumer of a session's outputs.
//!
//! Like a vector sink, a sink owns its loop: it receives batches of [`Output`]s in order from a
//! bounded channel and decides itself how to batch and flush. The channel is bounded, so a slow sink
//! slows the session (back-pressure) instead of losing or buffering without limit. A sink that
//! returns an error is detached; the others carry on.
//!
//! A durable sink (a database) says so with [`Sink::durability`] and reports the highest ordinal
//! it has made durable through the [`Acks`] its `run` is handed; the session waits for that
//! before a request's done and before a run's side effects. [`crate::Fanout::attach`] is the one
//! way a sink starts, so no caller can forget to wire the acknowledgements.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::{fanout::OutputBatch, idle::SinkIdle, output::Output};

/// Why a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A store the sink writes to failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot encode a frame: {0}")]
    Encode(String),
}

/// Whether a session waits for a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Writes what it gets; nobody waits for it (stdout, the debug file).
    BestEffort,
    /// Makes the log durable and acknowledges it: the session waits for its acknowledgements.
    /// `acknowledged` is the ordinal it holds already when it starts (a resumed session's).
    Durable { acknowledged: u64 },
}

/// What of the outputs a sink reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Frames: the ui events and snapshots the timeline projects, besides the log's events.
    Frames,
    /// The log's events alone (a transcript, the model context, counts): a stored session's
    /// reader may skip projecting ui events and snapshots when no sink reads them, and then
    /// hands such a sink events without ui events and empty snapshots.
    LogOnly,
}

/// Where a sink acknowledges the highest ordinal it has made durable (a best-effort sink
/// ignores it), and says when it waits for its next batch.
#[derive(Debug)]
pub struct Acks {
    committed: watch::Sender<u64>,
    /// For a sink on its session writer's task: its part of the session's idle signal.
    idle: Option<SinkIdle>,
}

impl Acks {
    /// A pair: the sink's end and the session's.
    pub(crate) fn channel(acknowledged: u64) -> (Self, watch::Receiver<u64>) {
        let (committed, receiver) = watch::channel(acknowledged);
        (
            Self {
                committed,
                idle: None,
            },
            receiver,
        )
    }

    /// The same, counted in the idle signal of a session whose writer's task runs the sink.
    pub(crate) fn idle_in(self, idle: Option<SinkIdle>) -> Self {
        Self { idle, ..self }
    }

    /// Everything up to `ordinal` is durable.
    pub fn committed(&self, ordinal: u64) {
        self.committed.send_replace(ordinal);
    }

    /// The next batch of `input`, `None` once it has closed; the sink counts as waiting
    /// with nothing in flight meanwhile. On a session writer's task (see
    /// [`crate::Fanout::on_writer_task`]), a session whose writer and sinks all wait holds no
    /// task until a request comes; a sink that reads its input otherwise keeps its session's
    /// task. Elsewhere it is `input.recv()`.
    pub async fn next_batch(&self, input: &mut mpsc::Receiver<OutputBatch>) -> Option<OutputBatch> {
        self.waiting(true);
        let batch = input.recv().await;
        self.waiting(false);
        batch
    }

    fn waiting(&self, waiting: bool) {
        if let Some(idle) = &self.idle {
            idle.set(waiting);
        }
    }
}

/// A consumer of session outputs.
#[async_trait::async_trait]
pub trait Sink: Send + 'static {
    /// Short name for messages, e.g. `stdout` or `debug-file`.
    fn name(&self) -> String;

    /// Whether the session waits for this sink's acknowledgements.
    fn durability(&self) -> Durability {
        Durability::BestEffort
    }

    /// What of the outputs the sink reads.
    fn reads(&self) -> Reads {
        Reads::Frames
    }

    /// Consumes outputs until the channel closes, then flushes. Returning `Ok` means everything
    /// received was written. A durable sink reports what it has made durable through `acks`.
    async fn run(
        self: Box<Self>,
        input: mpsc::Receiver<OutputBatch>,
        acks: Acks,
    ) -> Result<(), SinkError>;
}

/// A sink whose work on a batch is short and never waits: handing frames to subscribers,
/// notifying an editor. The fan-out hands it each batch on the session's own task, so it holds
/// no task, channel or queue of its own, and an idle session spends nothing on it. It cannot
/// fail: what it hands on that nobody takes is for the receiver to catch up on.
pub trait InlineSink: Send + 'static {
    /// What of the outputs the sink reads.
    fn reads(&self) -> Reads {
        Reads::Frames
    }

    /// Takes the batch's outputs, in order.
    fn deliver(&mut self, batch: &OutputBatch);
}

/// Keeps every output in memory, in order: for embedding reel in a program, and for tests.
#[derive(Clone, Default)]
pub struct MemorySink {
    outputs: Arc<Mutex<Vec<Output>>>,
}

impl MemorySink {
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything received so far.
    pub fn outputs(&self) -> Vec<Output> {
        self.outputs.lock().expect("not poisoned").clone()
    }
}

#[async_trait::async_trait]
impl Sink for MemorySink {
    fn name(&self) -> String {
        "memory".into()
    }

    async fn run(
        self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        while let Some(batch) = input.recv().await {
            self.outputs
                .lock()
                .expect("not poisoned")
                .extend(batch.iter().cloned());
        }
        Ok(())
    }
}
