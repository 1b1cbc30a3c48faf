//! A stored session's copies: `GET /v1/sessions/{id}/export` renders it as `reel export` does,
//! streamed from a temporary file; `POST /v1/sessions/{id}/fork` makes a new session of its
//! history up to an ordinal, as `reel fork` does.

use std::sync::Arc;

use axum::{
    Json,
    body::{Body, Bytes},
    extract::{Path, State, rejection::BytesRejection},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use reel_engine::{SessionSummary, check_session_id, new_id};
use serde::Deserialize;
use tokio_util::io::ReaderStream;
use utoipa::{IntoParams, ToSchema};

use crate::{
    api::{json_body, summary},
    error::{ApiError, ErrorBody},
    host::Host,
    params::Params,
    source::ExportFormat,
};

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    format: ExportFormat,
    /// The ordinal to take the session at (default: its last).
    at: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/export",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id"), ExportQuery),
    responses(
        (status = 200, description = "The session in the format asked for, as `reel export` writes it", content(
            (String = "application/jsonl; charset=utf-8"),
            (String = "text/markdown; charset=utf-8"),
            (String = "text/html; charset=utf-8"),
            (Vec<Object> = "application/json"),
        )),
        (status = 400, description = "No such format, or an ordinal past the session's end", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn export(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<ExportQuery>,
) -> Result<Response, ApiError> {
    let file = host.source().export(&id, query.format, query.at).await?;
    let body = Body::from_stream(ReaderStream::new(tokio::fs::File::from_std(file)));
    Ok(([(header::CONTENT_TYPE, query.format.content_type())], body).into_response())
}

/// A fork: a new session whose history is the first `at` events of another.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// The new session's id (default: a new one); as a session id is made.
    #[schema(pattern = r"^[A-Za-z0-9_:@][A-Za-z0-9_.:@-]{0,127}$")]
    id: Option<String>,
    /// The new session holds the events up to and including this ordinal (default: all).
    #[schema(minimum = 1)]
    at: Option<u64>,
}

#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/fork",
    tag = "sessions",
    params(("id" = String, Path, description = "The session to fork")),
    request_body(content = Option<Fork>, description = "An empty body forks all of it under a new id"),
    responses(
        (status = 201, description = "The new session", body = SessionSummary),
        (status = 400, description = "A body that is no fork, a bad id, or an ordinal past the end", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 409, description = "The new id is taken", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn fork(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let fork: Fork = json_body(
        body,
        "a fork is made with {\"id\"?: string, \"at\"?: integer}",
    )?;
    let new = fork.id.unwrap_or_else(new_id);
    check_session_id(&new).map_err(|e| {
        ApiError::bad_request(reel_engine::ErrorCode::InvalidSessionId, e.to_string())
    })?;
    host.source().fork(&id, fork.at, &new).await?;
    let summary = summary(host.source().catalog().await?.as_mut(), &new).await?;
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}
