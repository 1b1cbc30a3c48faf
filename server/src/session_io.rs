//! A session's traffic: `POST /v1/sessions/{id}/requests` takes one request as stdin RPC
//! does; `GET /v1/sessions/{id}/events` streams its frames as Server-Sent Events (see
//! [`crate::subscription`]); `GET /v1/sessions/{id}/ws` does both over one WebSocket (see
//! [`crate::websocket`]).

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    Json,
    body::Bytes,
    extract::{
        Path, State, WebSocketUpgrade, rejection::BytesRejection,
        ws::rejection::WebSocketUpgradeRejection,
    },
    http::{HeaderMap, StatusCode},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use reel_engine::{ErrorCode, Incoming, ParsedLine, new_id, parse_line};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::{IntoParams, ToSchema};

use crate::{
    api::{BODY_LIMIT, body_of, cursor_of, summary},
    error::{ApiError, ErrorBody},
    frames::{Frame, Position},
    host::{Host, Hosted},
    params::Params,
    subscription,
};

/// How often an idle event stream gets a comment, so proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

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
        description = "One request object, exactly as one stdin-RPC line: `{\"requestId\"?, \"submit\": {\"prompt\"}}`, or `cancel`, `snapshot`, `followUp`, `steer`, `compact`, `toolResult`, `shutdown`",
        example = json!({"requestId": "r1", "submit": {"prompt": "Hello"}}),
    ),
    responses(
        (status = 202, description = "Handed to the session's writer; its frames follow on the session's streams", body = Accepted),
        (status = 400, description = "Not a request, or one naming another session", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 409, description = "Another process writes the session (`session_busy`)", body = ErrorBody),
        (status = 413, description = "The body is over the limit", body = ErrorBody),
        (status = 500, description = "The store or the command failed", body = ErrorBody),
        (status = 503, description = "The server is stopping", body = ErrorBody),
    )
)]
pub async fn request(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
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
            "the request names no known kind (submit, followUp, steer, cancel, compact, snapshot, toolResult, shutdown)",
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
    summary(host.source().catalog().await?.as_mut(), &id).await?;
    host.send(&id, Incoming::Request(line)).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { request_id })).into_response())
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
    let (_, frames) = subscribed(&host, &id, cursor_of(given)?).await?;
    let stream = futures::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        let mut event = Event::default().data(&frame.json);
        if let Some(position) = frame.position {
            event = event.id(position.id());
        }
        Some((Ok::<_, Infallible>(event), frames))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response())
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
        (status = 409, description = "Another process writes the session", body = ErrorBody),
        (status = 426, description = "Not a WebSocket handshake", body = ErrorBody),
        (status = 500, description = "The store or the command failed", body = ErrorBody),
        (status = 503, description = "The server is stopping", body = ErrorBody),
    )
)]
pub async fn websocket(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<Cursor>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            ErrorCode::UpgradeRequired,
            format!("{}: open a WebSocket here", rejection.body_text()),
        )
    })?;
    let (hosted, frames) = subscribed(&host, &id, cursor_of(query.after)?).await?;
    Ok(upgrade
        .max_message_size(BODY_LIMIT)
        .on_upgrade(move |socket| crate::websocket::talk(socket, hosted, frames, id)))
}

/// Session `id`, loaded, and its frames after `cursor` for one subscriber.
async fn subscribed(
    host: &Host,
    id: &str,
    cursor: Option<Position>,
) -> Result<(Arc<Hosted>, mpsc::Receiver<Arc<Frame>>), ApiError> {
    let mut catalog = host.source().catalog().await?;
    summary(catalog.as_mut(), id).await?;
    let hosted = host.session(id).await?;
    let frames = subscription::subscribe(&hosted, catalog, id, cursor).await?;
    Ok((hosted, frames))
}
