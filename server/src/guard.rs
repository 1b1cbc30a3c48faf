//! The checks in front of the routes, as one tower layer whose future is a type of its own.
//!
//! Each `middleware::from_fn` boxed its own future and cloned the routes behind it for every
//! request; a request that waits (a long-poll at a session's tail) held all of that for its
//! whole wait, about 1.4 KiB a check (measured with `reel bench --serve`). Here the checks,
//! all of them on headers alone, run before the inner service is called, and a refused
//! request never reaches it.
//!
//! * [`Guard::host`] (every route, the page's and `/healthz` too): [`Door::check_host`].
//! * [`Guard::api`] (the API's routes), in this order: [`Door::check_origin`], the bearer
//!   token when the server has one ([`Tokens::check`]), then the request is timed (by route,
//!   to its response's start) and a body that says it is over the limit is refused
//!   ([`refuse_oversized`]).

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use axum::{
    extract::{MatchedPath, Request},
    http::{Method, StatusCode},
    response::{IntoResponse, Response},
};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::{api::refuse_oversized, auth::Tokens, error::ApiError, front_door::Door, host::Host};

/// Which checks a [`Guard`] makes.
#[derive(Clone)]
enum Checks {
    /// `Host` only.
    Host,
    /// The API's: origin, token, then timing and the body's announced size.
    Api {
        tokens: Option<Tokens>,
        host: Arc<Host>,
    },
}

/// A layer that checks each request before the service it wraps sees it.
#[derive(Clone)]
pub struct Guard {
    door: Door,
    checks: Checks,
}

impl Guard {
    /// Checks `Host` against `door`.
    pub fn host(door: Door) -> Self {
        Self {
            door,
            checks: Checks::Host,
        }
    }

    /// The API's checks; `tokens` when the server requires a bearer token. Each request that
    /// passes origin and token is timed into `host`'s metrics.
    pub fn api(door: Door, tokens: Option<Tokens>, host: Arc<Host>) -> Self {
        Self {
            door,
            checks: Checks::Api { tokens, host },
        }
    }

    /// `Err` with the refusal, or the request's timing (`None`: not timed).
    fn admit(&self, request: &Request) -> Result<Option<Timing>, ApiError> {
        match &self.checks {
            Checks::Host => {
                self.door.check_host(request)?;
                Ok(None)
            }
            Checks::Api { tokens, host } => {
                self.door.check_origin(request)?;
                if let Some(tokens) = tokens {
                    tokens.check(request.headers())?;
                }
                let timing = Timing {
                    started: Instant::now(),
                    method: request.method().clone(),
                    route: request.extensions().get::<MatchedPath>().cloned(),
                    host: Arc::clone(host),
                };
                // Timed, as every request past the token is, though refused before its body
                // is read.
                if let Err(error) = refuse_oversized(request.headers()) {
                    timing.observe(error.status);
                    return Err(error);
                }
                Ok(Some(timing))
            }
        }
    }
}

impl<S> Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: self.clone(),
            inner,
        }
    }
}

/// A service behind a [`Guard`].
#[derive(Clone)]
pub struct Guarded<S> {
    guard: Guard,
    inner: S,
}

impl<S> Service<Request> for Guarded<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.guard.admit(&request) {
            Ok(timing) => Answer::Called {
                inner: self.inner.call(request),
                timing,
            },
            Err(refusal) => Answer::Refused {
                response: Some(refusal.into_response()),
            },
        }
    }
}

/// How a request is timed: from when it passed the guard to its response's start (an event
/// stream counts until its first byte).
struct Timing {
    started: Instant,
    method: Method,
    route: Option<MatchedPath>,
    host: Arc<Host>,
}

impl Timing {
    fn observe(self, status: StatusCode) {
        let route = self.route.as_ref().map_or("unmatched", MatchedPath::as_str);
        self.host.metrics.observe_request(
            self.method.as_str(),
            route,
            status.as_u16(),
            self.started.elapsed(),
        );
    }
}

pin_project! {
    /// A guarded request's answer: the refusal, or the inner service's.
    #[project = AnswerProjection]
    pub enum Answer<F> {
        Refused { response: Option<Response> },
        Called { #[pin] inner: F, timing: Option<Timing> },
    }
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            // Polled once: a future is not polled again after it is ready.
            AnswerProjection::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("an answer is polled to its end once"))),
            AnswerProjection::Called { inner, timing } => {
                let Ok(response) = std::task::ready!(inner.poll(cx));
                if let Some(timing) = timing.take() {
                    timing.observe(response.status());
                }
                Poll::Ready(Ok(response))
            }
        }
    }
}
