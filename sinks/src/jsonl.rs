//! Protocol frames as JSON lines: the stdout sink of `--output jsonl` / `--rpc` and the debug
//! file sink of `--debug-events-jsonl`.
//!
//! The sink writes on a blocking thread with plain `std::io::Write`. It encodes every batch
//! already queued into one buffer (64 KiB, written whenever it fills) and flushes after them,
//! so a fast session gets large writes and a slow one gets each frame the moment it exists. Writes block when the reader is
//! slow; the session's bounded queue then makes the session wait (back-pressure), so memory stays
//! flat however slowly stdout is read.

use std::{
    fs::{self, File},
    io::{self, BufWriter, Write},
    path::Path,
};

use reel_engine::{Acks, Output, OutputBatch, Sink, SinkError};
use reel_proto::json;
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

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
        write_blocking(move || this.write_all(input)).await
    }
}

impl<W: Write> JsonlFrameSink<W> {
    fn write_all(mut self, mut input: mpsc::Receiver<OutputBatch>) -> Result<(), SinkError> {
        // Frames collect in the buffer until it holds a chunk; a frame bigger than that (a
        // long reply's finished segment) goes through to the writer piece by piece, so the
        // sink never holds a copy of it.
        let mut out = BufWriter::with_capacity(WRITE_CHUNK, &mut self.writer);
        while let Some(batch) = input.blocking_recv() {
            let queued = std::iter::from_fn(|| input.try_recv().ok());
            for batch in std::iter::once(batch).chain(queued) {
                for output in batch.iter() {
                    encode(output, self.include_backend_events, &mut out)?;
                }
            }
            out.flush()?;
        }
        out.flush()?;
        Ok(())
    }
}

pub(crate) fn encode(
    output: &Output,
    include_backend_events: bool,
    out: &mut impl Write,
) -> Result<(), SinkError> {
    output
        .for_each_line(include_backend_events, |line| {
            json::write_line_ref(&mut *out, &line)
        })
        .map_err(|e| match e.is_io() {
            // A closed pipe or a full disk, as the writer said it.
            true => SinkError::Io(e.into()),
            false => SinkError::Encode(e.to_string()),
        })
}

#[cfg(test)]
mod tests {
    use reel_proto::rpc::{RpcLine, rpc_line::Frame};

    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    fn frames(text: &str) -> Vec<Frame> {
        text.lines()
            .map(|line| {
                let line: RpcLine = serde_json::from_str(line).expect(line);
                assert_eq!(line.session_id, "s1");
                line.frame.expect("a frame")
            })
            .collect()
    }

    #[tokio::test]
    async fn one_line_per_frame_hello_first_done_last() {
        let out = SharedWriter::default();
        assert!(
            run_sink(JsonlFrameSink::new("t", out.clone(), false))
                .await
                .is_empty()
        );
        let frames = frames(&out.text());
        assert!(matches!(frames.first(), Some(Frame::Hello(_))));
        assert!(matches!(frames.last(), Some(Frame::Done(d)) if d.status == "ok"));
        assert!(!frames.iter().any(|f| matches!(f, Frame::BackendEvent(_))));
        let patches = frames
            .iter()
            .filter(|f| matches!(f, Frame::UiEvent(ui) if ui.name == "ChatTextPatch"))
            .count();
        assert_eq!(patches, 2, "one patch per delta");
    }

    #[tokio::test]
    async fn backend_events_come_before_their_ui_events_when_asked() {
        let out = SharedWriter::default();
        run_sink(JsonlFrameSink::new("t", out.clone(), true)).await;
        let frames = frames(&out.text());
        let backend: Vec<u64> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::BackendEvent(b) => Some(b.ordinal),
                _ => None,
            })
            .collect();
        assert_eq!(backend, [1, 2, 3, 4, 5, 6], "every log event, in order");
    }

    #[tokio::test]
    async fn a_failed_writer_fails_the_sink() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let failures = run_sink(JsonlFrameSink::new("t", Closed, false)).await;
        assert_eq!(failures.len(), 1);
        assert!(failures[0].message.contains("pipe"), "{failures:?}");
    }
}
