//! Turns one request line (of stdin, an HTTP body, a WebSocket message) into a request, or says
//! exactly why it cannot be one: under the line's request id whenever one can be read
//! ([`find_request_id`]), whatever else is wrong.

use reel_proto::rpc::{self, RpcRequestLine};

use super::{Incoming, request_id::find_request_id};
use crate::{id::check_request_id, vocabulary::ErrorCode};

/// What a line is.
#[derive(Debug)]
pub enum ParsedLine {
    Request(Box<RpcRequestLine>),
    /// Whitespace only: nothing to answer.
    Blank,
    Rejected(Incoming),
}

/// Parses one request line (without its newline).
pub fn parse_line(line: &[u8]) -> ParsedLine {
    if line.iter().all(u8::is_ascii_whitespace) {
        return ParsedLine::Blank;
    }
    let request_id = match find_request_id(line).map(checked_id) {
        Some(Err(rejected)) => return ParsedLine::Rejected(rejected),
        Some(Ok(id)) => Some(id),
        None => None,
    };
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(error) => {
            let message = format!(
                "the line is not valid UTF-8 (bad byte at offset {})",
                error.valid_up_to()
            );
            return reject(request_id, ErrorCode::InvalidRequestJson, message);
        }
    };
    match serde_json::from_str::<RpcRequestLine>(text) {
        Ok(request) => ParsedLine::Request(Box::new(request)),
        Err(error) => {
            let (code, message) = explain(text, &error);
            reject(request_id, code, message)
        }
    }
}

/// A rejection for a line that was too long to read; `prefix` is its start, where its request
/// id may still be read.
pub fn too_large(bytes: u64, limit: usize, prefix: &[u8]) -> Incoming {
    let request_id = match find_request_id(prefix).map(checked_id) {
        Some(Err(rejected)) => return rejected,
        Some(Ok(id)) => Some(id),
        None => None,
    };
    Incoming::Rejected {
        request_id,
        code: ErrorCode::RequestTooLarge,
        message: format!("a request line of {bytes} bytes was skipped; the limit is {limit} bytes"),
    }
}

/// A request id that is too long is no id: the line is refused without echoing it.
fn checked_id(id: String) -> Result<String, Incoming> {
    match check_request_id(&id) {
        Ok(()) => Ok(id),
        Err(error) => Err(Incoming::Rejected {
            request_id: None,
            code: ErrorCode::InvalidRequestId,
            message: error.to_string(),
        }),
    }
}

/// Why a JSON text is not a request, in words that point at the problem.
fn explain(text: &str, error: &serde_json::Error) -> (ErrorCode, String) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return (ErrorCode::InvalidRequestJson, format!("not JSON: {error}"));
    };
    if !value.is_object() {
        return (
            ErrorCode::InvalidRequestJson,
            "not an RpcRequestLine: a request is a JSON object".into(),
        );
    }
    if let Some(version) = value.get("version").filter(|v| !v.is_null())
        && !is_protocol_version(version)
    {
        return (
            ErrorCode::UnsupportedVersion,
            format!(
                "\"version\" must be a whole number from 0 to {} (this server speaks version {}); got {version}",
                u32::MAX,
                rpc::PROTOCOL_VERSION
            ),
        );
    }
    (
        ErrorCode::InvalidRequestJson,
        format!("not an RpcRequestLine: {error}"),
    )
}

/// Whether `value` is a `uint32` as the JSON mapping writes one (a number or a numeric string).
fn is_protocol_version(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
        serde_json::Value::String(s) => s.parse::<u32>().is_ok(),
        _ => false,
    }
}

fn reject(request_id: Option<String>, code: ErrorCode, message: String) -> ParsedLine {
    ParsedLine::Rejected(Incoming::Rejected {
        request_id,
        code,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(line: &[u8]) -> (Option<String>, ErrorCode, String) {
        match parse_line(line) {
            ParsedLine::Rejected(Incoming::Rejected {
                request_id,
                code,
                message,
            }) => (request_id, code, message),
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn errors_say_what_is_wrong_under_the_lines_id() {
        let (id, code, message) = rejected(br#"{"version":99999999999,"requestId":"v"}"#);
        assert_eq!(
            (id.as_deref(), code),
            (Some("v"), ErrorCode::UnsupportedVersion)
        );
        assert!(message.contains("whole number"), "{message}");
        assert!(!message.contains("untagged"), "{message}");
        let (id, code, _) = rejected(b"{\"requestId\":\"u\",\"submit\":{\"prompt\":\"\xff\"}}");
        assert_eq!(
            (id.as_deref(), code),
            (Some("u"), ErrorCode::InvalidRequestJson)
        );
        let (id, code, message) = rejected(br#"{"requestId":"j"} junk"#);
        assert_eq!(
            (id.as_deref(), code),
            (Some("j"), ErrorCode::InvalidRequestJson)
        );
        assert!(message.contains("not JSON"), "{message}");
    }

    #[test]
    fn an_id_over_the_limit_is_refused_and_not_echoed() {
        let long = "r".repeat(1 << 20);
        let line = format!(r#"{{"requestId":"{long}","snapshot":{{}}}}"#);
        let (id, code, message) = rejected(line.as_bytes());
        assert_eq!((id, code), (None, ErrorCode::InvalidRequestId));
        assert!(message.len() < 200, "{}", message.len());
    }
}
