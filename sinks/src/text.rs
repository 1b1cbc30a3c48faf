//! `--output text`: the assistant's reply as plain text, streamed as it arrives. A tool call
//! that failed (a tool that cannot run, that exits non-zero, that times out) is reported on
//! stderr, since the reply alone would not show it.

use std::io::Write;

use reel_engine::{Acks, OutputBatch, OutputKind, Sink, SinkError};
use reel_proto::Any;
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

/// Writes assistant text deltas to its writer (stdout), and a final newline.
pub struct TextSink<W> {
    writer: W,
}

impl<W: Write + Send + 'static> TextSink<W> {
    pub fn new(writer: W) -> Self {
        Self { writer }
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for TextSink<W> {
    fn name(&self) -> String {
        "stdout".into()
    }

    async fn run(
        self: Box<Self>,
        input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let mut writer = self.writer;
        write_blocking(move || {
            let mut input = input;
            let mut ends_with_newline = true;
            // A reply in several segments (text, a tool round, more text) prints each on its
            // own line.
            let mut segment: Option<String> = None;
            while let Some(batch) = input.blocking_recv() {
                for output in batch.iter() {
                    match &output.kind {
                        OutputKind::Event(committed) => {
                            if let Any::ChatToolResultReady(result) = &committed.entry.event
                                && result.is_error
                            {
                                report_tool_error(&result.tool_name, &result.result);
                            }
                            for ui in &committed.ui_events {
                                if let Some(Any::ChatTextPatch(patch)) = &ui.payload
                                    && patch.role == "assistant"
                                    && !patch.text.is_empty()
                                {
                                    if segment.as_ref().is_some_and(|s| *s != patch.message_id)
                                        && !ends_with_newline
                                    {
                                        writer.write_all(b"\n")?;
                                    }
                                    if segment.as_ref() != Some(&patch.message_id) {
                                        segment = Some(patch.message_id.clone());
                                    }
                                    writer.write_all(patch.text.as_bytes())?;
                                    ends_with_newline = patch.text.ends_with('\n');
                                }
                            }
                        }
                        OutputKind::Done(_) if !ends_with_newline => {
                            writer.write_all(b"\n")?;
                            ends_with_newline = true;
                        }
                        _ => {}
                    }
                }
                if input.is_empty() {
                    writer.flush()?;
                }
            }
            writer.flush()?;
            Ok::<(), SinkError>(())
        })
        .await
    }
}

/// Reports a failed tool call on stderr: its name and the start of what it said.
fn report_tool_error(tool: &str, result: &str) {
    const SHOWN: usize = 500;
    let mut said: String = result.chars().take(SHOWN).collect();
    if result.chars().count() > SHOWN {
        said.push('…');
    }
    tracing::warn!("tool {tool:?} failed: {}", said.trim().escape_debug());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    #[tokio::test]
    async fn the_reply_and_a_final_newline() {
        let out = SharedWriter::default();
        assert!(run_sink(TextSink::new(out.clone())).await.is_empty());
        assert_eq!(out.text(), "Hello\n");
    }
}
