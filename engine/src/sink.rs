//! The `Sink` trait: an independent consumer of a session's outputs.
//!
//! Like a vector sink, a sink owns its loop: it receives batches of [`Output`]s in order from a
//! bounded channel and decides itself how to batch and flush. The channel is bounded, so a slow sink
//! slows the session (back-pressure) instead of losing or buffering without limit. A sink that
//! returns an error is detached; the others carry on.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::{fanout::OutputBatch, output::Output};

/// Why a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode a frame: {0}")]
    Encode(String),
}

/// A consumer of session outputs.
#[async_trait::async_trait]
pub trait Sink: Send + 'static {
    /// Short name for messages, e.g. `stdout` or `debug-file`.
    fn name(&self) -> String;

    /// Consumes outputs until the channel closes, then flushes. Returning `Ok` means everything
    /// received was written.
    async fn run(self: Box<Self>, input: mpsc::Receiver<OutputBatch>) -> Result<(), SinkError>;
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

    async fn run(self: Box<Self>, mut input: mpsc::Receiver<OutputBatch>) -> Result<(), SinkError> {
        while let Some(batch) = input.recv().await {
            self.outputs
                .lock()
                .expect("not poisoned")
                .extend(batch.iter().cloned());
        }
        Ok(())
    }
}
