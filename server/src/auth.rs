//! Bearer-token authentication: with a token, every route but `/healthz` and the page needs
//! `Authorization: Bearer <token>` (the scheme's name in any case, as RFC 9110 has it),
//! compared in constant time so that timing tells nothing of the token. A request another node
//! of a scale-out forwards carries the nodes' shared cluster token instead: a node never
//! hands on a client's own credential.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use reel_engine::ErrorCode;
use subtle::ConstantTimeEq;

use crate::{error::ApiError, forward};

/// The tokens a request may present.
#[derive(Clone)]
pub struct Tokens {
    /// The clients'.
    pub client: Arc<str>,
    /// The nodes' (`--cluster-token-env`), taken on forwarded requests only.
    pub cluster: Option<Arc<str>>,
}

impl Tokens {
    /// Lets a request through when it carries the token (401 otherwise).
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer);
        let expected = match &self.cluster {
            Some(cluster) if forward::was_forwarded(headers) => cluster,
            _ => &self.client,
        };
        match presented {
            Some(presented) if bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) => {
                Ok(())
            }
            Some(_) => Err(refused("the bearer token is wrong")),
            None => Err(refused(
                "this server needs Authorization: Bearer <token> (the token is in the environment variable --token-env names)",
            )),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn refused(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn the_scheme_name_is_case_insensitive() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER  t0k ", " beArer t0k"] {
            assert_eq!(bearer(value), Some("t0k"), "{value:?}");
        }
        assert_eq!(bearer("Basic t0k"), None);
        assert_eq!(bearer("Bearert0k"), None);
    }
}
