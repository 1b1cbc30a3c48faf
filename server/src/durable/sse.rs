//! `live=sse`: a session's stream as Server-Sent Events, the protocol's way (section 5.8).
//! Each chunk of committed events is an `event: data` whose data is the chunk's JSON array (one
//! line: frames hold no raw newline), then an `event: control` with `streamNextOffset`,
//! `streamCursor` and `upToDate`. A reader at the tail gets one control event at once, then
//! waits for commits, with a comment every [`HEARTBEAT`] so that proxies keep it open. The
//! server ends the response after [`LIFETIME`], as the protocol asks, so that caches can
//! collapse readers onto new requests; the client goes on from its last `streamNextOffset`.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderName, HeaderValue, header},
    response::{IntoResponse, Response},
};
use bytes::{BufMut, BytesMut};
use serde::Serialize;
use tokio::time::Instant;

use super::{
    chunk::{Chunk, ChunkReader},
    cursor, guard_headers, live,
    offset::Offset,
    read_chunk,
};
use crate::host::Host;

/// How often a quiet stream gets a comment.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// How long one response lasts (the protocol's "roughly every 60 seconds").
const LIFETIME: Duration = Duration::from_secs(60);

/// The response streaming session `id` from `reader`'s place; `cursor` is the client's.
pub fn response(
    host: Arc<Host>,
    id: String,
    reader: ChunkReader,
    cursor: Option<String>,
) -> Response {
    let reading = Reading {
        _counted: host.metrics.stream_readers.reading(),
        host,
        id,
        reader,
        cursor,
        ends: Instant::now() + LIFETIME,
        said_anything: false,
    };
    let events = futures::stream::unfold(reading, |mut reading| async move {
        let bytes = reading.next_events().await?;
        Some((Ok::<_, std::convert::Infallible>(bytes), reading))
    });
    let mut response = Body::from_stream(events).into_response();
    let headers = response.headers_mut();
    // SSE carries its offsets in control events, not in the response's headers.
    guard_headers(headers);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    // A proxy in front (nginx) passes each event on as it comes instead of buffering them.
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// One SSE reader.
struct Reading {
    /// Counted while its response lasts.
    _counted: crate::metrics::ReaderGuard,
    host: Arc<Host>,
    id: String,
    reader: ChunkReader,
    /// The last cursor given (the client's, then each control event's).
    cursor: Option<String>,
    ends: Instant,
    /// Whether a control event went out yet: a reader at the tail gets one at once.
    said_anything: bool,
}

/// A control event's data.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Control {
    stream_next_offset: String,
    stream_cursor: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    up_to_date: bool,
}

impl Reading {
    /// The next bytes of the body: a chunk's events, a heartbeat, or `None` at the end of the
    /// response (its lifetime, the client gone, or the store failing).
    async fn next_events(&mut self) -> Option<Bytes> {
        loop {
            let now = Instant::now();
            if now >= self.ends {
                return None;
            }
            let chunk = match read_chunk(&self.host, &mut self.reader).await {
                Ok(chunk) => chunk,
                Err(error) => {
                    tracing::warn!("a stream reader of {} stops: {}", self.id, error.message);
                    return None;
                }
            };
            if chunk.advanced() || !self.said_anything {
                self.said_anything = true;
                return Some(self.events_of(&chunk));
            }
            let wake = self.ends.min(now + HEARTBEAT);
            match live::wait_past(&self.host, &self.id, self.reader.at(), wake).await {
                Ok(true) => {}
                Ok(false) if Instant::now() >= self.ends => return None,
                Ok(false) => return Some(Bytes::from_static(b":\n\n")),
                Err(error) => {
                    tracing::debug!("a stream reader of {} stops: {}", self.id, error.message);
                    return None;
                }
            }
        }
    }

    /// `chunk` as its `data` event (when it has frames) and its `control` event.
    fn events_of(&mut self, chunk: &Chunk) -> Bytes {
        let cursor = cursor::next(self.cursor.as_deref());
        let control = Control {
            stream_next_offset: Offset(chunk.through).to_string(),
            stream_cursor: cursor.clone(),
            up_to_date: chunk.up_to_date,
        };
        self.cursor = Some(cursor);
        let mut out = BytesMut::with_capacity(chunk.body.len() + 160);
        if chunk.frames > 0 {
            out.put_slice(b"event: data\ndata: ");
            out.put_slice(&chunk.body);
            out.put_slice(b"\n\n");
        }
        out.put_slice(b"event: control\ndata: ");
        // A struct of strings and a bool always encodes.
        if let Ok(json) = serde_json::to_vec(&control) {
            out.put_slice(&json);
        }
        out.put_slice(b"\n\n");
        out.freeze()
    }
}
