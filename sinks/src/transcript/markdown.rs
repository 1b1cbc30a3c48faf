//! The markdown export: a transcript to read or share. Every piece of text from the session
//! (prompts, replies, reasoning, tool names and ids, errors) is escaped, so that a renderer
//! shows it as written: a reply holding raw HTML, a link, or a backtick cannot turn into markup,
//! run a script where HTML is allowed, or break out of the span it is in. (Markdown syntax in a
//! reply therefore shows as written, asterisks and all.) Tool input and output go into code
//! fences longer than any run of backticks inside them, so nothing can close its fence early.

use std::io::Write;

use super::{Block, Transcript, reported, usage_line};
use crate::printable::printable;

pub fn write(
    out: &mut impl Write,
    session_id: &str,
    transcript: &Transcript,
) -> std::io::Result<()> {
    let title = transcript.title().lines().next().unwrap_or("").trim();
    let title = if title.is_empty() {
        "reel session".to_owned()
    } else {
        escaped_line(title)
    };
    writeln!(out, "# {title}")?;
    writeln!(
        out,
        "\nSession {}, {} runs, at ordinal {}.",
        code_span(session_id),
        transcript.runs.len(),
        transcript.last_ordinal
    )?;
    for (number, run) in transcript.runs.iter().enumerate() {
        write!(out, "\n## Run {}", number + 1)?;
        match &run.end {
            Some(end) => {
                write!(out, " · {} · {}", escaped_line(&end.status), end.duration())?;
                if let Some(usage) = reported(end.usage.as_ref()) {
                    write!(out, " · {}", escaped_line(&usage_line(usage)))?;
                }
            }
            None => write!(out, " · not ended")?,
        }
        writeln!(out)?;
        if !run.model.is_empty() {
            writeln!(out, "\n*Model: {}*", escaped_line(&run.model))?;
        }
        writeln!(out, "\n**User**\n\n{}", quoted(&run.prompt))?;
        for block in &run.blocks {
            match block {
                Block::Reasoning(text) => {
                    writeln!(out, "\n*Thinking*\n\n{}", quoted(text))?;
                }
                Block::Text(text) => writeln!(out, "\n**Assistant**\n\n{}", escaped(text))?,
                Block::Retry(reason) | Block::Warning(reason) | Block::Marker(reason) => {
                    writeln!(out, "\n*{}*", escaped_line(reason))?
                }
                Block::Steer(text) => writeln!(out, "\n**User (steering)**\n\n{}", quoted(text))?,
                Block::Tool(tool) => {
                    writeln!(
                        out,
                        "\n**Tool call** {} ({}): {}\n\n{}",
                        code_span(&tool.name),
                        code_span(&tool.tool_call_id),
                        escaped_line(&tool.status),
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
            writeln!(out, "\n> **Error:** {}", escaped_line(&end.error))?;
        }
    }
    Ok(())
}

/// `text` as a block quote, escaped, its line breaks kept.
fn quoted(text: &str) -> String {
    escaped(text)
        .lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` as markdown that renders exactly as `text`: each character markdown would read as
/// syntax is backslash-escaped (see [`escaped_line`]), control characters and direction
/// overrides are shown as `\u{..}`, leading spaces (which would start a code block) become
/// no-break spaces, and each line break is a hard break.
fn escaped(text: &str) -> String {
    text.lines()
        .map(|line| {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let line = escaped_line(&line[indent..]);
            format!("{}{line}", "\u{a0}".repeat(indent))
        })
        .collect::<Vec<_>>()
        .join("\\\n")
}

/// Characters that are markdown syntax anywhere in a line: code, emphasis, links and images,
/// raw HTML and entities, tables, strikethrough, and the escape itself.
const INLINE_SYNTAX: &str = "\\`*_[]<>&|~";

/// One line of `text`, escaped (line breaks become spaces): the characters of
/// [`INLINE_SYNTAX`] everywhere, and what would start a heading, a list, a quote or a rule at
/// the line's start. Other punctuation stays as it is, so the markdown source stays readable.
fn escaped_line(text: &str) -> String {
    let text = printable(text).replace(['\n', '\r'], " ");
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    // An ordered list starts with digits and '.' or ')': the mark after the digits is escaped.
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    for (at, c) in text.chars().enumerate() {
        let starts_block = at == 0 && "#-+=>".contains(c);
        let ends_list_number = at == digits && digits > 0 && (c == '.' || c == ')');
        if INLINE_SYNTAX.contains(c) || starts_block || ends_list_number {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` as an inline code span that nothing inside can end: delimited by more backticks
/// than its longest run of them (CommonMark), on one line.
fn code_span(text: &str) -> String {
    let text: String = printable(text)
        .chars()
        .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
        .collect();
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest + 1);
    if text.starts_with('`') || text.ends_with('`') || text.is_empty() {
        format!("{ticks} {text} {ticks}")
    } else {
        format!("{ticks}{text}{ticks}")
    }
}

/// `text` in a code fence that nothing inside it can close.
fn fenced(text: &str, language: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let text = printable(text);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    format!("{fence}{language}\n{text}\n{fence}")
}

#[cfg(test)]
mod tests {
    use super::{code_span, escaped, fenced};

    #[test]
    fn a_fence_is_longer_than_any_backtick_run_inside() {
        assert_eq!(fenced("a", "json"), "```json\na\n```");
        assert_eq!(fenced("x ```` y", ""), "`````\nx ```` y\n`````");
    }

    #[test]
    fn markup_in_text_stays_text() {
        assert_eq!(
            escaped("<img src=x onerror=alert(1)> & **b** [l](javascript:x)"),
            "\\<img src=x onerror=alert(1)\\> \\& \\*\\*b\\*\\* \\[l\\](javascript:x)"
        );
        assert_eq!(escaped("a\n    b"), "a\\\n\u{a0}\u{a0}\u{a0}\u{a0}b");
        assert_eq!(escaped("x\u{202e}y"), "x\\\\u{202e}y");
        assert_eq!(
            escaped("# h\n- i\n1. j\nIt is 21 °C."),
            "\\# h\\\n\\- i\\\n1\\. j\\\nIt is 21 °C."
        );
    }

    #[test]
    fn a_code_span_cannot_be_closed_from_inside() {
        assert_eq!(code_span("get_weather"), "`get_weather`");
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("`x"), "`` `x ``");
    }
}
