//! The HTML export: one self-contained page a person opens in a browser. Inline CSS only, no
//! script, nothing from the network, and a Content-Security-Policy that forbids both anyway.
//! Every piece of user, model and tool text is escaped: a reply holding `<script>` shows as
//! text. Reasoning and tool details fold away with `<details>`, which needs no script.

use std::io::Write;

use super::{Block, Transcript, reported, usage_line};
use crate::printable::is_bidi_control;

const STYLE: &str = "\
:root{--fg:#1d2129;--muted:#6b7280;--line:#e5e7eb;--user:#eef5ff;--tool:#fff8e6;--err:#b42318}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:#fafafa}
main{max-width:860px;margin:0 auto;padding:24px 16px 64px}
h1{font-size:22px;margin:0 0 4px}
.meta{color:var(--muted);font-size:13px}
section.run{background:#fff;border:1px solid var(--line);border-radius:10px;margin:20px 0;padding:14px 16px}
.run>header{display:flex;flex-wrap:wrap;gap:8px;align-items:baseline;color:var(--muted);font-size:13px;margin-bottom:10px}
.run>header strong{color:var(--fg);font-size:14px}
.status{padding:1px 8px;border-radius:999px;background:#ecfdf3;color:#067647}
.status.failed,.status.stopped,.status.max_iterations_reached{background:#fef3f2;color:var(--err)}
.msg{white-space:pre-wrap;overflow-wrap:anywhere;margin:8px 0;padding:8px 12px;border-radius:8px}
.user{background:var(--user)}
.assistant{background:#fff;border-left:3px solid #7c3aed}
.who{display:block;font-size:12px;font-weight:600;color:var(--muted);margin-bottom:2px}
details{margin:8px 0;border:1px solid var(--line);border-radius:8px;padding:6px 10px}
details.tool{background:var(--tool)}
details.reasoning{color:var(--muted)}
summary{cursor:pointer;font-size:13px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:6px 0;font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.error{color:var(--err)}
.retry{color:var(--muted);font-size:12px}
";

pub fn write(
    out: &mut impl Write,
    session_id: &str,
    transcript: &Transcript,
) -> std::io::Result<()> {
    let title = transcript.title().lines().next().unwrap_or("").trim();
    let title = if title.is_empty() {
        "reel session"
    } else {
        title
    };
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">"
    )?;
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
    )?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
    writeln!(
        out,
        "<title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>",
        escape(title)
    )?;
    writeln!(out, "<h1>{}</h1>", escape(title))?;
    writeln!(
        out,
        "<p class=\"meta\">Session <code>{}</code> · {} runs · at ordinal {}</p>",
        escape(session_id),
        transcript.runs.len(),
        transcript.last_ordinal
    )?;
    for (number, run) in transcript.runs.iter().enumerate() {
        writeln!(out, "<section class=\"run\" id=\"run-{}\">", number + 1)?;
        write!(out, "<header><strong>Run {}</strong>", number + 1)?;
        match &run.end {
            Some(end) => {
                write!(
                    out,
                    "<span class=\"status {0}\">{0}</span><span>{1}</span>",
                    escape(&end.status),
                    end.duration()
                )?;
                if let Some(usage) = reported(end.usage.as_ref()) {
                    write!(out, "<span>{}</span>", escape(&usage_line(usage)))?;
                }
            }
            None => write!(out, "<span class=\"status failed\">not ended</span>")?,
        }
        if !run.model.is_empty() {
            write!(out, "<span>{}</span>", escape(&run.model))?;
        }
        writeln!(out, "</header>")?;
        writeln!(
            out,
            "<div class=\"msg user\"><span class=\"who\">User</span>{}</div>",
            escape(&run.prompt)
        )?;
        for block in &run.blocks {
            match block {
                Block::Reasoning(text) => writeln!(
                    out,
                    "<details class=\"reasoning\"><summary>Thinking</summary><pre>{}</pre></details>",
                    escape(text)
                )?,
                Block::Text(text) => writeln!(
                    out,
                    "<div class=\"msg assistant\"><span class=\"who\">Assistant</span>{}</div>",
                    escape(text)
                )?,
                Block::Retry(reason) | Block::Warning(reason) | Block::Marker(reason) => {
                    writeln!(out, "<p class=\"retry\">{}</p>", escape(reason))?
                }
                Block::Steer(text) => writeln!(
                    out,
                    "<div class=\"msg user\"><span class=\"who\">User (steering)</span>{}</div>",
                    escape(text)
                )?,
                Block::Tool(tool) => {
                    writeln!(
                        out,
                        "<details class=\"tool\"><summary>Tool <code>{}</code> · {}</summary>",
                        escape(&tool.name),
                        escape(&tool.status)
                    )?;
                    writeln!(
                        out,
                        "<div>Arguments</div><pre>{}</pre>",
                        escape(&tool.input)
                    )?;
                    if let Some(result) = &tool.result {
                        let (label, class) = if tool.is_error {
                            ("Error", " class=\"error\"")
                        } else {
                            ("Result", "")
                        };
                        writeln!(
                            out,
                            "<div>{label}</div><pre{class}>{}</pre>",
                            escape(result)
                        )?;
                    }
                    writeln!(out, "</details>")?;
                }
            }
        }
        if let Some(end) = run.end.as_ref().filter(|end| !end.error.is_empty()) {
            writeln!(out, "<p class=\"error\">{}</p>", escape(&end.error))?;
        }
        writeln!(out, "</section>")?;
    }
    writeln!(out, "</main>\n</body>\n</html>")
}

/// `text` safe inside HTML text and attribute values. Direction overrides and isolates
/// (U+202E and kin), which would reorder how the page reads, and control characters (which a
/// page may not hold) are shown as `\u{..}` instead.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if is_bidi_control(c) || (c.is_control() && !matches!(c, '\n' | '\t')) => {
                escaped.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_becomes_text() {
        assert_eq!(
            escape(r#"<img src=x onerror="alert('x')">&"#),
            "&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;"
        );
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
    }
}
