//! The HTTP routes, and what every route shares: the body limit and JSON bodies (the checks
//! in front of them, and their timing, are [`crate::guard`]).
//!
//! * `POST /v1/sessions`, `GET /v1/sessions`, `GET /v1/sessions/{id}`: [`crate::sessions`].
//! * `POST /v1/sessions/{id}/requests`, `GET /v1/sessions/{id}/events`,
//!   `GET /v1/sessions/{id}/ws`: [`crate::session_io`].
//! * `GET` and `HEAD /v1/sessions/{id}/stream`: the session as a Durable Streams stream
//!   ([`crate::durable`]).
//! * `GET /v1/sessions/{id}/export`, `POST /v1/sessions/{id}/fork`: [`crate::export`].
//! * `GET /metrics`: Prometheus figures (see [`crate::metrics`]).
//! * `GET /openapi.json`: the OpenAPI document of them all (see [`crate::openapi`]).
//! * `GET /healthz` and the chat page `GET /` ([`crate::page`]), outside the token's guard
//!   (see `lib.rs`).

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use reel_engine::{ErrorCode, SessionCatalog, SessionSummary};
use serde::de::DeserializeOwned;
use tower::ServiceBuilder;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::{
    durable, error::ApiError, export, frames::Position, guard::Guard, host::Host, openapi, search,
    session_io, sessions,
};

/// The largest request body: a request line as large as stdin RPC takes.
pub const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// How long a request's body may take to arrive (a client that trickles it is cut off).
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// The routes, on `host`'s sessions, each behind `guard` (see [`Guard::api`]).
pub fn routes(host: Arc<Host>, guard: Guard) -> Router {
    Router::new()
        .route(
            "/v1/sessions",
            post(sessions::create_session).get(sessions::list_sessions),
        )
        .route("/v1/sessions/{id}", get(sessions::session))
        .route("/v1/sessions/{id}/requests", post(session_io::request))
        .route("/v1/sessions/{id}/events", get(session_io::events))
        .route("/v1/sessions/{id}/ws", get(session_io::websocket))
        .route(
            "/v1/sessions/{id}/stream",
            get(durable::read).head(durable::head),
        )
        .route("/v1/sessions/{id}/export", get(export::export))
        .route("/v1/sessions/{id}/fork", post(export::fork))
        .route("/v1/search", get(search::search))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::document))
        // One layer for all of it, so that a request's future is boxed once, not once a
        // check (a waiting long-poll holds it for its whole wait).
        .layer(
            ServiceBuilder::new()
                .layer(guard)
                .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
                .layer(DefaultBodyLimit::max(BODY_LIMIT)),
        )
        .with_state(host)
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "server",
    responses((status = 200, description = "The server's metrics in the Prometheus (OpenMetrics) text format", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String))
)]
pub async fn metrics(State(host): State<Arc<Host>>) -> Response {
    let text = host.metrics.render(&host.census());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// Refuses a body that says it is over [`BODY_LIMIT`] before reading any of it (one without a
/// length is cut off at the limit as it is read).
pub fn refuse_oversized(headers: &HeaderMap) -> Result<(), ApiError> {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(length) if length > BODY_LIMIT as u64 => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::RequestTooLarge,
            format!("a body of {length} bytes; the limit is {BODY_LIMIT} bytes"),
        )),
        _ => Ok(()),
    }
}

/// A cursor as a client gives it, or 400.
pub fn cursor_of(given: Option<String>) -> Result<Option<Position>, ApiError> {
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

/// The stored summary of session `id`; 410 when it was pruned, 404 when there is none.
pub async fn summary(
    catalog: &mut dyn SessionCatalog,
    id: &str,
) -> Result<SessionSummary, ApiError> {
    if let Some(summary) = catalog.summary(id).await? {
        return Ok(summary);
    }
    match catalog.pruned_at(id).await? {
        Some(at) => Err(ApiError::pruned(id, at)),
        None => Err(ApiError::not_found(id)),
    }
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
pub fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            ErrorCode::RequestTooLarge,
            format!("{rejection} (the limit is {BODY_LIMIT} bytes)"),
        )
    })
}
