//! A WebSocket client of a served session, on tokio-tungstenite: request lines out, frames in.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::FrameLine;

/// A WebSocket client of a served session (tokio-tungstenite).
pub struct Socket {
    inner: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl Socket {
    pub(super) fn new(
        inner: tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
    ) -> Self {
        Self { inner }
    }

    pub async fn send_text(&mut self, line: &str) {
        self.inner
            .send(Message::text(line))
            .await
            .expect("the message goes out");
    }

    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.inner
            .send(Message::binary(bytes))
            .await
            .expect("the message goes out");
    }

    /// The next frame (one per text message).
    pub async fn next_frame(&mut self) -> FrameLine {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(60), self.inner.next())
                .await
                .expect("a frame within a minute")
                .expect("the socket is open")
                .expect("a well-formed message");
            match message {
                Message::Text(text) => {
                    return crate::parse_frames(format!("{}\n", text.as_str()).as_bytes())
                        .pop()
                        .expect("one frame per message");
                }
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("not a frame: {other:?}"),
            }
        }
    }

    /// Frames up to and with request `rid`'s done.
    pub async fn until_done(&mut self, rid: &str) -> Vec<FrameLine> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next_frame().await;
            let done = frame.line.request_id == rid && frame.done_status().is_some();
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    pub async fn close(mut self) {
        self.inner.close(None).await.expect("the socket closes");
    }
}
