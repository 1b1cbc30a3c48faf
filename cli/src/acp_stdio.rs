//! `reel acp`'s stdin and stdout: the ACP SDK's line transport, with stdin read as stdin RPC
//! reads it. A line is at most [`DEFAULT_LINE_LIMIT`] bytes (a longer one is skipped as it
//! streams in, never held) and must be UTF-8; either fault is answered with JSON-RPC's parse
//! error (-32700, id null), as malformed JSON is, and the agent goes on with the next line.
//! (The SDK's own stdio transport reads unbounded lines and ends the connection at the first
//! byte that is not UTF-8.)

use std::io;

use futures::{SinkExt, StreamExt, channel::mpsc};
use reel_acp::Lines;
use tokio::io::{AsyncWriteExt, BufReader};

use crate::{
    bounded_lines::Line,
    stdin_rpc::{DEFAULT_LINE_LIMIT, LineReader},
};

/// Lines waiting for stdout.
const OUTGOING: usize = 64;

/// The transport (lines in from stdin, lines out to stdout), and the task writing stdout,
/// which ends once the transport has gone and every line it was given is written.
pub fn stdio() -> (
    Lines<
        impl futures::Sink<String, Error = io::Error> + Send + 'static,
        impl futures::Stream<Item = io::Result<String>> + Send + 'static,
    >,
    tokio::task::JoinHandle<()>,
) {
    let (outgoing, lines) = mpsc::channel::<String>(OUTGOING);
    let written = tokio::spawn(write_lines(lines));
    let answers = outgoing.clone();
    let reader = LineReader::new(BufReader::new(tokio::io::stdin()), DEFAULT_LINE_LIMIT);
    let incoming =
        futures::stream::unfold((reader, answers), |(mut reader, mut answers)| async move {
            loop {
                let line = match reader.next_line().await {
                    Ok(Some(line)) => line,
                    Ok(None) => return None,
                    Err(error) => return Some((Err(error), (reader, answers))),
                };
                match accepted(line) {
                    Ok(text) => return Some((Ok(text), (reader, answers))),
                    Err(why) => {
                        tracing::warn!("reel acp: {why}; answered -32700");
                        // The client may be gone: its lines are not answered then.
                        let _ = answers.send(parse_error(&why)).await;
                    }
                }
            }
        });
    let transport = Lines::new(outgoing.sink_map_err(io::Error::other), incoming);
    (transport, written)
}

/// A line's text, or why it cannot be a message.
fn accepted(line: Line) -> Result<String, String> {
    match line {
        Line::Text { bytes, .. } => String::from_utf8(bytes).map_err(|e| {
            format!(
                "a line of {} bytes is not UTF-8 (at byte {})",
                e.as_bytes().len(),
                e.utf8_error().valid_up_to()
            )
        }),
        Line::TooLarge { bytes, .. } => Err(format!(
            "a line of {bytes} bytes is longer than the {DEFAULT_LINE_LIMIT} bytes reel reads"
        )),
    }
}

/// JSON-RPC's answer to a line that is no message.
fn parse_error(why: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("Parse error: {why}")},
    })
    .to_string()
}

/// Writes each line to stdout as it comes, until every sender has gone.
async fn write_lines(mut lines: mpsc::Receiver<String>) {
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.next().await {
        let written = async {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        };
        if let Err(error) = written.await {
            tracing::warn!("reel acp: cannot write to stdout: {error}");
            return;
        }
    }
}
