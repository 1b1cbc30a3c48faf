//! Newline-terminated lines with a length limit, never holding more than the limit: a line
//! longer than it is skipped as it streams in (its length counted, its first bytes kept so the
//! caller can say what it was). A client or a file that sends endless bytes without a newline
//! costs reel a buffer, not all its memory.
//!
//! [`LineAssembler`] does the work on whatever bytes a reader has buffered; [`BoundedLines`]
//! drives it over a blocking reader (capture files), the stdin-RPC reader over an async one.

use std::io::{self, BufRead};

/// Bytes of an over-long line kept to tell what it was.
const PREFIX: usize = 1024;
/// Lines longer than this get a buffer of the whole limit at once: pages never written cost
/// no memory, while every doubling would leave a freed copy behind.
const GROW_AT_ONCE_ABOVE: usize = 64 * 1024;

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The line without its newline (nor a `\r` before it); `complete` is false for a last
    /// line the input ended in the middle of (a capture of a killed process).
    Text { bytes: Vec<u8>, complete: bool },
    /// A line longer than the limit, skipped: its length and its first bytes.
    TooLarge { bytes: u64, prefix: Vec<u8> },
}

/// Builds bounded lines from the pieces of input a reader hands it.
pub struct LineAssembler {
    limit: usize,
    line: Vec<u8>,
    /// The length and first bytes of the over-long line being skipped.
    skipped: Option<(u64, Vec<u8>)>,
}

impl LineAssembler {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            line: Vec::new(),
            skipped: None,
        }
    }

    /// Takes bytes of `buffer` up to and including its first newline. Returns how many it
    /// took, and the line when one ended.
    pub fn push(&mut self, buffer: &[u8]) -> (usize, Option<Line>) {
        let (piece, consumed, ends) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], at + 1, true),
            None => (buffer, buffer.len(), false),
        };
        match &mut self.skipped {
            Some((bytes, prefix)) => {
                *bytes += piece.len() as u64;
                keep_prefix(prefix, piece);
            }
            None if self.line.len() + piece.len() > self.limit => {
                let bytes = (self.line.len() + piece.len()) as u64;
                let mut prefix = std::mem::take(&mut self.line);
                prefix.truncate(PREFIX);
                keep_prefix(&mut prefix, piece);
                self.skipped = Some((bytes, prefix));
            }
            None => {
                let line = &mut self.line;
                if line.len() + piece.len() > GROW_AT_ONCE_ABOVE && line.capacity() < self.limit {
                    line.reserve_exact(self.limit - line.len());
                }
                line.extend_from_slice(piece);
            }
        }
        (consumed, ends.then(|| self.take(true)))
    }

    /// The input ended: the unfinished last line, if there is one.
    pub fn finish(&mut self) -> Option<Line> {
        if self.skipped.is_none() && self.line.is_empty() {
            return None;
        }
        Some(self.take(false))
    }

    fn take(&mut self, complete: bool) -> Line {
        match self.skipped.take() {
            Some((bytes, prefix)) => Line::TooLarge { bytes, prefix },
            None => {
                let mut bytes = std::mem::take(&mut self.line);
                if complete && bytes.last() == Some(&b'\r') {
                    bytes.pop();
                }
                Line::Text { bytes, complete }
            }
        }
    }
}

fn keep_prefix(prefix: &mut Vec<u8>, piece: &[u8]) {
    let room = PREFIX.saturating_sub(prefix.len());
    prefix.extend_from_slice(&piece[..piece.len().min(room)]);
}

/// Bounded lines of a blocking reader.
pub struct BoundedLines<R> {
    inner: R,
    lines: LineAssembler,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            lines: LineAssembler::new(limit),
        }
    }

    /// The next line; `None` at the end.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        loop {
            let buffer = self.inner.fill_buf()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize, chunk: usize) -> Vec<Line> {
        let mut reader = BoundedLines::new(io::BufReader::with_capacity(chunk, input), limit);
        std::iter::from_fn(|| reader.next_line().unwrap()).collect()
    }

    #[test]
    fn lines_come_whole_or_are_skipped_with_their_start() {
        for chunk in [1, 3, 64] {
            let read = lines(b"ab\ncdefgh\r\nxyz", 4, chunk);
            assert_eq!(
                read,
                vec![
                    Line::Text {
                        bytes: b"ab".to_vec(),
                        complete: true
                    },
                    Line::TooLarge {
                        bytes: 7,
                        prefix: b"cdefgh\r".to_vec()
                    },
                    Line::Text {
                        bytes: b"xyz".to_vec(),
                        complete: false
                    },
                ],
                "chunk {chunk}"
            );
        }
    }
}
