//! Identifiers for messages, runs and model calls.
//!
//! Ids are UUID v7: globally unique across processes and restarts (a per-process counter once
//! collided after a restart and overwrote old entities), and roughly time-sorted for people
//! reading a database. Chronology itself always comes from log ordinals, never from ids.

/// A new globally unique id.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The longest session id, in characters.
pub const MAX_SESSION_ID: usize = 128;
/// The longest request id a client may choose, in bytes.
pub const MAX_REQUEST_ID: usize = 256;

/// Why a client's id cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("the session id is empty")]
    EmptySession,
    #[error(
        "the session id {0:?} has a character a session id may not hold (ASCII letters, digits and - _ . : @ only, not starting with - or .)"
    )]
    BadSessionCharacter(String),
    #[error("the session id starting {0:?} is longer than {MAX_SESSION_ID} characters")]
    LongSession(String),
    #[error("the request id starting {0:?} is longer than {MAX_REQUEST_ID} bytes")]
    LongRequest(String),
}

/// Checks a session id: 1 to [`MAX_SESSION_ID`] characters, each an ASCII letter or digit or
/// one of `- _ . : @`, not starting with `-` or `.`. Such an id is safe in a file name, a
/// terminal, a URL path and every database reel writes.
pub fn check_session_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::EmptySession);
    }
    if id.len() > MAX_SESSION_ID {
        return Err(IdError::LongSession(cut(id)));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:@".contains(c);
    if !id.chars().all(allowed) || id.starts_with(['-', '.']) {
        return Err(IdError::BadSessionCharacter(id.to_owned()));
    }
    Ok(())
}

/// Checks a request id's length (any text of up to [`MAX_REQUEST_ID`] bytes).
pub fn check_request_id(id: &str) -> Result<(), IdError> {
    if id.len() > MAX_REQUEST_ID {
        return Err(IdError::LongRequest(cut(id)));
    }
    Ok(())
}

/// The first 16 characters of an id that is too long to be one, marked as cut: an id over the
/// limit is not an id, so it is never echoed whole.
fn cut(id: &str) -> String {
    let prefix: String = id.chars().take(16).collect();
    format!("{prefix}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_short_and_plain() {
        for good in ["demo", "notes-2", "a.b:c@d_e", &new_id()] {
            assert_eq!(check_session_id(good), Ok(()), "{good}");
        }
        assert_eq!(check_session_id(""), Err(IdError::EmptySession));
        for bad in [" ", "a b", "-x", ".x", "a\0b", "a/b", "é", "a\u{202e}b"] {
            assert!(check_session_id(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(MAX_SESSION_ID + 1);
        let error = check_session_id(&long).unwrap_err().to_string();
        assert!(error.len() < 100, "{error}");
    }

    #[test]
    fn request_ids_are_bounded_and_never_echoed_whole() {
        assert_eq!(check_request_id(&"r".repeat(MAX_REQUEST_ID)), Ok(()));
        let error = check_request_id(&"r".repeat(1 << 20))
            .unwrap_err()
            .to_string();
        assert!(error.len() < 120 && error.contains('…'), "{error}");
    }
}
