//! `GET /v1/search?q=...`: where the stored sessions said something (messages, reasoning, tool
//! arguments and results), newest first, a page at a time; each hit names its session and the
//! ordinal that made it, which `GET /v1/sessions/{id}/export?at=` (or the page) opens.

use std::sync::Arc;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use reel_engine::{ErrorCode, SearchHit, SearchQuery, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::{ApiError, ErrorBody},
    host::Host,
    params::Params,
};

/// Hits in one page at most.
const MAX_PAGE: u32 = 1000;

/// Whose words a hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchRole {
    User,
    Assistant,
    Reasoning,
    Tool,
}

impl SearchRole {
    fn as_str(self) -> &'static str {
        match self {
            SearchRole::User => "user",
            SearchRole::Assistant => "assistant",
            SearchRole::Reasoning => "reasoning",
            SearchRole::Tool => "tool",
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// What to look for: words (every one must be there) or a "quoted phrase" (SQLite takes
    /// FTS5 syntax besides, PostgreSQL web-search syntax).
    q: String,
    /// Only this session.
    session: Option<String>,
    /// Only the words of the user, the assistant, its reasoning, or tools.
    role: Option<SearchRole>,
    /// Only this tool's calls and results.
    tool: Option<String>,
    /// Only entities with this status.
    status: Option<String>,
    /// Only what was said at or after this time: `2026-11-27` or `2026-11-27T10:00:00Z`.
    since: Option<String>,
    /// Only what was said before this time.
    until: Option<String>,
    /// Hits per page: 1 to 1000 (default 20).
    limit: Option<u32>,
    /// The cursor of the next page (the previous page's `next`).
    before: Option<i64>,
}

/// One page of hits, newest first.
#[derive(Serialize, ToSchema)]
pub struct SearchPage {
    hits: Vec<SearchHit>,
    /// The cursor of the next page (`?before=`); `null` on the last.
    next: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/v1/search",
    tag = "sessions",
    params(SearchParams),
    responses(
        (status = 200, description = "A page of hits", body = SearchPage),
        (status = 400, description = "No query, a query the search syntax does not take, or a bad parameter (`invalid_query`)", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn search(
    State(host): State<Arc<Host>>,
    Params(params): Params<SearchParams>,
) -> Result<Response, ApiError> {
    let invalid = |message: String| ApiError::bad_request(ErrorCode::InvalidQuery, message);
    let time = |text: &Option<String>| text.as_deref().map(parse_date_ms).transpose();
    let limit = params.limit.unwrap_or(20).clamp(1, MAX_PAGE);
    let query = SearchQuery {
        text: params.q,
        session: params.session,
        role: params.role.map(|role| role.as_str().to_owned()),
        tool: params.tool,
        status: params.status,
        since_ms: time(&params.since).map_err(invalid)?,
        until_ms: time(&params.until).map_err(invalid)?,
        // One more than the page: whether there is a next one.
        limit: limit + 1,
        before: params.before,
    };
    let mut catalog = host.source().catalog().await?;
    let mut hits = match catalog.search(&query).await {
        Ok(hits) => hits,
        Err(StoreError::Query(message)) => return Err(invalid(message)),
        Err(error) => return Err(error.into()),
    };
    let more = hits.len() > limit as usize;
    hits.truncate(limit as usize);
    let next = more.then(|| hits.last().map(|hit| hit.doc)).flatten();
    Ok(Json(SearchPage { hits, next }).into_response())
}

/// A date (`2026-11-27`, midnight UTC) or a time (`2026-11-27T10:00:00Z`) as milliseconds
/// since the Unix epoch.
pub fn parse_date_ms(text: &str) -> Result<u64, String> {
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_owned()
    };
    let at = humantime::parse_rfc3339_weak(&full).map_err(|e| {
        format!("{text:?}: {e}; give a date (2026-11-27) or a time (2026-11-27T10:00:00Z)")
    })?;
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("{text:?} is before 1970"))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}
