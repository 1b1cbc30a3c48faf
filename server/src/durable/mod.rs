//! A session's stream as a Durable Streams stream (ElectricSQL's protocol, v1.0, the read
//! path: sections 5.5 to 5.8): `HEAD` and `GET /v1/sessions/{id}/stream` with `offset`, and
//! `live=long-poll` or `live=sse`. Any Durable Streams client reads a session, and any HTTP
//! cache in front of reel can serve the same range to many readers.
//!
//! The stream is the frames of the session's log events (the `uiEvent` frames `reel export
//! --format jsonl` puts between its two snapshots), in JSON mode: each response a JSON array of
//! frames. Only committed events are read ([`chunk`]), so a range reads the same bytes
//! forever and an offset survives any crash. A session is never closed while it exists;
//! removed, its next read is 404 (410 when it was pruned for its age).
//!
//! Writing stays reel's requests (`POST .../requests`, WebSocket, stdin RPC).

mod chunk;
mod cursor;
mod live;
mod offset;
mod sse;

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use reel_engine::ErrorCode;
use serde::Deserialize;
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use crate::{api::summary, error::ApiError, error::ErrorBody, host::Host, params::Params};

use chunk::{Chunk, ChunkReader};
use offset::{Offset, Start};

const NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
const UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
const CURSOR: HeaderName = HeaderName::from_static("stream-cursor");

/// What a shared cache may do with a chunk of committed events: they never change, so it may
/// keep it (the protocol's advice), per token (`Vary`).
const CACHEABLE: &str = "public, max-age=60, stale-while-revalidate=300";

/// How long a long-poll waits when the client does not say.
const LONG_POLL: Duration = Duration::from_secs(30);

/// How long a reader told of a commit its connection does not see yet waits to look again.
const STORE_LAG: Duration = Duration::from_millis(10);

/// The longest wait a client may ask for (`timeout`), in seconds.
const MAX_TIMEOUT_SECS: u64 = 60;

/// A live read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LiveMode {
    LongPoll,
    Sse,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Where to start: `-1` (the beginning; also when absent), `now` (the tail), or a
    /// `Stream-Next-Offset` this server gave (twenty digits).
    offset: Option<String>,
    /// `long-poll` or `sse` for a live read (then `offset` is required); absent: catch-up.
    live: Option<LiveMode>,
    /// The last `Stream-Cursor` or `streamCursor` the client got.
    cursor: Option<String>,
    /// Seconds a long-poll waits for an event at most: 1 to 60 (30 when absent).
    timeout: Option<u64>,
}

#[utoipa::path(
    head,
    path = "/v1/sessions/{id}/stream",
    tag = "streams",
    params(("id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The session exists; `Stream-Next-Offset` is its tail", headers(("Stream-Next-Offset" = String, description = "The offset after the newest committed event"))),
        (status = 404, description = "No such session"),
        (status = 410, description = "The session was pruned for its age"),
        (status = 500, description = "The store failed"),
    )
)]
pub async fn head(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut catalog = host.source().catalog().await?;
    let tail = summary(catalog.as_mut(), &id).await?.events;
    let mut response = StatusCode::OK.into_response();
    stream_headers(response.headers_mut(), Offset(tail), false, None);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/stream",
    tag = "streams",
    params(
        ("id" = String, Path, description = "The session's id"),
        ("If-None-Match" = Option<String>, Header, description = "The ETag of this range, read before: 304 when it matches"),
        StreamParams,
    ),
    responses(
        (status = 200, description = "The frames of the committed events after `offset` as one JSON array (at most about 1 MiB of them), or with `live=sse` Server-Sent Events: `data` (a JSON array) then `control` (`streamNextOffset`, `streamCursor`, `upToDate`)", content(([Object] = "application/json"), (String = "text/event-stream")), headers(
            ("Stream-Next-Offset" = String, description = "Where the next read starts"),
            ("Stream-Up-To-Date" = String, description = "`true` when the response holds everything committed"),
            ("Stream-Cursor" = String, description = "To echo as `cursor` on the next live read"),
            ("ETag" = String, description = "Names the range; `If-None-Match` with it gets 304"),
        )),
        (status = 204, description = "A long-poll that saw no new event before its timeout"),
        (status = 304, description = "The range is the one the client has (`If-None-Match`)"),
        (status = 400, description = "A malformed offset, an offset past the tail, or a live read without an offset", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 410, description = "The session was pruned for its age", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    )
)]
pub async fn read(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    Params(params): Params<StreamParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let start = Start::parse(params.offset.as_deref()).ok_or_else(|| {
        ApiError::bad_request(
            ErrorCode::CursorOutOfRange,
            format!(
                "{:?} is no offset: -1, now, or a Stream-Next-Offset this server gave",
                params.offset.as_deref().unwrap_or_default()
            ),
        )
    })?;
    if params.live.is_some() && params.offset.is_none() {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidQuery,
            "a live read starts at an offset: add offset=-1, now, or the last Stream-Next-Offset",
        ));
    }
    let timeout = match params.timeout {
        None => LONG_POLL,
        Some(secs @ 1..=MAX_TIMEOUT_SECS) => Duration::from_secs(secs),
        Some(secs) => {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidQuery,
                format!("timeout={secs}: a long-poll waits 1 to {MAX_TIMEOUT_SECS} seconds"),
            ));
        }
    };
    let mut catalog = host.source().catalog().await?;
    let session = summary(catalog.as_mut(), &id).await?;
    let after = match start {
        Start::Now => session.events,
        Start::After(after) if after > session.events => {
            return Err(ApiError::bad_request(
                ErrorCode::CursorOutOfRange,
                format!(
                    "the offset {} is past session {id}'s last committed event, {}",
                    Offset(after),
                    session.events
                ),
            ));
        }
        Start::After(after) => after,
    };
    drop(catalog);
    let range = Range {
        created_at_ms: session.created_at_ms,
        // Copied out, and the headers let go: their bytes share the connection's read buffer,
        // which a waiting long-poll would otherwise keep (about 10 KiB a waiter, measured).
        if_none_match: (headers.get(header::IF_NONE_MATCH))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    drop(headers);
    // A reader at the tail opens no stored stream until there is something to read.
    let behind = after < session.events;
    let mut reader = ChunkReader::new(&id, after);
    match params.live {
        None if start == Start::Now => Ok(at_tail(after, None, StatusCode::OK)),
        None if !behind => Ok(range.answer(&id, &Chunk::empty(after), None)),
        None => {
            let chunk = read_chunk(&host, &mut reader).await?;
            Ok(range.answer(&id, &chunk, None))
        }
        Some(LiveMode::LongPoll) => {
            let _counted = host.metrics.stream_readers.reading();
            let cursor = cursor::next(params.cursor.as_deref());
            match long_poll(&host, &id, reader, behind, Instant::now() + timeout).await? {
                Some(chunk) => Ok(range.answer(&id, &chunk, Some(cursor))),
                None => Ok(at_tail(after, Some(cursor), StatusCode::NO_CONTENT)),
            }
        }
        Some(LiveMode::Sse) => Ok(sse::response(host, id, reader, params.cursor)),
    }
}

/// The next chunk with events in it, read at once when the reader is `behind`, else once one
/// is committed; `None` when none is before `deadline`.
async fn long_poll(
    host: &Host,
    id: &str,
    mut reader: ChunkReader,
    behind: bool,
    deadline: Instant,
) -> Result<Option<Chunk>, ApiError> {
    let mut ready = behind;
    loop {
        if ready {
            let chunk = read_chunk(host, &mut reader).await?;
            if chunk.advanced() {
                return Ok(Some(chunk));
            }
            // Told of a commit this connection does not see yet: a moment, not a spin.
            tokio::time::sleep(STORE_LAG).await;
        }
        ready = live::wait_past(host, id, reader.at(), deadline).await?;
        if !ready {
            return Ok(None);
        }
    }
}

/// The next chunk of `reader`'s session. Boxed: a reader waiting for a commit holds only
/// what waiting needs, not room for reading the store.
async fn read_chunk(host: &Host, reader: &mut ChunkReader) -> Result<Chunk, ApiError> {
    let mut catalog = host.source().catalog().await?;
    Ok(Box::pin(reader.read(catalog.as_mut())).await?)
}

/// The answer of a read with nothing to give: at the tail, never kept by a cache.
fn at_tail(tail: u64, cursor: Option<String>, status: StatusCode) -> Response {
    let mut response = if status == StatusCode::NO_CONTENT {
        status.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], "[]").into_response()
    };
    stream_headers(response.headers_mut(), Offset(tail), true, cursor);
    response
}

/// What names the range a read answers with.
struct Range {
    /// A session removed and made again under its id is another stream: its ranges are too.
    created_at_ms: i64,
    if_none_match: Option<String>,
}

impl Range {
    /// `chunk` as the answer (304 when the client has it): cacheable when it holds events,
    /// never at the tail.
    fn answer(&self, id: &str, chunk: &Chunk, cursor: Option<String>) -> Response {
        let etag = format!(
            "\"{}:{}:{}\"",
            self.created_at_ms,
            Offset(chunk.after),
            Offset(chunk.through)
        );
        let mut response = if self.matches(&etag) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            (
                [(header::CONTENT_TYPE, "application/json")],
                Body::from(chunk.body.clone()),
            )
                .into_response()
        };
        let headers = response.headers_mut();
        stream_headers(headers, Offset(chunk.through), chunk.up_to_date, cursor);
        if let Ok(etag) = HeaderValue::from_str(&etag) {
            headers.insert(header::ETAG, etag);
        }
        if chunk.advanced() {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHEABLE));
        }
        tracing::trace!(
            "session {id}: {} frames after {}",
            chunk.frames,
            chunk.after
        );
        response
    }

    /// Whether `If-None-Match` names `etag` (or is `*`).
    fn matches(&self, etag: &str) -> bool {
        let Some(given) = self.if_none_match.as_deref() else {
            return false;
        };
        given
            .split(',')
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == etag || tag == "*")
    }
}

/// The headers every answer of the stream has: where to go on, whether it is up to date, the
/// cursor of a live read, and what a browser and a cache may do with it (`no-store` unless the
/// caller says it may be kept).
fn stream_headers(headers: &mut HeaderMap, next: Offset, up_to_date: bool, cursor: Option<String>) {
    if let Ok(next) = HeaderValue::from_str(&next.to_string()) {
        headers.insert(NEXT_OFFSET, next);
    }
    if up_to_date {
        headers.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    }
    if let Some(cursor) = cursor.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(CURSOR, cursor);
    }
    guard_headers(headers);
}

/// What a browser and a cache may do with any answer of the stream: keep nothing (unless the
/// caller says otherwise after), sniff nothing, embed it in no other site.
fn guard_headers(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::VARY, HeaderValue::from_static("Authorization"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(if_none_match: Option<&str>) -> Range {
        Range {
            created_at_ms: 1,
            if_none_match: if_none_match.map(str::to_owned),
        }
    }

    #[test]
    fn if_none_match_names_the_range_strongly_weakly_in_a_list_or_as_any() {
        let etag = "\"1:00000000000000000000:00000000000000000007\"";
        assert!(range(Some(etag)).matches(etag));
        assert!(range(Some(&format!("W/{etag}"))).matches(etag));
        assert!(range(Some(&format!("\"other\", {etag}"))).matches(etag));
        assert!(range(Some("*")).matches(etag));
        assert!(!range(Some("\"other\"")).matches(etag));
        assert!(!range(None).matches(etag));
    }
}
