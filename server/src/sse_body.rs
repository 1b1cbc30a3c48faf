//! A subscriber's frames as a Server-Sent Events body, written without copying them: each
//! frame's JSON is the shared bytes every subscriber sends (see [`crate::frames::Frame`]), put
//! between its `id:`/`data:` head and the blank line that ends an event. (axum's `Sse` copies
//! each event's data into a buffer of its own: for a snapshot of megabytes, a copy per
//! subscriber.)

use std::{convert::Infallible, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use futures::StreamExt;

use crate::frame_queue::FrameReceiver;

/// How often an idle event stream gets a comment, so that proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The response streaming `frames` as Server-Sent Events.
pub fn response(frames: FrameReceiver) -> Response {
    let chunks = futures::stream::unfold(frames, |mut frames| async move {
        let chunks = match tokio::time::timeout(HEARTBEAT, frames.recv()).await {
            Err(_quiet) => vec![Bytes::from_static(b":\n\n")],
            Ok(None) => return None,
            Ok(Some(frame)) => {
                let head = match frame.position {
                    Some(position) => format!("id: {}\ndata: ", position.id()),
                    None => "data: ".to_owned(),
                };
                // A frame is one JSON line: no newline inside, so one `data:` field holds it.
                let json = Bytes::from(frame.json.clone());
                vec![Bytes::from(head), json, Bytes::from_static(b"\n\n")]
            }
        };
        Some((chunks, frames))
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
