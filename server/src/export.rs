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
use reel_engine::{check_session_id, new_id};
use serde::Deserialize;
use tokio_util::io::ReaderStream;

use crate::{
    api::{json_body, summary},
    error::ApiError,
    host::Host,
    params::Params,
    source::ExportFormat,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    format: ExportFormat,
    /// The ordinal to take the session at (default: its last).
    at: Option<u64>,
}

pub async fn export(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(query): Params<ExportQuery>,
) -> Result<Response, ApiError> {
    let file = host.source().export(&id, query.format, query.at).await?;
    let body = Body::from_stream(ReaderStream::new(tokio::fs::File::from_std(file)));
    Ok(([(header::CONTENT_TYPE, query.format.content_type())], body).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// The new session's id (default: a new one).
    id: Option<String>,
    /// The new session holds the events up to and including this ordinal (default: all).
    at: Option<u64>,
}

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
