//! Scale-out for WebSockets: a session's WebSocket opened on a node that does not write the
//! session is piped to the node that does (see [`crate::forward`]), message for message, so
//! its requests reach the writer and every frame of theirs, `done` included, comes back. The
//! writer is reached at its `--public-url` (`http://` becomes `ws://`, `https://` `wss://`,
//! its certificate checked against the system's roots, or `SSL_CERT_FILE`'s).

use axum::{
    extract::ws::{Message, WebSocket},
    http::{HeaderValue, header},
};
use futures::{SinkExt, StreamExt};
use std::sync::{Arc, OnceLock};
use tokio::net::TcpStream;

use tokio_tungstenite::{
    Connector, MaybeTlsStream, WebSocketStream,
    tungstenite::{self, client::IntoClientRequest},
};

use crate::{
    error::ApiError,
    forward::{self, FORWARDED, Forwarder},
};

/// The writer's end of a piped WebSocket.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens session `id`'s WebSocket on the node at `node` (after event `after` when given), with
/// the cluster's token.
pub async fn connect(
    node: &str,
    id: &str,
    after: Option<&str>,
    forwarder: &Forwarder,
) -> Result<Upstream, ApiError> {
    let failed = |why: String| forward::unreachable(node, &why);
    let base = node.trim_end_matches('/');
    let base = if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else {
        return Err(failed("its URL is neither http:// nor https://".into()));
    };
    let mut url = format!("{base}/v1/sessions/{id}/ws");
    if let Some(after) = after {
        url.push_str(&format!("?after={after}"));
    }
    let mut request = url
        .into_client_request()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(authorization) = forwarder.authorization() {
        let value = HeaderValue::from_str(&authorization)
            .map_err(|_| failed("the cluster token is no header value".into()))?;
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    request
        .headers_mut()
        .insert(FORWARDED, HeaderValue::from_static("reel serve"));
    let tls = tls_config().map_err(|e| failed(reel_engine::error_chain(&e)))?;
    let (upstream, _) =
        tokio_tungstenite::connect_async_tls_with_config(request, None, false, Some(tls))
            .await
            .map_err(|e| failed(e.to_string()))?;
    Ok(upstream)
}

/// Why TLS to a `wss://` writer cannot be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsSetupError {
    #[error("no trusted root certificates were found for wss:// ({0}); set SSL_CERT_FILE")]
    NoRoots(String),
    #[error("cannot set up TLS")]
    Rustls(#[from] rustls::Error),
}

/// How a `wss://` writer is reached: TLS with the system's trusted roots (`SSL_CERT_FILE` or
/// `SSL_CERT_DIR` when set), made once.
fn tls_config() -> Result<Connector, TlsSetupError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, TlsSetupError>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err(TlsSetupError::NoRoots(format!("{:?}", found.errors)));
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    });
    config.clone().map(Connector::Rustls)
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
