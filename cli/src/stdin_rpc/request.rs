//! Turns one line of stdin into a request, or says exactly why it cannot be one.

use reel_engine::Incoming;
use reel_proto::rpc::RpcRequestLine;

/// What a line is.
#[derive(Debug)]
pub enum Parsed {
    Request(Box<RpcRequestLine>),
    /// Whitespace only: nothing to answer.
    Blank,
    Rejected(Incoming),
}

/// Parses one request line (without its newline).
pub fn parse_line(line: &[u8]) -> Parsed {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Blank;
    }
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(error) => {
            let message = format!(
                "the line is not valid UTF-8 (bad byte at offset {})",
                error.valid_up_to()
            );
            return reject(None, "invalid_request_json", message);
        }
    };
    match serde_json::from_str::<RpcRequestLine>(text) {
        Ok(request) => Parsed::Request(Box::new(request)),
        Err(error) => {
            let message = format!("not an RpcRequestLine: {error}");
            reject(request_id_of(text), "invalid_request_json", message)
        }
    }
}

/// A rejection for a line that was too long to read.
pub fn too_large(bytes: u64, limit: usize) -> Incoming {
    Incoming::Rejected {
        request_id: None,
        code: "request_too_large",
        message: format!("a request line of {bytes} bytes was skipped; the limit is {limit} bytes"),
    }
}

fn reject(request_id: Option<String>, code: &'static str, message: String) -> Parsed {
    Parsed::Rejected(Incoming::Rejected {
        request_id,
        code,
        message,
    })
}

/// The request id of a line that is JSON but not a valid request, so that its error reaches
/// the client waiting for that id. serde_json's nesting limit keeps this safe on hostile input.
fn request_id_of(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let id = value.get("requestId").or_else(|| value.get("request_id"))?;
    id.as_str().filter(|id| !id.is_empty()).map(str::to_owned)
}
