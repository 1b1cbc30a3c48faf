//! `--stdin-rpc`: one session per process, one request per stdin line.
//!
//! A reader task turns stdin into [`Incoming`] requests (bounded lines, parsed, bad lines
//! classified); the engine's [`reel_engine::serve`] answers them through the session's writer.

mod reader;
#[cfg(test)]
mod tests;

use tokio::{io::AsyncRead, sync::mpsc};

pub use reader::{DEFAULT_LINE_LIMIT, LineReader};

use crate::bounded_lines::Line;
use reel_engine::{Incoming, ParsedLine, parse_line, too_large};

/// Requests read ahead of the session; reading stops while the queue is full.
const REQUEST_QUEUE: usize = 64;

/// Starts reading requests from `input`; the receiver ends when the input does.
pub fn read_requests<R: AsyncRead + Unpin + Send + 'static>(
    input: R,
    limit: usize,
) -> mpsc::Receiver<Incoming> {
    let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
    tokio::spawn(async move {
        let mut lines =
            LineReader::new(tokio::io::BufReader::with_capacity(64 * 1024, input), limit);
        loop {
            let incoming = match lines.next_line().await {
                Ok(None) => break,
                Ok(Some(Line::TooLarge { bytes, prefix })) => too_large(bytes, limit, &prefix),
                Ok(Some(Line::Text { bytes: line, .. })) => match parse_line(&line) {
                    ParsedLine::Blank => continue,
                    ParsedLine::Request(request) => Incoming::Request(request),
                    ParsedLine::Rejected(rejected) => rejected,
                },
                Err(error) => Incoming::ReadFailed(format!("cannot read stdin: {error}")),
            };
            let failed = matches!(incoming, Incoming::ReadFailed(_));
            if tx.send(incoming).await.is_err() || failed {
                break;
            }
        }
    });
    rx
}
