//! The sessions: `POST /v1/sessions` creates one, `GET /v1/sessions` lists them a page at a
//! time, `GET /v1/sessions/{id}` shows one with its whole timeline.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State, rejection::BytesRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use reel_engine::{
    ErrorCode, OutputKind, PendingApproval, SessionCatalog, SessionSummary, StoredStream,
    check_session_id, new_id,
};
use reel_proto::json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{
    api::{json_body, summary},
    error::{ApiError, ErrorBody},
    host::Host,
    params::Params,
    source::SessionConfig,
};

/// Sessions in one page of `GET /v1/sessions` at most.
const MAX_PAGE: usize = 1000;

/// A new session.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// Its id (default: a new UUID v7): letters, digits and `-_.:@`, not starting with `-`
    /// or `.`, at most 128 bytes.
    #[schema(pattern = r"^[A-Za-z0-9_:@][A-Za-z0-9_.:@-]{0,127}$")]
    id: Option<String>,
    /// The command file it runs: a name in the server's `--commands` folder (`haiku` for
    /// `haiku.yaml`); default the server's `--command`.
    command: Option<String>,
    /// Values for the command's variables (the others take their defaults); they fill its
    /// `{{ name }}` placeholders.
    variables: Option<BTreeMap<String, String>>,
}

#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    request_body(content = Option<CreateSession>, description = "An empty body makes a session with a new id"),
    responses(
        (status = 201, description = "Created", body = SessionSummary),
        (status = 400, description = "A body that is no session, a bad id, or a command the server does not have (`invalid_command`)", body = ErrorBody),
        (status = 409, description = "The id is taken (`session_exists`)", body = ErrorBody),
        (status = 413, description = "The body is over the limit", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn create_session(
    State(host): State<Arc<Host>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let create: CreateSession = json_body(
        body,
        "a session is created with {\"id\"?: string, \"command\"?: string, \"variables\"?: {name: value}}",
    )?;
    let id = create.id.unwrap_or_else(new_id);
    check_session_id(&id)
        .map_err(|e| ApiError::bad_request(ErrorCode::InvalidSessionId, e.to_string()))?;
    let config = SessionConfig {
        command: create.command,
        variables: create.variables.unwrap_or_default(),
    };
    host.source().create(&id, &config).await?;
    let summary = summary(host.source().catalog().await?.as_mut(), &id).await?;
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Page {
    /// The last session id of the previous page (its `next`).
    after: Option<String>,
    /// Sessions per page: 1 to 1000 (default 100).
    limit: Option<usize>,
    /// `true`: only the sessions whose run waits for a person's decision (an inbox), each with
    /// its `pending` calls.
    waiting: Option<Switch>,
}

/// A query switch: `true` or `false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    True,
    False,
}

/// A session of the list, with the calls it waits on when the inbox was asked for.
#[derive(Serialize, ToSchema)]
pub struct Listed {
    #[serde(flatten)]
    session: SessionSummary,
    /// With `?waiting=true`: the tool calls that wait for a decision (send `approve` with one's
    /// `call_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pending: Option<Vec<PendingApproval>>,
}

/// One page of sessions, most recently used first.
#[derive(Serialize, ToSchema)]
pub struct SessionPage {
    sessions: Vec<Listed>,
    /// The cursor of the next page (`?after=`); `null` on the last.
    next: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    params(Page),
    responses(
        (status = 200, description = "A page of sessions", body = SessionPage),
        (status = 400, description = "A bad parameter, or a cursor that names no session", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn list_sessions(
    State(host): State<Arc<Host>>,
    Params(page): Params<Page>,
) -> Result<Response, ApiError> {
    let limit = page.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let mut catalog = host.source().catalog().await?;
    if page.waiting == Some(Switch::True) {
        return waiting_page(catalog.as_mut(), page.after.as_deref(), limit).await;
    }
    let listed = catalog.sessions().await?;
    let start = match &page.after {
        Some(after) => listed
            .iter()
            .position(|l| &l.session_id == after)
            .map(|at| at + 1)
            .ok_or_else(|| no_such_cursor(after))?,
        None => 0,
    };
    let more = start + limit < listed.len();
    let sessions: Vec<Listed> = listed
        .into_iter()
        .skip(start)
        .take(limit)
        .map(|session| Listed {
            session,
            pending: None,
        })
        .collect();
    let next = more
        .then(|| sessions.last().map(|l| l.session.session_id.clone()))
        .flatten();
    Ok(Json(SessionPage { sessions, next }).into_response())
}

/// A page of the inbox: the store reads only that page (a keyset on the order of the list).
async fn waiting_page(
    catalog: &mut dyn SessionCatalog,
    after: Option<&str>,
    limit: usize,
) -> Result<Response, ApiError> {
    if let Some(after) = after
        && catalog.summary(after).await?.is_none()
    {
        return Err(no_such_cursor(after));
    }
    // One more than the page: whether there is a next one.
    let mut waiting = catalog
        .waiting(after.unwrap_or_default(), limit + 1)
        .await?;
    let more = waiting.len() > limit;
    waiting.truncate(limit);
    let sessions: Vec<Listed> = waiting
        .into_iter()
        .map(|w| Listed {
            session: w.summary,
            pending: Some(w.pending),
        })
        .collect();
    let next = more
        .then(|| sessions.last().map(|l| l.session.session_id.clone()))
        .flatten();
    Ok(Json(SessionPage { sessions, next }).into_response())
}

fn no_such_cursor(after: &str) -> ApiError {
    ApiError::bad_request(
        ErrorCode::SessionNotFound,
        format!("the page cursor {after:?} names no session"),
    )
}

/// A session and its whole timeline.
#[derive(Serialize, ToSchema)]
pub struct SessionView {
    session: SessionSummary,
    /// Its timeline as a `snapshot` frame carries it (protobuf JSON).
    #[schema(value_type = Object)]
    snapshot: serde_json::Value,
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The session and its timeline", body = SessionView),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age (reel prune, --retain)", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn session(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut catalog = host.source().catalog().await?;
    let summary = summary(catalog.as_mut(), &id).await?;
    let whole = StoredStream::open(catalog.as_mut(), &id, summary.events, Some(summary.events))
        .await?
        .snapshot();
    let OutputKind::Snapshot(snapshot) = &whole.kind else {
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
    Ok(Json(SessionView {
        session: summary,
        snapshot,
    })
    .into_response())
}
