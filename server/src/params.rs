//! Query parameters, refused as JSON errors (`invalid_query`) like every other bad request,
//! rather than with axum's plain-text rejection.

use axum::{
    extract::{FromRequestParts, Query},
    http::request::Parts,
};
use reel_engine::ErrorCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A route's query parameters, deserialized into `T`.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(params)) => Ok(Self(params)),
            Err(rejection) => Err(ApiError::bad_request(
                ErrorCode::InvalidQuery,
                rejection.body_text(),
            )),
        }
    }
}
