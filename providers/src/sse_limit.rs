//! A bound on one server-sent event: the SSE parser keeps an event's bytes until the blank line
//! that ends it, so a server that streams an endless line (or an endless event) would grow that
//! buffer without limit. [`bounded`] counts the bytes since the last event boundary and fails
//! the stream at [`MAX_EVENT_BYTES`] instead.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// The largest server-sent event reel reads: 16 MiB (a model's delta is a few bytes; a whole
/// tool call's arguments in one event stay far below this).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why the bounded body stream failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("{}", crate::http_stream::error_chain(.0))]
    Transport(#[from] reqwest::Error),
    #[error("the server sent an event of more than {limit} bytes without ending it", limit = MAX_EVENT_BYTES)]
    EventTooLarge,
}

/// `body` failing once an event (bytes up to a blank line) passes `limit` bytes.
pub fn bounded(
    body: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    limit: usize,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    let mut scan = EventScan::default();
    let mut failed = false;
    body.map(move |chunk| {
        let chunk = chunk?;
        if scan.feed(&chunk) > limit {
            return Err(BodyError::EventTooLarge);
        }
        Ok(chunk)
    })
    .take_while(move |item| {
        // Nothing after the first error: the parser must not resume mid-event.
        let go_on = !failed;
        failed |= item.is_err();
        std::future::ready(go_on)
    })
}

/// Where the scan is in the event stream.
#[derive(Default)]
struct EventScan {
    /// Bytes of the current event so far.
    event: usize,
    /// Whether the current line has any byte other than `\r`.
    line_has_bytes: bool,
}

impl EventScan {
    /// Scans `chunk`; returns the largest event size seen in it.
    fn feed(&mut self, chunk: &[u8]) -> usize {
        let mut largest = self.event;
        for &byte in chunk {
            match byte {
                b'\n' if !self.line_has_bytes => self.event = 0,
                b'\n' => self.line_has_bytes = false,
                b'\r' => {}
                _ => {
                    self.event += 1;
                    self.line_has_bytes = true;
                    largest = largest.max(self.event);
                }
            }
        }
        largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_ends_at_a_blank_line() {
        let mut scan = EventScan::default();
        assert_eq!(scan.feed(b"data: abc\n"), 9);
        assert_eq!(scan.feed(b"data: d\r\n\r\n"), 16);
        assert_eq!(scan.feed(b"data: e\n\n"), 7);
        assert_eq!(scan.feed(b"xxxx"), 4);
        assert_eq!(scan.feed(b"yy"), 6);
    }
}
