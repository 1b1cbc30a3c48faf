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

use crate::{frame_queue::FrameReceiver, frames::Frame};

/// How often an idle event stream gets a comment, so that proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Frames written per chunk of the body at most, when many are queued (a burst goes out in
/// few writes; a quiet stream arms its heartbeat timer once per wait, not per frame).
const FRAMES_PER_CHUNK: usize = 64;

/// The response streaming `frames` as Server-Sent Events.
pub fn response(frames: FrameReceiver) -> Response {
    let chunks = futures::stream::unfold(frames, |mut frames| async move {
        let first = match frames.try_recv() {
            Some(frame) => frame,
            None => match tokio::time::timeout(HEARTBEAT, frames.recv()).await {
                Err(_quiet) => return Some((vec![Bytes::from_static(b":\n\n")], frames)),
                Ok(None) => return None,
                Ok(Some(frame)) => frame,
            },
        };
        let mut body = Chunks::default();
        body.push(&first);
        for _ in 1..FRAMES_PER_CHUNK {
            match frames.try_recv() {
                Some(frame) => body.push(&frame),
                None => break,
            }
        }
        Some((body.finish(), frames))
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

/// The chunks of the body for some frames, each frame an SSE event: its `id:`/`data:` head,
/// its JSON, the blank line that ends it. Small frames are copied into one buffer; a large one
/// goes out as its shared bytes, between the heads and tails around it.
#[derive(Default)]
struct Chunks {
    done: Vec<Bytes>,
    buffer: BytesMut,
}

impl Chunks {
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
