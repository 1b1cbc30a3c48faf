//! Scale-out for WebSockets: a session's WebSocket opened on a node that does not write the
//! session is piped to the node that does (see [`crate::forward`]), message for message, so
//! its requests reach the writer and every frame of theirs, `done` included, comes back. The
//! writer is reached at its `--public-url` (`http://` becomes `ws://`, `https://` `wss://`,
//! which this build does not speak: such a node is refused with 502).

use axum::{
    extract::ws::{Message, WebSocket},
    http::{HeaderMap, HeaderValue, header},
};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{self, client::IntoClientRequest},
};

use crate::{
    error::ApiError,
    forward::{self, FORWARDED},
};

/// The writer's end of a piped WebSocket.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens session `id`'s WebSocket on the node at `node` (after event `after` when given), with
/// the client's authorization.
pub async fn connect(
    node: &str,
    id: &str,
    after: Option<&str>,
    headers: &HeaderMap,
) -> Result<Upstream, ApiError> {
    let failed = |why: String| forward::unreachable(node, &why);
    let base = node.trim_end_matches('/');
    let base = match base.strip_prefix("http://") {
        Some(rest) => format!("ws://{rest}"),
        None => return Err(failed("its URL is not http://".into())),
    };
    let mut url = format!("{base}/v1/sessions/{id}/ws");
    if let Some(after) = after {
        url.push_str(&format!("?after={after}"));
    }
    let mut request = url
        .into_client_request()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(authorization) = headers.get(header::AUTHORIZATION) {
        request
            .headers_mut()
            .insert(header::AUTHORIZATION, authorization.clone());
    }
    request
        .headers_mut()
        .insert(FORWARDED, HeaderValue::from_static("reel serve"));
    let (upstream, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(upstream)
}

/// Carries messages between the client's socket and the writer's until either ends.
pub async fn pipe(client: WebSocket, upstream: Upstream) {
    let (mut to_client, mut from_client) = client.split();
    let (mut to_writer, mut from_writer) = upstream.split();
    loop {
        tokio::select! {
            message = from_client.next() => {
                let message = match message {
                    Some(Ok(Message::Text(text))) => tungstenite::Message::text(text.as_str()),
                    Some(Ok(Message::Binary(bytes))) => tungstenite::Message::binary(bytes),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                };
                if to_writer.send(message).await.is_err() {
                    break;
                }
            }
            message = from_writer.next() => {
                let message = match message {
                    Some(Ok(tungstenite::Message::Text(text))) => Message::Text(text.as_str().into()),
                    Some(Ok(tungstenite::Message::Binary(bytes))) => Message::Binary(bytes),
                    Some(Ok(tungstenite::Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                if to_client.send(message).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_client.send(Message::Close(None)).await;
    let _ = to_writer.send(tungstenite::Message::Close(None)).await;
}
