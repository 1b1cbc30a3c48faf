//! A subscriber's frames as a Server-Sent Events body, a large frame written without a copy:
//! its JSON is the shared bytes every subscriber sends (see [`crate::frames::Frame`]), put
//! between its `id:`/`data:` head and the blank line that ends an event. (axum's `Sse` copies
//! each event's data into a buffer of its own: for a snapshot of megabytes, a copy per
//! subscriber.) Small frames, most of them, are copied into one buffer per burst, which costs
//! less than a chunk each.

use std::{convert::Infallible, fmt::Write, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use bytes::BytesMut;
use futures::StreamExt;

use crate::{
    frames::Frame,
    subscription::{Subscription, next_frame},
};

/// How often an idle event stream gets a comment, so that proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Frames written per chunk of the body at most, when many are queued (a burst goes out in
/// few writes; a quiet stream arms its heartbeat timer once per wait, not per frame).
const FRAMES_PER_CHUNK: usize = 64;

/// The response streaming `frames` as Server-Sent Events.
pub fn response(frames: Subscription) -> Response {
    // One future waits for the next frame across heartbeats (see `next_frame`): boxed once,
    // set anew after each frame.
    let waiting = Box::pin(next_frame(frames));
    let chunks = futures::stream::unfold(waiting, |mut waiting| async move {
        let (mut frames, first) = match tokio::time::timeout(HEARTBEAT, waiting.as_mut()).await {
            Err(_quiet) => return Some((vec![Bytes::from_static(b":\n\n")], waiting)),
            Ok((_, None)) => return None,
            Ok((frames, Some(frame))) => (frames, frame),
        };
        let mut body = Chunks::with_room_for(&first, frames.queued());
        body.push(&first);
        for _ in 1..FRAMES_PER_CHUNK {
            match frames.try_recv() {
                Some(frame) => body.push(&frame),
                None => break,
            }
        }
        waiting.set(next_frame(frames));
        Some((body.finish(), waiting))
    })
    .flat_map(futures::stream::iter)
    .map(Ok::<_, Infallible>);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(chunks),
    )
        .into_response()
}

/// Frames a copy costs less than a chunk of their own: smaller ones are copied into one buffer.
const COPIED_UP_TO: usize = 16 * 1024;

/// The most a chunk's buffer reserves before it is written into.
const RESERVED_UP_TO: usize = 64 * 1024;

/// An event's bytes besides its JSON, at most: `id: ` with a position, `\ndata: `, `\n\n`.
const EVENT_HEAD_AND_TAIL: usize = 48;

/// The chunks of the body for some frames, each frame an SSE event: its `id:`/`data:` head,
/// its JSON, the blank line that ends it. Small frames are copied into one buffer; a large one
/// goes out as its shared bytes, between the heads and tails around it.
struct Chunks {
    done: Vec<Bytes>,
    buffer: BytesMut,
}

impl Chunks {
    /// Chunks for `first` and up to the `queued` frames after it, whose buffer holds that many
    /// frames of `first`'s size from the start (up to [`RESERVED_UP_TO`]): a burst's buffer is
    /// not regrown, each time copying what it holds, as it fills.
    fn with_room_for(first: &Frame, queued: usize) -> Self {
        let frames = queued.min(FRAMES_PER_CHUNK - 1) + 1;
        let each = first.json.len().min(COPIED_UP_TO) + EVENT_HEAD_AND_TAIL;
        Self {
            done: Vec::new(),
            buffer: BytesMut::with_capacity((frames * each).min(RESERVED_UP_TO)),
        }
    }

    fn push(&mut self, frame: &Arc<Frame>) {
        match frame.position {
            // Written in place: no string per frame on the streaming path.
            Some(position) => {
                let _ = write!(self.buffer, "id: {position}\ndata: ");
            }
            None => self.buffer.extend_from_slice(b"data: "),
        }
        // A frame is one JSON line: no newline inside, so one `data:` field holds it.
        if frame.json.len() <= COPIED_UP_TO {
            self.buffer.extend_from_slice(frame.json.as_bytes());
        } else {
            self.done.push(self.buffer.split().freeze());
            // The frame itself owns the bytes while the connection writes them, so that the
            // session's shared snapshot stays shared (see `SharedSnapshot`) until the last
            // subscriber has written it.
            self.done
                .push(Bytes::from_owner(FrameBytes(Arc::clone(frame))));
        }
        self.buffer.extend_from_slice(b"\n\n");
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.done.push(self.buffer.freeze());
        self.done
    }
}

/// A frame's JSON as the bytes of a body chunk.
struct FrameBytes(Arc<Frame>);

impl AsRef<[u8]> for FrameBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.json.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::Position;

    fn frame(ordinal: u64, bytes: usize) -> Arc<Frame> {
        Arc::new(Frame {
            position: Some(Position::through(ordinal)),
            json: format!("{{\"n\":\"{}\"}}", "x".repeat(bytes - 8)).into(),
        })
    }

    fn text(chunks: &[Bytes]) -> String {
        chunks
            .iter()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect()
    }

    #[test]
    fn a_burst_is_written_into_a_buffer_sized_for_it_at_the_start() {
        let burst: Vec<_> = (1..=FRAMES_PER_CHUNK as u64)
            .map(|n| frame(n, 330))
            .collect();
        let mut chunks = Chunks::with_room_for(&burst[0], burst.len() - 1);
        let reserved = chunks.buffer.capacity();
        for frame in &burst {
            chunks.push(frame);
        }
        assert_eq!(chunks.buffer.capacity(), reserved, "the buffer was regrown");
        let expected: String = burst
            .iter()
            .map(|f| format!("id: {}\ndata: {}\n\n", f.position.unwrap(), f.json))
            .collect();
        let written = chunks.finish();
        assert_eq!(written.len(), 1);
        assert_eq!(text(&written), expected);
    }

    #[test]
    fn a_large_frame_goes_out_as_its_own_bytes_between_the_small_ones() {
        let small = frame(1, 100);
        let large = frame(2, COPIED_UP_TO + 1);
        let mut chunks = Chunks::with_room_for(&large, 1_000_000);
        assert!(chunks.buffer.capacity() <= RESERVED_UP_TO);
        chunks.push(&small);
        chunks.push(&large);
        chunks.push(&small);
        let written = chunks.finish();
        assert_eq!(written.len(), 3);
        assert_eq!(written[1].as_ptr(), large.json.as_ptr(), "not copied");
        let expected = format!(
            "id: 1\ndata: {}\n\nid: 2\ndata: {}\n\nid: 1\ndata: {}\n\n",
            small.json, large.json, small.json
        );
        assert_eq!(text(&written), expected);
    }
}
