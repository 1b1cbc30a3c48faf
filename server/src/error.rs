//! Errors as JSON, with the error codes the frames use: `{"error": {"code", "message"}}`.

use axum::{
    Json,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use reel_engine::{ErrorCode, StoreError};
use serde::Serialize;
use utoipa::{
    ToSchema,
    openapi::schema::{Object, ObjectBuilder, Type},
};

use crate::source::SourceError;

/// A request the server refuses, and how.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// Session `id` was pruned at `at_ms`: gone, not unknown.
    pub fn pruned(id: &str, at_ms: u64) -> Self {
        Self::new(
            StatusCode::GONE,
            ErrorCode::SessionPruned,
            pruned_message(id, at_ms),
        )
    }

    pub fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::SessionNotFound,
            format!("there is no session {id:?}"),
        )
    }
}

impl From<SourceError> for ApiError {
    fn from(error: SourceError) -> Self {
        let (status, code) = match &error {
            SourceError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::SessionNotFound),
            SourceError::Pruned(_) => (StatusCode::GONE, ErrorCode::SessionPruned),
            SourceError::Exists(_) => (StatusCode::CONFLICT, ErrorCode::SessionExists),
            SourceError::Busy(_) => (StatusCode::CONFLICT, ErrorCode::SessionBusy),
            SourceError::InvalidId(_) => (StatusCode::BAD_REQUEST, ErrorCode::InvalidSessionId),
            SourceError::InvalidCommand(_) => (StatusCode::BAD_REQUEST, ErrorCode::InvalidCommand),
            SourceError::Stopping(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ServerStopping)
            }
            SourceError::OutOfRange(_) => (StatusCode::BAD_REQUEST, ErrorCode::OrdinalOutOfRange),
            SourceError::Failed(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::RunnerInitFailed,
            ),
        };
        Self::new(status, code, error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        tracing::error!("{}", reel_engine::error_chain(&error));
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::StorageFailed,
            reel_engine::error_chain(&error),
        )
    }
}

/// The body of every error answer.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
struct ErrorDetail {
    /// The code, as the frames' `error.code` has it.
    #[schema(schema_with = error_code_schema)]
    code: &'static str,
    /// What went wrong and what to do.
    message: String,
}

/// Every error code, as an enum of strings.
fn error_code_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ErrorCode::ALL.iter().map(|code| code.as_str())))
        .build()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.code == ErrorCode::Unauthorized {
            let challenge = header::HeaderValue::from_static("Bearer");
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

/// What a reader of a pruned session is told.
pub fn pruned_message(id: &str, at_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms);
    format!(
        "session {id:?} was pruned for its age at {} (reel prune, reel serve --retain)",
        humantime::format_rfc3339_seconds(at)
    )
}
