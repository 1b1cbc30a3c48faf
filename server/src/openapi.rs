//! `GET /openapi.json`: the OpenAPI 3.1 document of the server's routes, generated from the
//! handlers' annotations and the types they take and answer with (utoipa), so it cannot drift
//! from the code.

use std::sync::LazyLock;

use axum::{
    Json,
    response::{IntoResponse, Response},
};
use utoipa::{
    Modify, OpenApi,
    openapi::{
        Content, Ref, ResponseBuilder,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use crate::{api, durable, export, search, session_io, sessions};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "reel serve",
        description = "Many reel sessions over HTTP, Server-Sent Events and WebSocket. Requests are stdin-RPC request objects; frames are the same RpcLine JSON a `--stdin-rpc` process writes.",
    ),
    paths(
        sessions::create_session,
        sessions::list_sessions,
        sessions::session,
        session_io::request,
        session_io::events,
        session_io::websocket,
        durable::read,
        durable::head,
        export::export,
        export::fork,
        search::search,
        api::metrics,
        document,
        health,
    ),
    components(schemas(
        crate::source::ExportFormat,
        crate::search::SearchRole,
        crate::sessions::Switch,
        durable::LiveMode,
    )),
    modifiers(&BearerToken),
    security(("bearer" = [])),
    tags(
        (name = "sessions", description = "Sessions, their requests and their frames"),
        (name = "streams", description = "Sessions as Durable Streams (the protocol's read path), for any of its clients and any HTTP cache"),
        (name = "server", description = "The server itself"),
    )
)]
struct Document;

/// `--token-env`'s bearer token, as the document's security scheme.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The token in the variable --token-env names; a server started without one listens on loopback only and needs none",
            ))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        // Every guarded operation can be refused for its token, and at the door (see
        // `front_door.rs`): any operation for its Host, the API for its Origin, a POST for
        // its body's type.
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                )
                .build()
        };
        let refused = error("No token, or a wrong one (`unauthorized`)");
        let misdirected =
            error("The request's Host is not a name this server answers for (`host_not_allowed`)");
        let foreign = error("A page of another origin sent it (`forbidden_origin`)");
        let not_json = error("A body that is not `application/json` (`unsupported_media_type`)");
        for (path, item) in openapi.paths.paths.iter_mut() {
            let guarded = path != "/healthz";
            let posts = item.post.iter_mut().map(|operation| (operation, true));
            let gets = item.get.iter_mut().map(|operation| (operation, false));
            let heads = item.head.iter_mut().map(|operation| (operation, false));
            for (operation, post) in gets.chain(heads).chain(posts) {
                let responses = &mut operation.responses.responses;
                responses.insert("421".into(), misdirected.clone().into());
                if guarded {
                    responses.insert("401".into(), refused.clone().into());
                    responses.insert("403".into(), foreign.clone().into());
                }
                if post {
                    responses.insert("415".into(), not_json.clone().into());
                }
            }
        }
    }
}

/// The document, made once.
static DOCUMENT: LazyLock<serde_json::Value> = LazyLock::new(|| {
    serde_json::to_value(Document::openapi()).expect("an OpenAPI document is JSON")
});

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "server",
    responses((status = 200, description = "This document", body = Object))
)]
pub async fn document() -> Response {
    Json(&*DOCUMENT).into_response()
}

/// `GET /healthz`: the server answers. Never guarded by the token.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "server",
    security(()),
    responses((status = 200, description = "The server answers", content_type = "text/plain; charset=utf-8", body = String))
)]
pub async fn health() -> &'static str {
    "ok\n"
}
