//! `reel tail`'s form for people: the session so far as `reel show` prints it, then each new
//! event as a line or as streamed text (the reply as it arrives), with the same care for the
//! terminal (control and direction characters are shown, not obeyed).

use std::io::Write;

use reel_engine::DoneStatus;
use reel_proto::{Any, rpc::UiEventFrame};

use super::{
    printable,
    show::{Paint, render},
    transcript::Transcript,
};

/// Prints a followed session for a person.
pub struct TextTail<W: Write> {
    out: W,
    paint: Paint,
    /// Whether the last thing printed ended its line.
    at_line_start: bool,
}

impl<W: Write> TextTail<W> {
    pub fn new(out: W, paint: Paint) -> Self {
        Self {
            out,
            paint,
            at_line_start: true,
        }
    }

    /// The session so far.
    pub fn start(
        &mut self,
        session_id: &str,
        events: u64,
        so_far: &Transcript,
    ) -> std::io::Result<()> {
        render(&mut self.out, &self.paint, session_id, events, so_far)?;
        writeln!(
            self.out,
            "{}",
            self.paint.dim("── following; new events appear below")
        )
    }

    /// One ui event of a new commit.
    pub fn event(&mut self, event: &UiEventFrame) -> std::io::Result<()> {
        let Some(payload) = &event.payload else {
            return Ok(());
        };
        match payload {
            Any::ChatUserMessageAccepted(m) => self.line(&format!(
                "\n{} {}",
                self.paint.user("You:"),
                printable(&m.text)
            )),
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

    /// The writer has gone.
    pub fn done(&mut self, status: DoneStatus) -> std::io::Result<()> {
        let text = match status {
            DoneStatus::Ok => "── the session's writer has finished",
            _ => "── stopped following",
        };
        self.line(&self.paint.dim(text))
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// `text` on a line of its own.
    fn line(&mut self, text: &str) -> std::io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{text}")?;
        self.at_line_start = true;
        Ok(())
    }

    fn end_line(&mut self) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
            self.at_line_start = true;
        }
        Ok(())
    }
}
