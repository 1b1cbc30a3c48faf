//! The `Sink` trait: an independent consumer of a session's outputs.
//!
//! Like a vector sink, a sink owns its loop: it receives batches of [`Output`]s in order from a
//! bounded channel and decides itself how to batch and flush. The channel is bounded, so a slow sink
//! slows the session (back-pressure) instead of losing or buffering without limit. A sink that
//! returns an error is detached; the others carry on.

use tokio::sync::mpsc;

use crate::fanout::OutputBatch;

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
