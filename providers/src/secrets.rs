//! Secrets a provider holds, and their removal from everything reel writes.
//!
//! A provider knows three kinds of secret: its API key, a password in its base URL's user-info
//! (`https://user:PASSWORD@host`), and the values of its base URL's query (`?key=...`, the way
//! some gateways take keys). Servers echo them back: a 401 body that quotes the key, a
//! connection error that quotes the URL. [`Secrets::redact`] replaces each occurrence, in plain,
//! percent-encoded and base64 form (standard and URL-safe, at any of the three alignments a
//! secret can have inside encoded text, such as a `Basic` credential), by `[redacted]`; providers apply it to every error, retry reason
//! and streamed piece before it reaches the log, so no frame, debug file, database or log line
//! holds one. (A secret split across two streamed pieces of a reply is not caught: servers echo
//! secrets in errors, not across the pieces of a model's answer.)

use std::borrow::Cow;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not looked for: they would match ordinary text.
const SHORTEST: usize = 4;

/// The base64 pieces of a secret shorter than this are not looked for either (a short
/// secret's pieces are a few letters that ordinary text holds).
const SHORTEST_ENCODED: usize = 8;

/// The secrets of one provider.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    /// Each secret in the forms it may be written in, longest first.
    values: Vec<String>,
}

impl Secrets {
    /// The secrets of a provider reached at `base_url` with `api_key`.
    pub fn new(api_key: Option<&str>, base_url: &str) -> Self {
        let mut values: Vec<String> = api_key.into_iter().map(str::to_owned).collect();
        if let Ok(url) = reqwest::Url::parse(base_url) {
            if let Some(password) = url.password() {
                values.push(percent_decode(password));
                values.push(password.to_owned());
            }
            values.extend(url.query_pairs().map(|(_, value)| value.into_owned()));
        }
        let mut forms = Vec::new();
        for value in values.into_iter().filter(|v| v.len() >= SHORTEST) {
            let encoded = url_encode(&value);
            if encoded != value {
                forms.push(encoded);
            }
            forms.extend(base64_forms(value.as_bytes()));
            forms.push(value);
        }
        forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
        forms.dedup();
        Self { values: forms }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for secret in &self.values {
            if text.contains(secret.as_str()) {
                text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
            }
        }
        text
    }

    /// `url` as it may be shown: its password and query values redacted.
    pub fn shown_url(&self, url: &str) -> String {
        self.redact(url).into_owned()
    }
}

/// The base64 text a secret becomes inside any base64-encoded data, in the standard and the
/// URL-safe alphabet: for each of the three byte offsets it may start at, the characters that
/// depend on the secret's bytes alone (the ones shared with its neighbours differ from text to
/// text, and a character or two at each end tells next to nothing).
fn base64_forms(secret: &[u8]) -> Vec<String> {
    use base64::{
        Engine,
        engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD},
    };
    let mut forms = Vec::new();
    for offset in 0..3usize {
        let mut data = vec![0u8; offset];
        data.extend_from_slice(secret);
        // Characters of 6 bits: the first ones hold bits of the offset's bytes, the last
        // whole one ends where the secret's bits do.
        let skip = (offset * 8).div_ceil(6);
        let end = data.len() * 8 / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&data);
            if let Some(form) = encoded
                .get(skip..end)
                .filter(|f| f.len() >= SHORTEST_ENCODED)
            {
                forms.push(form.to_owned());
            }
        }
    }
    forms
}

/// Decodes `%XX` escapes (invalid ones stay as they are).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes everything but unreserved characters, as a URL's user-info or query would
/// hold a secret.
fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_passwords_and_query_values_are_redacted_in_any_form() {
        let secrets = Secrets::new(
            Some("sk-live-1234"),
            "https://me:p%40ss%2Fword@gateway.example/v1?key=q-secret-9&region=eu",
        );
        let text = "401: invalid key sk-live-1234 for https://me:p%40ss%2Fword@gateway.example/v1?key=q-secret-9 (p@ss/word)";
        let redacted = secrets.redact(text);
        for secret in ["sk-live-1234", "p%40ss%2Fword", "p@ss/word", "q-secret-9"] {
            assert!(!redacted.contains(secret), "{secret} in {redacted}");
        }
        assert!(redacted.contains("[redacted]"));
        assert!(redacted.contains("region=eu") || !text.contains("region"));
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn keys_echoed_in_base64_are_redacted_whatever_surrounds_them() {
        use base64::{
            Engine,
            engine::general_purpose::{STANDARD, URL_SAFE},
        };
        let key = "sk-live-9f8e7d6c5b4a3?>~";
        let secrets = Secrets::new(Some(key), "https://api.example/v1");
        for prefix in ["", "a", "ab", "user:", "Bearer "] {
            for engine in [&STANDARD, &URL_SAFE] {
                let echoed = engine.encode(format!("{prefix}{key}"));
                let text = format!("401: the credential {echoed} is not valid");
                let redacted = secrets.redact(&text);
                assert!(redacted.contains(REDACTED), "{prefix:?}: {redacted}");
                // What is left of the encoded key is a few characters at most.
                let left = redacted
                    .split_whitespace()
                    .find(|word| word.contains(REDACTED))
                    .unwrap()
                    .replace(REDACTED, "");
                assert!(
                    left.len() <= 4 + prefix.len() * 4 / 3 + 4,
                    "{prefix:?}: {redacted}"
                );
            }
        }
    }

    #[test]
    fn short_values_are_not_secrets() {
        let secrets = Secrets::new(None, "http://127.0.0.1:8080/v1?v=1");
        assert_eq!(secrets.redact("v=1 answered"), "v=1 answered");
    }
}
