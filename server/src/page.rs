//! `GET /`: the chat page, five files compiled into the binary (no build step, nothing
//! fetched from the network).
//!
//! The page holds no data and no secret, so it is served without the token: a server started
//! with `--token-env` serves it to anyone, and the page asks its user for the token before it
//! calls the API (which stays guarded). Its Content-Security-Policy lets it load only its own
//! files and talk only to this server.

use axum::{
    Router,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/page.js");
const SEARCH: &str = include_str!("page/search.js");
const STYLE: &str = include_str!("page/page.css");
const ICON: &str = include_str!("page/favicon.svg");

/// Nothing but this server's own files and API; no frames, no plugins, no inline code.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's routes.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/page.js",
            get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/search.js",
            get(|| async { file("text/javascript; charset=utf-8", SEARCH) }),
        )
        .route(
            "/page.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/favicon.svg",
            get(|| async { file("image/svg+xml", ICON) }),
        )
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // A newer binary's page replaces an older one at once.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
