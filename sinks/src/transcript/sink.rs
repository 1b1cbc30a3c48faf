//! The transcript as a sink: `--output markdown|html` of a live run, and `reel export --format
//! markdown|html` and `reel show` of a stored one (the same outputs, read from the log).
//!
//! It folds every committed event into a [`Transcript`] and renders it when the stream ends: a
//! transcript is one document, written whole. Memory holds the session's text, not its events.

use std::io::{self, BufWriter, Write};

use reel_engine::{Acks, OutputBatch, OutputKind, Reads, Sink, SinkError};
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

use super::{Paint, Transcript, html, markdown, terminal};

/// How a transcript is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TranscriptFormat {
    /// A readable markdown document, every piece of session text escaped.
    Markdown,
    /// One self-contained HTML page (no script, nothing loaded from the network).
    Html,
    /// Text for a terminal, as `reel show` prints it; `events_in_log` is the stored log's
    /// length, for the heading ("at ordinal 12 of 40").
    Terminal { colour: bool, events_in_log: u64 },
}

/// Renders the session's transcript to `writer` when the stream ends.
pub struct TranscriptSink<W> {
    writer: W,
    format: TranscriptFormat,
}

impl<W: Write + Send + 'static> TranscriptSink<W> {
    pub fn new(writer: W, format: TranscriptFormat) -> Self {
        Self { writer, format }
    }

    fn write_all(self, mut input: mpsc::Receiver<OutputBatch>) -> io::Result<()> {
        let mut transcript = Transcript::new();
        let mut session_id = None;
        while let Some(batch) = input.blocking_recv() {
            for output in batch.iter() {
                session_id.get_or_insert_with(|| output.session_id.clone());
                if let OutputKind::Event(committed) = &output.kind {
                    transcript.apply(&committed.entry);
                }
            }
        }
        let session_id = session_id.as_deref().unwrap_or_default();
        let mut out = BufWriter::new(self.writer);
        match self.format {
            TranscriptFormat::Markdown => markdown::write(&mut out, session_id, &transcript),
            TranscriptFormat::Html => html::write(&mut out, session_id, &transcript),
            TranscriptFormat::Terminal {
                colour,
                events_in_log,
            } => {
                let paint = Paint { colour };
                terminal::render(&mut out, &paint, session_id, events_in_log, &transcript)
            }
        }?;
        out.flush()
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for TranscriptSink<W> {
    fn name(&self) -> String {
        "transcript".into()
    }

    /// A transcript is made from the log's events alone.
    fn reads(&self) -> Reads {
        Reads::LogOnly
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    async fn rendered(format: TranscriptFormat) -> String {
        let out = SharedWriter::default();
        assert!(
            run_sink(TranscriptSink::new(out.clone(), format))
                .await
                .is_empty()
        );
        out.text()
    }

    #[tokio::test]
    async fn markdown_holds_the_prompt_the_reply_and_the_end() {
        let text = rendered(TranscriptFormat::Markdown).await;
        assert!(text.starts_with("# Say hello\n"), "{text}");
        assert!(
            text.contains("Session `s1`, 1 runs, at ordinal 6."),
            "{text}"
        );
        assert!(text.contains("## Run 1 · finished · 1.5 s"), "{text}");
        assert!(text.contains("**Assistant**\n\nHello"), "{text}");
    }

    #[tokio::test]
    async fn html_is_one_page() {
        let text = rendered(TranscriptFormat::Html).await;
        assert!(text.starts_with("<!DOCTYPE html>"), "{text}");
        assert!(text.contains("Hello"), "{text}");
        assert!(text.trim_end().ends_with("</html>"), "{text}");
    }

    #[tokio::test]
    async fn terminal_text_is_coloured_only_when_asked() {
        let plain = TranscriptFormat::Terminal {
            colour: false,
            events_in_log: 9,
        };
        let text = rendered(plain).await;
        assert!(
            text.contains("Session s1 · 1 runs · at ordinal 6 of 9"),
            "{text}"
        );
        assert!(text.contains("Assistant: Hello"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        let coloured = TranscriptFormat::Terminal {
            colour: true,
            events_in_log: 9,
        };
        assert!(rendered(coloured).await.contains("\x1b[1m"));
    }
}
