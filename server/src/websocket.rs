//! `GET /v1/sessions/{id}/ws`: a WebSocket that is a stdin-RPC client's pipes. Each text
//! message in is one request line, exactly as on a `--stdin-rpc` process's stdin; each text
//! message out is one frame: hello, the session's timeline (or, with `?after=N`, the frames
//! after event N), then every frame as it happens, as on the event stream.
//!
//! A line that cannot be taken is answered on this socket alone (its error, and a `done`
//! `failed` under its request id when it names one): other clients of the session never see
//! another's typing mistakes.
//!
//! The server pings the client every [`HEARTBEAT`] (browsers and WebSocket libraries answer by
//! themselves); a client that has sent nothing, not even a pong, for [`SILENCE`] is gone, and
//! its socket is closed.

use std::{sync::Arc, time::Duration};

use crate::{
    frames::Frame,
    host::Hosted,
    subscription::{Subscription, next_frame},
};
use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use reel_engine::{DoneStatus, ErrorCode, Incoming, ParsedLine, parse_line};
use reel_proto::rpc::{DoneFrame, ErrorFrame, rpc_line::Frame as LineFrame};

/// How often the server pings the client.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// How long a client may stay silent (no message, no pong).
const SILENCE: Duration = Duration::from_secs(45);

/// Carries requests from `socket` to the session and the session's `frames` back, until
/// either side ends.
pub async fn talk(socket: WebSocket, hosted: Arc<Hosted>, frames: Subscription, id: String) {
    let (mut outgoing, mut incoming) = socket.split();
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let mut heard = tokio::time::Instant::now();
    // One future waits for the next frame while requests and pings come and go (see
    // `next_frame`): boxed once, set anew after each frame.
    let mut waiting = Box::pin(next_frame(frames));
    loop {
        tokio::select! {
            _ = heartbeat.tick() => {
                if heard.elapsed() > SILENCE {
                    tracing::debug!("a WebSocket of {id} was silent for {SILENCE:?}: closed");
                    break;
                }
                if outgoing.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
            }
            (frames, frame) = waiting.as_mut() => {
                let Some(frame) = frame else { break };
                waiting.set(next_frame(frames));
                if outgoing.send(Message::Text(frame.json.clone())).await.is_err() {
                    return;
                }
            }
            message = incoming.next() => {
                heard = tokio::time::Instant::now();
                let line = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        let refused = refusal(&id, None, ErrorCode::InvalidRequestJson,
                            "a request is a text message holding one JSON request line".into());
                        if send_all(&mut outgoing, refused).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                };
                let rejected = match parse_line(line.as_bytes()) {
                    ParsedLine::Blank => continue,
                    ParsedLine::Request(request) => {
                        // The session is unloading: the socket closes, and the client comes back.
                        if hosted.send(Incoming::Request(request)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    ParsedLine::Rejected(rejected) => rejected,
                };
                if let Incoming::Rejected { request_id, code, message } = rejected {
                    let refused = refusal(&id, request_id, code, message);
                    if send_all(&mut outgoing, refused).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
    // The session unloaded: say so as the protocol closes a connection.
    let _ = outgoing.send(Message::Close(None)).await;
}

async fn send_all<S>(outgoing: &mut S, lines: Vec<String>) -> Result<(), S::Error>
where
    S: futures::Sink<Message> + Unpin,
{
    for line in lines {
        outgoing.send(Message::Text(line.into())).await?;
    }
    Ok(())
}

/// The frames answering a line that could not be taken: its error, and `done` `failed` when
/// the line named a request id.
fn refusal(
    session_id: &str,
    request_id: Option<String>,
    code: ErrorCode,
    message: String,
) -> Vec<String> {
    let rid = request_id.as_deref().unwrap_or_default();
    let error = ErrorFrame {
        code: code.into(),
        message,
        ..Default::default()
    };
    let mut frames = vec![LineFrame::Error(error)];
    if request_id.is_some() {
        frames.push(LineFrame::Done(DoneFrame {
            status: DoneStatus::Failed.into(),
        }));
    }
    frames
        .into_iter()
        .filter_map(|frame| Frame::of_line(session_id, rid, frame))
        .map(|frame| frame.json.to_string())
        .collect()
}
