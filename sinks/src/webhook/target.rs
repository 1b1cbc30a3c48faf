//! Where a webhook sink posts, read from its URI: `http(s)://HOST/PATH[?OPTIONS]`.
//!
//! reel's options ride in the query and are taken out of the URL it posts to; every other
//! query parameter stays, so an endpoint that wants its own (`?channel=ops`) gets it:
//!
//! * `secret_env=NAME`: sign every POST with the secret in environment variable NAME;
//! * `batch=N`: frames per POST (default 256; the last batch of outputs taken may top it up);
//! * `retry_for=DURATION`: how long one POST is retried before the sink fails (default 60s).

use std::{fmt, time::Duration};

use base64::Engine;
use reqwest::Url;

/// Frames per POST unless `batch=` says otherwise.
const DEFAULT_BATCH: usize = 256;
/// How long a POST is retried unless `retry_for=` says otherwise.
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(60);

/// Why a webhook URI cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebhookUriError {
    #[error("{uri:?} is not a URL: {source}")]
    Url {
        uri: String,
        source: url::ParseError,
    },
    #[error("{uri:?}: option {option}={value:?}: {reason}")]
    Option {
        uri: String,
        option: &'static str,
        value: String,
        reason: String,
    },
    #[error(
        "{uri:?}: environment variable {name} (secret_env) is not set; export the webhook's signing secret in it"
    )]
    MissingSecret { uri: String, name: String },
    #[error("{uri:?}: the secret in {name} starts with whsec_ but the rest is not base64")]
    BadSecret { uri: String, name: String },
}

/// The key POSTs are signed with. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    /// The key a secret names: a Standard Webhooks secret (`whsec_` and base64) is the bytes
    /// it encodes, any other secret its own bytes.
    pub(super) fn from_secret(secret: &str) -> Option<Self> {
        match secret.strip_prefix("whsec_") {
            Some(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
                .map(Self),
            None => Some(Self(secret.as_bytes().to_vec())),
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// A webhook sink's endpoint and options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookTarget {
    /// The URL POSTs go to, without reel's options.
    pub url: Url,
    pub key: Option<SigningKey>,
    pub batch: usize,
    pub retry_for: Duration,
}

impl WebhookTarget {
    /// Reads `uri`, taking the secret from the environment now, so a missing one is a setup
    /// error before anything runs.
    pub fn parse(uri: &str) -> Result<Self, WebhookUriError> {
        Self::parse_with(uri, |name| std::env::var(name).ok())
    }

    fn parse_with(
        uri: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, WebhookUriError> {
        let mut url = Url::parse(uri).map_err(|source| WebhookUriError::Url {
            uri: uri.to_owned(),
            source,
        })?;
        let bad = |option, value: &str, reason: &str| WebhookUriError::Option {
            uri: uri.to_owned(),
            option,
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        let mut target = Self {
            url: url.clone(),
            key: None,
            batch: DEFAULT_BATCH,
            retry_for: DEFAULT_RETRY_FOR,
        };
        let mut kept = Vec::new();
        for (name, value) in url.query_pairs() {
            match name.as_ref() {
                "secret_env" => {
                    let secret = env(&value).filter(|s| !s.is_empty()).ok_or_else(|| {
                        WebhookUriError::MissingSecret {
                            uri: uri.to_owned(),
                            name: value.to_string(),
                        }
                    })?;
                    let key = SigningKey::from_secret(&secret).ok_or_else(|| {
                        WebhookUriError::BadSecret {
                            uri: uri.to_owned(),
                            name: value.to_string(),
                        }
                    })?;
                    target.key = Some(key);
                }
                "batch" => {
                    target.batch = value
                        .parse()
                        .ok()
                        .filter(|&n| (1..=10_000).contains(&n))
                        .ok_or_else(|| bad("batch", &value, "a number from 1 to 10000"))?;
                }
                "retry_for" => {
                    target.retry_for = humantime::parse_duration(&value)
                        .map_err(|e| bad("retry_for", &value, &format!("{e}, e.g. 30s or 5m")))?;
                }
                _ => kept.push((name.into_owned(), value.into_owned())),
            }
        }
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
        target.url = url;
        Ok(target)
    }

    /// The endpoint for messages: scheme, host and path, never the query (it may hold a token).
    pub fn shown(&self) -> String {
        let mut shown = self.url.clone();
        shown.set_query(None);
        let _ = shown.set_password(None);
        shown.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "RAW" => Some("s3cret".into()),
            "STANDARD" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            "BROKEN" => Some("whsec_!!".into()),
            _ => None,
        }
    }

    #[test]
    fn options_leave_the_url_and_the_endpoints_own_parameters_stay() {
        let target = WebhookTarget::parse_with(
            "https://hooks.example/in?channel=ops&secret_env=RAW&batch=10&retry_for=5s",
            env,
        )
        .unwrap();
        assert_eq!(target.url.as_str(), "https://hooks.example/in?channel=ops");
        assert_eq!(target.key.unwrap().bytes(), b"s3cret");
        assert_eq!(
            (target.batch, target.retry_for),
            (10, Duration::from_secs(5))
        );
        let plain = WebhookTarget::parse_with("http://127.0.0.1:9/hook", env).unwrap();
        assert_eq!(plain.url.as_str(), "http://127.0.0.1:9/hook");
        assert_eq!(plain.key, None);
        let standard = WebhookTarget::parse_with("http://h/x?secret_env=STANDARD", env).unwrap();
        assert_eq!(standard.key.unwrap().bytes().len(), 24);
    }

    #[test]
    fn a_missing_secret_or_a_bad_option_is_refused() {
        for bad in [
            "http://h/x?secret_env=UNSET",
            "http://h/x?secret_env=BROKEN",
            "http://h/x?batch=0",
            "http://h/x?retry_for=soon",
            "http://",
        ] {
            assert!(WebhookTarget::parse_with(bad, env).is_err(), "{bad}");
        }
        let error = WebhookTarget::parse_with("http://h/x?secret_env=UNSET", env).unwrap_err();
        assert!(error.to_string().contains("UNSET"), "{error}");
    }
}
