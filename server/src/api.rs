//! The HTTP routes: sessions, their requests, their event streams, and health.
//!
//! * `POST /v1/sessions` `{id?}`: creates a session (201; 409 `session_exists`).
//! * `GET /v1/sessions?after=ID&limit=N`: summaries, most recently used first, a page at a time.
//! * `GET /v1/sessions/{id}`: its summary and its whole timeline as a snapshot.
//! * `POST /v1/sessions/{id}/requests`: one request object, as one stdin-RPC line (202 with its
//!   request id, which the frames answering it carry).
//! * `GET /v1/sessions/{id}/events`: Server-Sent Events (see [`crate::subscription`]).
//! * `GET /v1/sessions/{id}/ws`: a WebSocket, requests in and frames out (see
//!   [`crate::websocket`]).
//! * `GET /v1/sessions/{id}/export?format=F&at=N`, `POST /v1/sessions/{id}/fork` `{id?, at?}`
//!   (see [`crate::export`]).
//! * `GET /metrics`: Prometheus figures (see [`crate::metrics`]).
//! * `GET /healthz`.

use std::{
    convert::Infallible,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{
        DefaultBodyLimit, MatchedPath, Path, Request, State, WebSocketUpgrade,
        rejection::BytesRejection,
    },
    http::{HeaderMap, StatusCode, header},
    middleware::{self, Next},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use reel_engine::{
    ErrorCode, Incoming, ParsedLine, SessionCatalog, SessionSummary, StoredStream,
    check_session_id, new_id, parse_line,
};
use reel_proto::json;
use serde::{Deserialize, de::DeserializeOwned};

use tokio::sync::mpsc;

use crate::{
    error::ApiError,
    export,
    frames::{Frame, Position},
    host::{Host, Hosted},
    params::Params,
    subscription,
};

/// The largest request body: a request line as large as stdin RPC takes.
pub const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Sessions in one page of `GET /v1/sessions` at most.
const MAX_PAGE: usize = 1000;

/// How often an idle event stream gets a comment, so proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The routes, on `host`'s sessions.
pub fn routes(host: Arc<Host>) -> Router {
    Router::new()
        .route("/v1/sessions", post(create_session).get(list_sessions))
        .route("/v1/sessions/{id}", get(session))
        .route("/v1/sessions/{id}/requests", post(request))
        .route("/v1/sessions/{id}/events", get(events))
        .route("/v1/sessions/{id}/ws", get(websocket))
        .route("/v1/sessions/{id}/export", get(export::export))
        .route("/v1/sessions/{id}/fork", post(export::fork))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(refuse_oversized))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&host),
            time_request,
        ))
        .with_state(host)
}

/// Records how long each request took to answer (to the response's start: an event stream
/// counts until its first byte), by route.
async fn time_request(State(host): State<Arc<Host>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    host.metrics.observe_request(
        method.as_str(),
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

async fn metrics(State(host): State<Arc<Host>>) -> Response {
    let text = host.metrics.render(&host.census());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// Refuses a body that says it is over [`BODY_LIMIT`] before reading any of it (one without a
/// length is cut off at the limit as it is read).
async fn refuse_oversized(request: Request, next: Next) -> Result<Response, ApiError> {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(length) if length > BODY_LIMIT as u64 => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::RequestTooLarge,
            format!("a body of {length} bytes; the limit is {BODY_LIMIT} bytes"),
        )),
        _ => Ok(next.run(request).await),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    id: Option<String>,
}

async fn create_session(
    State(host): State<Arc<Host>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let create: CreateSession = json_body(body, "a session is created with {\"id\"?: string}")?;
    let id = create.id.unwrap_or_else(new_id);
    check_session_id(&id)
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidSessionId, e.to_string()))?;
    host.source().create(&id).await?;
    let summary = summary(host.source().catalog().await?.as_mut(), &id).await?;
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}

#[derive(Deserialize)]
struct Page {
    /// The last session id of the previous page.
    after: Option<String>,
    limit: Option<usize>,
}

async fn list_sessions(
    State(host): State<Arc<Host>>,
    Params(page): Params<Page>,
) -> Result<Response, ApiError> {
    let limit = page.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let mut catalog = host.source().catalog().await?;
    let sessions = catalog.sessions().await?;
    let start = match &page.after {
        Some(after) => sessions
            .iter()
            .position(|s| &s.session_id == after)
            .map(|at| at + 1)
            .ok_or_else(|| {
                ApiError::bad_request(
                    ErrorCode::SessionNotFound,
                    format!("the page cursor {after:?} names no session"),
                )
            })?,
        None => 0,
    };
    let page: Vec<&SessionSummary> = sessions.iter().skip(start).take(limit).collect();
    let next = (start + page.len() < sessions.len())
        .then(|| page.last().map(|s| s.session_id.clone()))
        .flatten();
    Ok(Json(serde_json::json!({ "sessions": page, "next": next })).into_response())
}

async fn session(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut catalog = host.source().catalog().await?;
    let summary = summary(catalog.as_mut(), &id).await?;
    let whole = StoredStream::open(catalog.as_mut(), &id, summary.events, Some(summary.events))
        .await?
        .snapshot();
    let reel_engine::OutputKind::Snapshot(snapshot) = &whole.kind else {
        unreachable!("a stored stream's snapshot is a snapshot");
    };
    let snapshot: serde_json::Value = json::to_string(snapshot.as_ref())
        .and_then(|text| serde_json::from_str(&text))
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::InternalError,
                e.to_string(),
            )
        })?;
    Ok(Json(serde_json::json!({ "session": summary, "snapshot": snapshot })).into_response())
}

async fn request(
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
    let body = serde_json::json!({ "requestId": request_id });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[derive(Deserialize)]
struct Cursor {
    after: Option<String>,
}

async fn events(
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

/// A WebSocket on the session (see [`crate::websocket`]); `?after=N` as for the event stream.
async fn websocket(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<Cursor>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
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

/// A cursor as a client gives it, or 400.
fn cursor_of(given: Option<String>) -> Result<Option<Position>, ApiError> {
    given
        .map(|text| {
            Position::parse(&text).ok_or_else(|| {
                ApiError::bad_request(
                    ErrorCode::CursorOutOfRange,
                    format!(
                        "{text:?} is no event id (an ordinal N, or N.K for a frame within one)"
                    ),
                )
            })
        })
        .transpose()
}

/// The stored summary of session `id`, or 404.
pub async fn summary(
    catalog: &mut dyn SessionCatalog,
    id: &str,
) -> Result<SessionSummary, ApiError> {
    catalog
        .summary(id)
        .await?
        .ok_or_else(|| ApiError::not_found(id))
}

/// A JSON body; an empty one is `T::default()`. A body that is not a `T` is refused with
/// `expected`, which says what one looks like.
pub fn json_body<T: DeserializeOwned + Default>(
    body: Result<Bytes, BytesRejection>,
    expected: &str,
) -> Result<T, ApiError> {
    let body = body_of(body)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(ErrorCode::InvalidRequestJson, format!("{expected}: {e}"))
    })
}

/// The body, or `request_too_large` past [`BODY_LIMIT`].
fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            ErrorCode::RequestTooLarge,
            format!("{rejection} (the limit is {BODY_LIMIT} bytes)"),
        )
    })
}
