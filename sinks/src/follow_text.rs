//! `reel tail`'s form for people: the session so far as `reel show` prints it (at the stream's
//! hello), then each new event as a line or as streamed text (the reply as it arrives), with the
//! same care for the terminal (control and direction characters are shown, not obeyed).

use std::io::{self, Write};

use reel_engine::{
    Acks, DoneStatus, Output, OutputBatch, OutputKind, QueuedPromptKind, Sink, SinkError,
};
use reel_proto::{Any, rpc::UiEventFrame};
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

use crate::{
    printable::printable,
    transcript::{Paint, Transcript, render},
};

/// Prints a followed session for a person.
pub struct FollowTextSink<W: Write> {
    out: W,
    paint: Paint,
    /// The session up to where following starts, and the stored log's length then.
    so_far: Transcript,
    events_in_log: u64,
    /// Whether the last thing printed ended its line.
    at_line_start: bool,
}

impl<W: Write + Send + 'static> FollowTextSink<W> {
    /// Prints `so_far` (the session's first `events_in_log` events) at hello, then what comes.
    pub fn new(out: W, colour: bool, so_far: Transcript, events_in_log: u64) -> Self {
        Self {
            out,
            paint: Paint { colour },
            so_far,
            events_in_log,
            at_line_start: true,
        }
    }

    fn write_all(mut self, mut input: mpsc::Receiver<OutputBatch>) -> io::Result<()> {
        while let Some(batch) = input.blocking_recv() {
            for output in batch.iter() {
                self.output(output)?;
            }
            if input.is_empty() {
                self.out.flush()?;
            }
        }
        self.out.flush()
    }

    fn output(&mut self, output: &Output) -> io::Result<()> {
        match &output.kind {
            OutputKind::Hello(_) => self.start(&output.session_id),
            OutputKind::Event(committed) => committed
                .ui_events
                .iter()
                .try_for_each(|event| self.event(event)),
            OutputKind::Done(done) => self.done(DoneStatus::parse(&done.status)),
            OutputKind::Snapshot(_) | OutputKind::Error(_) => Ok(()),
        }
    }

    /// The session so far.
    fn start(&mut self, session_id: &str) -> io::Result<()> {
        let so_far = std::mem::take(&mut self.so_far);
        render(
            &mut self.out,
            &self.paint,
            session_id,
            self.events_in_log,
            &so_far,
        )?;
        writeln!(
            self.out,
            "{}",
            self.paint.dim("── following; new events appear below")
        )
    }

    /// One ui event of a new commit.
    fn event(&mut self, event: &UiEventFrame) -> io::Result<()> {
        let Some(payload) = &event.payload else {
            return Ok(());
        };
        match payload {
            Any::ChatUserMessageAccepted(m) => self.line(&format!(
                "\n{} {}",
                self.paint.user("You:"),
                printable(&m.text)
            )),
            Any::ChatPromptDelivered(d) if d.kind == QueuedPromptKind::Steer.as_str() => {
                self.line(&format!(
                    "\n{} {}",
                    self.paint.user("You (steering):"),
                    printable(&d.prompt)
                ))
            }
            Any::ChatContextCompacted(c) => self.line(&self.paint.dim(&format!(
                "── context compacted: {} messages summarized, about {} -> {} tokens",
                c.messages_replaced, c.tokens_before, c.tokens_after
            ))),
            Any::ChatContentRedacted(r) => self.line(
                &self
                    .paint
                    .dim(&format!("── {}", crate::transcript::redaction_marker(r))),
            ),
            Any::ChatTextSegmentStarted(s) if s.role == "assistant" => {
                self.end_line()?;
                write!(self.out, "{} ", self.paint.bold("Assistant:"))?;
                self.at_line_start = false;
                Ok(())
            }
            Any::ChatTextPatch(patch) if patch.role == "assistant" => {
                write!(self.out, "{}", printable(&patch.text))?;
                self.at_line_start = patch.text.ends_with('\n');
                Ok(())
            }
            Any::ChatReasoningPatch(patch) => {
                write!(self.out, "{}", self.paint.dim(&printable(&patch.text)))?;
                self.at_line_start = patch.text.ends_with('\n');
                Ok(())
            }
            Any::ChatReasoningSegmentStarted(_) => {
                self.end_line()?;
                write!(self.out, "{}", self.paint.dim("  ┊ "))?;
                self.at_line_start = false;
                Ok(())
            }
            Any::ChatToolCallRequested(call) => self.line(&self.paint.tool(&format!(
                "  ⚙ {}({})",
                printable(&call.tool_name),
                printable(&call.input)
            ))),
            Any::ChatToolResultReady(result) => {
                let first = result.result.lines().next().unwrap_or_default();
                let text = format!("    → {}", printable(first));
                let text = if result.is_error {
                    self.paint.error(&text)
                } else {
                    text
                };
                self.line(&text)
            }
            Any::ChatRunWarning(warning) => self.line(
                &self
                    .paint
                    .error(&format!("  warning: {}", printable(&warning.message))),
            ),
            Any::ChatRunFinished(run) => self.line(
                &self
                    .paint
                    .dim(&format!("── run {}", printable(&run.status))),
            ),
            Any::ChatRunStopped(_) => self.line(&self.paint.dim("── run stopped")),
            Any::ChatRunFailed(run) => self.line(
                &self
                    .paint
                    .error(&format!("── run failed: {}", printable(&run.error))),
            ),
            _ => Ok(()),
        }
    }

    /// The writer has gone (done `ok`), or tail was stopped.
    fn done(&mut self, status: Option<DoneStatus>) -> io::Result<()> {
        let text = match status {
            Some(DoneStatus::Ok) => "── the session's writer has finished",
            _ => "── stopped following",
        };
        self.line(&self.paint.dim(text))
    }

    /// `text` on a line of its own.
    fn line(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{text}")?;
        self.at_line_start = true;
        Ok(())
    }

    fn end_line(&mut self) -> io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
            self.at_line_start = true;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for FollowTextSink<W> {
    fn name(&self) -> String {
        "stdout".into()
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

    #[tokio::test]
    async fn what_came_before_then_each_new_event_then_the_end() {
        let out = SharedWriter::default();
        let sink = FollowTextSink::new(out.clone(), false, Transcript::new(), 0);
        assert!(run_sink(sink).await.is_empty());
        let text = out.text();
        let following = text.find("── following").expect(&text);
        let prompt = text.find("You: Say hello").expect(&text);
        let reply = text.find("Assistant: Hello\n").expect(&text);
        let end = text
            .find("── the session's writer has finished")
            .expect(&text);
        assert!(
            following < prompt && prompt < reply && reply < end,
            "{text}"
        );
    }
}
