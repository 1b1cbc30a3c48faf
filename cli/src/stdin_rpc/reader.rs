//! Reads newline-terminated lines with a length limit, never holding more than the limit.
//!
//! A line longer than the limit is skipped as it streams in: its bytes are counted and dropped,
//! so a client that sends a gigabyte without a newline costs reel a buffer, not a gigabyte.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The default longest request line: 16 MiB.
pub const DEFAULT_LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Lines longer than this get a buffer of the whole limit at once.
const GROW_AT_ONCE_ABOVE: usize = 64 * 1024;

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The line's bytes, without the newline (and without a `\r` before it).
    Complete(Vec<u8>),
    /// A line longer than the limit, skipped; `bytes` is its length.
    TooLarge { bytes: u64 },
}

/// Splits an async byte stream into bounded lines.
pub struct LineReader<R> {
    inner: R,
    limit: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        Self { inner, limit }
    }

    /// The next line; `None` at the end of the input. A last line without a newline counts.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut skipped: Option<u64> = None;
        loop {
            let buffer = self.inner.fill_buf().await?;
            if buffer.is_empty() {
                return Ok(match skipped {
                    Some(bytes) => Some(Line::TooLarge { bytes }),
                    None if line.is_empty() => None,
                    None => Some(Line::Complete(line)),
                });
            }
            let (piece, consumed, complete) = match buffer.iter().position(|&b| b == b'\n') {
                Some(at) => (&buffer[..at], at + 1, true),
                None => (buffer, buffer.len(), false),
            };
            match &mut skipped {
                Some(bytes) => *bytes += piece.len() as u64,
                None if line.len() + piece.len() > self.limit => {
                    skipped = Some((line.len() + piece.len()) as u64);
                    line = Vec::new();
                }
                None => {
                    // Grow once to the limit instead of doubling: pages never written cost no
                    // memory, while every doubling would leave a freed copy behind.
                    if line.len() + piece.len() > GROW_AT_ONCE_ABOVE && line.capacity() < self.limit
                    {
                        line.reserve_exact(self.limit - line.len());
                    }
                    line.extend_from_slice(piece);
                }
            }
            self.inner.consume(consumed);
            if complete {
                return Ok(Some(match skipped {
                    Some(bytes) => Line::TooLarge { bytes },
                    None => {
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        Line::Complete(line)
                    }
                }));
            }
        }
    }
}
