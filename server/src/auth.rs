//! Bearer-token authentication: with a token, every route but `/healthz` needs
//! `Authorization: Bearer <token>`, compared in constant time so that timing tells nothing of
//! the token.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::Response,
};
use reel_engine::ErrorCode;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The token clients must present.
#[derive(Clone)]
pub struct Token(pub Arc<str>);

/// Lets a request through when it carries the token.
pub async fn require_token(
    State(token): State<Token>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(presented) if bool::from(presented.as_bytes().ct_eq(token.0.as_bytes())) => {
            Ok(next.run(request).await)
        }
        Some(_) => Err(refused("the bearer token is wrong")),
        None => Err(refused(
            "this server needs Authorization: Bearer <token> (the token is in the environment variable --token-env names)",
        )),
    }
}

fn refused(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
}
