//! Protocol frames as JSON lines: the stdout sink of `--output jsonl` / `--rpc` and the debug
//! file sink of `--debug-events-jsonl`.
//!
//! The sink writes on a blocking thread with plain `std::io::Write`. It encodes every batch
//! already queued into one buffer (up to 64 KiB) and writes that buffer in one go, so a fast session gets large
//! writes and a slow one gets each frame the moment it exists. Writes block when the reader is
//! slow; the session's bounded queue then makes the session wait (back-pressure), so memory stays
//! flat however slowly stdout is read.

use std::{
    fs::{self, File},
    io::{self, Write},
    path::Path,
};

use reel_engine::{Acks, Output, OutputBatch, Sink, SinkError};
use reel_proto::json;
use tokio::sync::mpsc;

/// Above this many buffered bytes the sink writes before encoding more.
const WRITE_CHUNK: usize = 64 * 1024;

/// Writes every frame as one line of canonical protobuf JSON.
pub struct JsonlFrameSink<W> {
    name: String,
    writer: W,
    include_backend_events: bool,
}

impl<W: Write + Send + 'static> JsonlFrameSink<W> {
    /// A sink named `name` writing to `writer`.
    pub fn new(name: impl Into<String>, writer: W, include_backend_events: bool) -> Self {
        Self {
            name: name.into(),
            writer,
            include_backend_events,
        }
    }
}

/// The JSONL frame sink on stdout.
pub type StdoutJsonlSink = JsonlFrameSink<io::Stdout>;

impl StdoutJsonlSink {
    pub fn stdout(include_backend_events: bool) -> Self {
        Self::new("stdout", io::stdout(), include_backend_events)
    }
}

/// The `--debug-events-jsonl` file: the frames stdout carries in jsonl mode, and always the
/// log's own events (`backendEvent` frames) among them: it is the capture `reel replay`
/// rebuilds a session from.
pub struct DebugFileSink;

impl DebugFileSink {
    /// Creates the file's parent folders and creates or truncates the file.
    pub fn create(path: &Path) -> io::Result<JsonlFrameSink<File>> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        let file = File::create(path)?;
        Ok(JsonlFrameSink::new("debug-file", file, true))
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for JsonlFrameSink<W> {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn run(
        self: Box<Self>,
        input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let this = *self;
        tokio::task::spawn_blocking(move || this.write_all(input))
            .await
            .map_err(|join| SinkError::Io(io::Error::other(join.to_string())))?
    }
}

impl<W: Write> JsonlFrameSink<W> {
    fn write_all(mut self, mut input: mpsc::Receiver<OutputBatch>) -> Result<(), SinkError> {
        let mut buffer = Vec::with_capacity(2 * WRITE_CHUNK);
        while let Some(batch) = input.blocking_recv() {
            let queued = std::iter::from_fn(|| input.try_recv().ok());
            for batch in std::iter::once(batch).chain(queued) {
                for output in batch.iter() {
                    self.encode(output, &mut buffer)?;
                    if buffer.len() >= WRITE_CHUNK {
                        self.writer.write_all(&buffer)?;
                        buffer.clear();
                    }
                }
            }
            self.writer.write_all(&buffer)?;
            self.writer.flush()?;
            buffer.clear();
            // A huge frame (a long reply's finished segment) grew the buffer: give it back.
            buffer.shrink_to(2 * WRITE_CHUNK);
        }
        self.writer.flush()?;
        Ok(())
    }

    fn encode(&self, output: &Output, buffer: &mut Vec<u8>) -> Result<(), SinkError> {
        output
            .for_each_line(self.include_backend_events, |line| {
                json::write_line(buffer, &line)
            })
            .map_err(|e| SinkError::Encode(e.to_string()))
    }
}
