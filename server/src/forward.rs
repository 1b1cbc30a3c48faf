//! Scale-out: several `reel serve` processes on one PostgreSQL database, each session written
//! by the one node holding its lease. A request posted to another node is forwarded to the
//! writer (found through [`crate::SessionSource::node_writing`]) and its answer passed back,
//! so clients and load balancers need no stickiness. A forwarded request carries
//! [`FORWARDED`] and is never forwarded again: a session that moved meanwhile gets its 409 and
//! the client retries. It carries the nodes' cluster token (`--cluster-token-env`), never the
//! client's own credential: a node hands nothing of a client's to another URL.

use std::time::Duration;

use axum::{
    body::Bytes,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use reel_engine::ErrorCode;

use crate::error::ApiError;

/// The header of a forwarded request: its value names the node that forwarded it.
pub const FORWARDED: &str = "reel-forwarded-from";

/// How long a forwarded request may take: a writer answers a request at once (202), so one
/// that does not within this is taken for gone.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What forwards requests to other nodes.
pub struct Forwarder {
    client: reqwest::Client,
    /// What a forwarded request presents (`Authorization: Bearer`), when the nodes have one.
    pub cluster_token: Option<String>,
}

impl Forwarder {
    pub fn new(cluster_token: Option<String>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(ANSWER_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            // A node answers; it does not send a request elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            client,
            cluster_token,
        }
    }

    /// The `Authorization` value a forwarded request carries.
    pub fn authorization(&self) -> Option<String> {
        self.cluster_token
            .as_ref()
            .map(|token| format!("Bearer {token}"))
    }
}

/// The answer when the node writing a session cannot be reached (`why`): 502 `session_busy`.
pub fn unreachable(node: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        ErrorCode::SessionBusy,
        format!(
            "the node writing this session ({node}) did not answer: {why}; retry, and once its lease is gone any node takes the session over"
        ),
    )
}

/// Whether `headers` are a forwarded request's.
pub fn was_forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED)
}

/// Posts `body` to `path` on the node at `node`, with the cluster's token, and answers what
/// it answers.
pub async fn post(
    forwarder: &Forwarder,
    node: &str,
    path: &str,
    body: Bytes,
) -> Result<Response, ApiError> {
    let url = format!("{}{path}", node.trim_end_matches('/'));
    let mut forwarded = forwarder
        .client
        .post(&url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(FORWARDED, "reel serve")
        .body(body);
    if let Some(authorization) = forwarder.authorization() {
        forwarded = forwarded.header(header::AUTHORIZATION, authorization);
    }
    let unreachable = |e: reqwest::Error| unreachable(node, &e.to_string());
    let answer = forwarded.send().await.map_err(unreachable)?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let body = answer.bytes().await.map_err(unreachable)?;
    Ok((status, [(header::CONTENT_TYPE, content_type)], body).into_response())
}
