//! The markdown export: a transcript to read or share. Replies are markdown already and are
//! kept as they are; tool input and output go into code fences longer than any run of
//! backticks inside them, so no content can close its fence early.

use std::io::Write;

use crate::inspect::transcript::{Block, Transcript, duration_text, reported, usage_line};

pub fn write(
    out: &mut impl Write,
    session_id: &str,
    transcript: &Transcript,
) -> std::io::Result<()> {
    let title = transcript.title().lines().next().unwrap_or("").trim();
    writeln!(
        out,
        "# {}",
        if title.is_empty() {
            "reel session"
        } else {
            title
        }
    )?;
    writeln!(
        out,
        "\nSession `{session_id}`, {} runs, at ordinal {}.",
        transcript.runs.len(),
        transcript.last_ordinal
    )?;
    for (number, run) in transcript.runs.iter().enumerate() {
        write!(out, "\n## Run {}", number + 1)?;
        match &run.end {
            Some(end) => {
                write!(
                    out,
                    " · {} · {}",
                    end.status,
                    duration_text(end.duration_ms)
                )?;
                if let Some(usage) = reported(end.usage.as_ref()) {
                    write!(out, " · {}", usage_line(usage))?;
                }
            }
            None => write!(out, " · not ended")?,
        }
        writeln!(out)?;
        if !run.model.is_empty() {
            writeln!(out, "\n*Model: {}*", run.model)?;
        }
        writeln!(out, "\n**User**\n\n{}", quoted(&run.prompt))?;
        for block in &run.blocks {
            match block {
                Block::Reasoning(text) => {
                    writeln!(out, "\n*Thinking*\n\n{}", quoted(text))?;
                }
                Block::Text(text) => writeln!(out, "\n**Assistant**\n\n{text}")?,
                Block::Retry(reason) => writeln!(out, "\n*{reason}*")?,
                Block::Tool(tool) => {
                    writeln!(
                        out,
                        "\n**Tool call** `{}` (`{}`): {}\n\n{}",
                        tool.name,
                        tool.tool_call_id,
                        tool.status,
                        fenced(&tool.input, "json")
                    )?;
                    if let Some(result) = &tool.result {
                        let label = if tool.is_error { "Error" } else { "Result" };
                        writeln!(out, "\n{label}:\n\n{}", fenced(result, ""))?;
                    }
                }
            }
        }
        if let Some(end) = run.end.as_ref().filter(|end| !end.error.is_empty()) {
            writeln!(out, "\n> **Error:** {}", end.error.replace('\n', " "))?;
        }
    }
    Ok(())
}

/// `text` as a block quote.
fn quoted(text: &str) -> String {
    text.lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` in a code fence that nothing inside it can close.
fn fenced(text: &str, language: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let text = text.strip_suffix('\n').unwrap_or(text);
    format!("{fence}{language}\n{text}\n{fence}")
}

#[cfg(test)]
mod tests {
    use super::fenced;

    #[test]
    fn a_fence_is_longer_than_any_backtick_run_inside() {
        assert_eq!(fenced("a", "json"), "```json\na\n```");
        assert_eq!(fenced("x ```` y", ""), "`````\nx ```` y\n`````");
    }
}
