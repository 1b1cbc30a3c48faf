//! A transcript for a terminal, as `reel show` prints it (and `reel tail` before it follows).
//!
//! Colour only when asked (the CLI asks when stdout is a terminal and NO_COLOR is not set).
//! Model and user text is shown with its control characters replaced, so a reply cannot move
//! the cursor, retitle the window or hide text with escape sequences.

use std::io::Write;

use super::{Block, Transcript, reported, usage_line};
use crate::printable::printable;

/// ANSI styling, or none.
pub struct Paint {
    pub colour: bool,
}

impl Paint {
    fn style(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    pub fn bold(&self, text: &str) -> String {
        self.style("1", text)
    }
    pub fn dim(&self, text: &str) -> String {
        self.style("2", text)
    }
    pub fn user(&self, text: &str) -> String {
        self.style("1;36", text)
    }
    pub fn tool(&self, text: &str) -> String {
        self.style("33", text)
    }
    pub fn error(&self, text: &str) -> String {
        self.style("31", text)
    }
}

fn indented(text: &str, prefix: &str) -> String {
    printable(text)
        .lines()
        .map(|line| format!("{prefix}{line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The session as `reel show` prints it: a heading, then each run with its blocks.
pub fn render(
    out: &mut impl Write,
    paint: &Paint,
    session_id: &str,
    events: u64,
    transcript: &Transcript,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        paint.bold(&format!(
            "Session {} · {} runs · at ordinal {} of {events}",
            printable(session_id),
            transcript.runs.len(),
            transcript.last_ordinal
        ))
    )?;
    for (number, run) in transcript.runs.iter().enumerate() {
        let mut heading = format!("── Run {} (ordinal {})", number + 1, run.ordinal);
        match &run.end {
            Some(end) => {
                heading.push_str(&format!(
                    " · {} · {}",
                    printable(&end.status),
                    end.duration()
                ));
                if let Some(usage) = reported(end.usage.as_ref()) {
                    heading.push_str(&format!(" · {}", usage_line(usage)));
                }
            }
            None => heading.push_str(" · not ended"),
        }
        if !run.model.is_empty() {
            heading.push_str(&format!(" · {}", printable(&run.model)));
        }
        writeln!(out, "\n{}", paint.dim(&heading))?;
        writeln!(out, "{} {}", paint.user("You:"), printable(&run.prompt))?;
        for block in &run.blocks {
            match block {
                Block::Reasoning(text) => {
                    writeln!(out, "{}", paint.dim(&indented(text, "  ┊ ")))?;
                }
                Block::Text(text) => {
                    writeln!(out, "{} {}", paint.bold("Assistant:"), printable(text))?;
                }
                Block::Retry(reason) | Block::Marker(reason) => {
                    writeln!(out, "{}", paint.dim(&printable(reason)))?
                }
                Block::Steer(text) => writeln!(out, "{} {}", paint.user("You:"), printable(text))?,
                Block::Warning(warning) => writeln!(out, "{}", paint.error(&printable(warning)))?,
                Block::Tool(tool) => {
                    let call = format!(
                        "  ⚙ {}({}) → {}",
                        printable(&tool.name),
                        printable(&tool.input),
                        printable(&tool.status)
                    );
                    writeln!(out, "{}", paint.tool(&call))?;
                    if let Some(result) = &tool.result {
                        let shown = indented(result, "    ");
                        if tool.is_error {
                            writeln!(out, "{}", paint.error(&shown))?;
                        } else {
                            writeln!(out, "{shown}")?;
                        }
                    }
                }
            }
        }
        if let Some(end) = run.end.as_ref().filter(|end| !end.error.is_empty()) {
            let line = format!("  ✗ {}", printable(&end.error));
            writeln!(out, "{}", paint.error(&line))?;
        }
    }
    Ok(())
}
