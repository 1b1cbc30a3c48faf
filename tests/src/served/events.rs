//! A session's event stream as a test reads it: Server-Sent Events parsed with
//! eventsource-stream (the parser reel's providers use), one frame each.

use std::time::Duration;

use futures::StreamExt;

use crate::FrameLine;

/// One event of a stream: its SSE id and its frame.
#[derive(Debug, Clone)]
pub struct StreamedFrame {
    pub id: String,
    pub frame: FrameLine,
}

type EventStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<eventsource_stream::Event, String>> + Send>,
>;

/// A session's event stream.
pub struct Events {
    inner: EventStream,
}

impl Events {
    pub(super) fn of<B, E>(body: B) -> Self
    where
        B: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let events =
            eventsource_stream::EventStream::new(body).map(|e| e.map_err(|e| e.to_string()));
        Self {
            inner: Box::pin(events),
        }
    }

    /// The next frame; `None` when the stream ended (or stayed silent for a minute).
    pub async fn next(&mut self) -> Option<StreamedFrame> {
        let event = tokio::time::timeout(Duration::from_secs(60), self.inner.next())
            .await
            .ok()??
            .expect("a well-formed SSE event");
        let frame = crate::parse_frames(format!("{}\n", event.data).as_bytes())
            .pop()
            .expect("one frame per event");
        Some(StreamedFrame {
            id: event.id,
            frame,
        })
    }

    /// Frames up to and with the `done` of request `rid`.
    pub async fn until_done(&mut self, rid: &str) -> Vec<StreamedFrame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            let done = frame.frame.line.request_id == rid && frame.frame.done_status().is_some();
            frames.push(frame);
            if done {
                return frames;
            }
        }
        let shown: Vec<&str> = frames
            .iter()
            .rev()
            .take(3)
            .map(|f| f.frame.text.as_str())
            .collect();
        panic!(
            "the stream ended before {rid}'s done, after {} frames; the last: {shown:?}",
            frames.len()
        );
    }

    /// Frames until one with SSE id `id`, with it.
    pub async fn until_id(&mut self, id: &str) -> Vec<StreamedFrame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            let last = frame.id == id;
            frames.push(frame);
            if last {
                return frames;
            }
        }
        panic!("the stream ended before id {id}: {frames:?}");
    }
}
