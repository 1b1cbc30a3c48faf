//! Reads stdin's request lines with a length limit, never holding more than the limit: a line
//! longer than it is skipped as it streams in ([`LineAssembler`]), so a client that sends a
//! gigabyte without a newline costs reel a buffer, not a gigabyte.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::bounded_lines::{Line, LineAssembler};

/// The default longest request line: 16 MiB.
pub const DEFAULT_LINE_LIMIT: usize = 16 * 1024 * 1024;

/// Splits an async byte stream into bounded lines.
pub struct LineReader<R> {
    inner: R,
    lines: LineAssembler,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            lines: LineAssembler::new(limit),
        }
    }

    /// The next line; `None` at the end of the input. A last line without a newline counts.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let buffer = self.inner.fill_buf().await?;
            if buffer.is_empty() {
                return Ok(self.lines.finish());
            }
            let (consumed, line) = self.lines.push(buffer);
            self.inner.consume(consumed);
            if line.is_some() {
                return Ok(line);
            }
        }
    }
}
