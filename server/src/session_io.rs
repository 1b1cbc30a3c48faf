//! A session's traffic: `POST /v1/sessions/{id}/requests` takes one request as stdin RPC
//! does; `GET /v1/sessions/{id}/events` streams its frames as Server-Sent Events (see
//! [`crate::subscription`]); `GET /v1/sessions/{id}/ws` does both over one WebSocket (see
//! [`crate::websocket`]).

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::{
        Path, State, WebSocketUpgrade, rejection::BytesRejection,
        ws::rejection::WebSocketUpgradeRejection,
    },
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use reel_engine::{ErrorCode, Incoming, ParsedLine, new_id, parse_line};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{
    api::{BODY_LIMIT, body_of, cursor_of, summary},
    error::{ApiError, ErrorBody},
    forward,
    frames::Position,
    host::{Host, Hosted},
    params::Params,
    source::SourceError,
    subscription::{self, Subscription},
    ws_forward,
};

/// A request taken: the frames answering it carry its id.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    request_id: String,
}

#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/requests",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id")),
    request_body(
        content = Object,
        description = "One request object, exactly as one stdin-RPC line: `{\"requestId\"?, \"submit\": {\"prompt\"}}`, or `cancel`, `snapshot`, `followUp`, `steer`, `compact`, `toolResult`, `approve`, `shutdown`",
        example = json!({"requestId": "r1", "submit": {"prompt": "Hello"}}),
    ),
    responses(
        (status = 202, description = "Handed to the session's writer; its frames follow on the session's streams", body = Accepted),
        (status = 400, description = "Not a request, or one naming another session", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 409, description = "Another process writes the session (`session_busy`)", body = ErrorBody),
        (status = 413, description = "The body is over the limit", body = ErrorBody),
        (status = 500, description = "The store or the command failed", body = ErrorBody),
        (status = 502, description = "Another node of a scale-out writes the session and did not answer the forwarded request (`session_busy`)", body = ErrorBody),
        (status = 503, description = "The server is stopping", body = ErrorBody),
    )
)]
pub async fn request(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_of(body)?;
    let mut line = match parse_line(&body) {
        ParsedLine::Request(line) => *line,
        ParsedLine::Blank => {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidRequestJson,
                "the body is empty: send one request object, as one stdin-RPC line",
            ));
        }
        ParsedLine::Rejected(Incoming::Rejected { code, message, .. }) => {
            return Err(ApiError::bad_request(code, message));
        }
        ParsedLine::Rejected(_) => unreachable!("parse_line rejects with Incoming::Rejected"),
    };
    if line.request.is_none() {
        return Err(ApiError::bad_request(
            ErrorCode::UnknownRequest,
            "the request names no known kind (submit, followUp, steer, cancel, compact, snapshot, toolResult, approve, shutdown)",
        ));
    }
    if !line.session_id.is_empty() && line.session_id != id {
        return Err(ApiError::bad_request(
            ErrorCode::SessionMismatch,
            format!(
                "the request names session {:?}, the URL {id:?}",
                line.session_id
            ),
        ));
    }
    line.session_id.clone_from(&id);
    if line.request_id.is_empty() {
        line.request_id = new_id();
    }
    let request_id = line.request_id.clone();
    // A loaded session is there; only another is looked up (unknown: 404, pruned: 410)
    // before it is loaded. The lookup takes the server's one reading connection, which
    // exports, searches and catch-ups queue for too: a cancel must not wait behind them.
    // (Measured in `reel bench --serve`'s burst: the lookup took 0.3 ms a submit sent one at a
    // time, 90 ms with 64 at once.)
    if !host.is_loaded(&id) {
        summary(host.source().catalog().await?.as_mut(), &id).await?;
    }
    match host.send(&id, Incoming::Request(Box::new(line))).await {
        Ok(()) => Ok((StatusCode::ACCEPTED, Json(Accepted { request_id })).into_response()),
        // Another node of a scale-out writes it: that node answers (the request id made here
        // is not the one it makes, so the body goes as the client sent it).
        Err(SourceError::Busy(message)) if !forward::was_forwarded(&headers) => {
            match host.source().node_writing(&id).await? {
                Some(node) => {
                    let path = format!("/v1/sessions/{id}/requests");
                    forward::post(&host.forwarder, &node, &path, body).await
                }
                None => Err(SourceError::Busy(message).into()),
            }
        }
        Err(error) => Err(error.into()),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Cursor {
    /// Start after this event id (`N`, or `N.K` within event N); `Last-Event-ID` wins.
    #[param(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    after: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        Cursor,
    ),
    responses(
        (status = 200, description = "Frames as Server-Sent Events, each frame of a log event with its event id; hello first, then the snapshot (no cursor) or every frame after the cursor, then live frames", content_type = "text/event-stream", body = String),
        (status = 400, description = "A cursor that is no event id", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 409, description = "Another process writes the session", body = ErrorBody),
        (status = 500, description = "The store or the command failed", body = ErrorBody),
        (status = 503, description = "The server is stopping", body = ErrorBody),
    )
)]
pub async fn events(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<Cursor>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let given = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(query.after);
    let frames = match subscribed(&host, &id, cursor_of(given.clone())?).await {
        Ok((_, frames)) => frames,
        // Another process writes it (a node of a scale-out, a run-command): its frames come
        // from the store as it commits them.
        Err(SubscribeError::Busy) => {
            let catalog = host.source().catalog().await?;
            subscription::follow_store(catalog, &id, cursor_of(given)?).await?
        }
        Err(SubscribeError::Api(error)) => return Err(error),
    };
    Ok(crate::sse_body::response(frames))
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/ws",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id"), Cursor),
    responses(
        (status = 101, description = "A WebSocket: text messages in are request lines, text messages out are frames"),
        (status = 400, description = "A cursor that is no event id", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 409, description = "Another process writes the session", body = ErrorBody),
        (status = 426, description = "Not a WebSocket handshake", body = ErrorBody),
        (status = 502, description = "Another node of a scale-out writes the session and its WebSocket cannot be reached (`session_busy`)", body = ErrorBody),
        (status = 500, description = "The store or the command failed", body = ErrorBody),
        (status = 503, description = "The server is stopping", body = ErrorBody),
    )
)]
pub async fn websocket(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<Cursor>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            ErrorCode::UpgradeRequired,
            format!("{}: open a WebSocket here", rejection.body_text()),
        )
    })?;
    let cursor = cursor_of(query.after.clone())?;
    let (hosted, frames) = match subscribed(&host, &id, cursor).await {
        Ok(subscribed) => subscribed,
        // Another node of a scale-out writes it: the socket is piped to that node.
        Err(SubscribeError::Busy) if !forward::was_forwarded(&headers) => {
            let Some(node) = host.source().node_writing(&id).await? else {
                return Err(SubscribeError::Busy.into_api(&id));
            };
            let upstream =
                ws_forward::connect(&node, &id, query.after.as_deref(), &host.forwarder).await?;
            return Ok(upgrade
                .max_message_size(BODY_LIMIT)
                .on_upgrade(move |socket| ws_forward::pipe(socket, upstream)));
        }
        Err(error) => return Err(error.into_api(&id)),
    };
    Ok(upgrade
        .max_message_size(BODY_LIMIT)
        .on_upgrade(move |socket| crate::websocket::talk(socket, hosted, frames, id)))
}

/// Why a subscriber did not get a loaded session's frames.
enum SubscribeError {
    /// Another process writes the session.
    Busy,
    Api(ApiError),
}

impl SubscribeError {
    fn into_api(self, id: &str) -> ApiError {
        match self {
            SubscribeError::Busy => SourceError::Busy(format!(
                "session {id:?} is written by another process; a WebSocket talks to the process that writes it (its event stream can be read anywhere)"
            ))
            .into(),
            SubscribeError::Api(error) => error,
        }
    }
}

impl<E: Into<ApiError>> From<E> for SubscribeError {
    fn from(error: E) -> Self {
        SubscribeError::Api(error.into())
    }
}

/// Session `id`, loaded, and its frames after `cursor` for one subscriber. A session that
/// unloads meanwhile (a `shutdown` request just ended it) is loaded again.
async fn subscribed(
    host: &Host,
    id: &str,
    cursor: Option<Position>,
) -> Result<(Arc<Hosted>, Subscription), SubscribeError> {
    let mut catalog = host.source().catalog().await?;
    summary(catalog.as_mut(), id).await?;
    loop {
        let hosted = match host.session(id).await {
            Ok(hosted) => hosted,
            Err(SourceError::Busy(_)) => return Err(SubscribeError::Busy),
            Err(error) => return Err(error.into()),
        };
        let Some(live) = hosted.subscribe() else {
            hosted.unloaded().await;
            continue;
        };
        let frames =
            subscription::subscribe(Arc::clone(&hosted), live, catalog, id, cursor).await?;
        return Ok((hosted, frames));
    }
}
