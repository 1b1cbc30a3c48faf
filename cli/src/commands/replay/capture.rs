//! Reading a capture of frames (a `--debug-events-jsonl` file, or stdout of a
//! `--rpc --include-backend-events` run) for `reel replay`: its `backendEvent` frames are a
//! session's log.
//!
//! Lines are read with a bound ([`CAPTURE_LINE_LIMIT`]): a longer line is skipped as it streams
//! in when it is not a backend event (a snapshot of a long session can be huge, and replay does
//! not need it), and refused when it is. Errors name the line and say what is wrong with it: not
//! JSON, a payload type this reel does not know, a gap or a repeated ordinal.

use anyhow::Context;
use std::{io::BufReader, path::Path};

use reel_engine::ordinal_error;
use reel_proto::{
    Any,
    rpc::{RpcLine, rpc_line::Frame},
};

use crate::bounded_lines::{BoundedLines, Line};

use crate::stored::progress;

/// The longest capture line reel reads: 128 MiB (a backend event holds at most one prompt,
/// tool result or tool call, each bounded far below this, JSON escapes included).
pub const CAPTURE_LINE_LIMIT: usize = 128 * 1024 * 1024;

/// What a capture holds, found by [`scan`].
pub struct Capture {
    pub session_id: String,
    pub first: u64,
    pub events: u64,
    /// Lines to read: a torn last line is not among them.
    pub lines: u64,
}

/// First pass: checks the whole capture and finds its session, ordinals and usable lines.
pub fn scan(path: &Path) -> anyhow::Result<Capture> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the capture {}", path.display()))?;
    let metadata = file
        .metadata()
        .with_context(|| format!("cannot read the capture {}", path.display()))?;
    if !metadata.is_file() {
        // It is read twice (checked whole first), and a device or pipe may never end.
        return Err(anyhow::anyhow!(
            "the capture {} is not a regular file: save the frames to a file first",
            path.display()
        ));
    }
    let size = metadata.len();
    let bar = progress::bytes(size, "checking");
    let mut found: Option<Capture> = None;
    let mut number = 0;
    let mut lines = BoundedLines::new(BufReader::new(file), CAPTURE_LINE_LIMIT);
    while let Some(line) = lines.next_line().context("cannot read the capture")? {
        number += 1;
        let (bytes, complete) = match line {
            Line::TooLarge { bytes, prefix } => {
                bar.inc(bytes);
                too_large(number, bytes, &prefix)?;
                continue;
            }
            Line::Text { bytes, complete } => (bytes, complete),
        };
        bar.inc(bytes.len() as u64 + 1);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let frame = match frame(&bytes) {
            Ok(frame) => frame,
            Err(_) if !complete => {
                tracing::warn!(
                    "the capture's last line is cut short ({} bytes): left out",
                    bytes.len()
                );
                break;
            }
            Err(error) => {
                return Err(anyhow::anyhow!(
                    "line {number} of the capture {error}; only the last line of a capture may be incomplete"
                ));
            }
        };
        let Some((ordinal, _)) = backend_event(&frame) else {
            continue;
        };
        match &mut found {
            None => {
                found = Some(Capture {
                    session_id: frame.session_id.clone(),
                    first: ordinal,
                    events: 1,
                    lines: number,
                })
            }
            Some(capture) => {
                if frame.session_id != capture.session_id {
                    return Err(anyhow::anyhow!(
                        "line {number} belongs to session {:?}, not {:?}: one session per capture",
                        frame.session_id,
                        capture.session_id
                    ));
                }
                let expected = capture.first + capture.events;
                if ordinal != expected {
                    return Err(anyhow::anyhow!(
                        "line {number}: {}",
                        ordinal_error(ordinal, expected)
                    ));
                }
                capture.events += 1;
                capture.lines = number;
            }
        }
    }
    bar.finish_and_clear();
    found.ok_or_else(|| {
        anyhow::anyhow!("the capture holds no backendEvent frames: capture with --debug-events-jsonl, or with --rpc --include-backend-events")
    })
}

/// Second pass: hands each backend event of the capture's first `capture.lines` lines to
/// `each`, in order.
pub async fn each_event(
    path: &Path,
    capture: &Capture,
    mut each: impl AsyncFnMut(u64, Any) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = std::fs::File::open(path).context("cannot read the capture")?;
    let mut lines = BoundedLines::new(BufReader::new(file), CAPTURE_LINE_LIMIT);
    for number in 1..=capture.lines {
        let Some(Line::Text { bytes, .. }) =
            lines.next_line().context("cannot read the capture")?
        else {
            continue;
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let frame = frame(&bytes).map_err(|error| anyhow::anyhow!("line {number} {error}"))?;
        if let Some((ordinal, event)) = backend_event(&frame) {
            each(ordinal, event.clone()).await?;
        }
    }
    Ok(())
}

/// An over-long line may be skipped unless it is a backend event (its start says which).
fn too_large(number: u64, bytes: u64, prefix: &[u8]) -> anyhow::Result<()> {
    let start = String::from_utf8_lossy(prefix);
    if start.contains("\"backendEvent\"") {
        return Err(anyhow::anyhow!(
            "line {number} is a backendEvent of {bytes} bytes, more than the {CAPTURE_LINE_LIMIT} bytes reel reads in one line"
        ));
    }
    tracing::warn!(
        "line {number} ({bytes} bytes, not a backendEvent) is too long to read: skipped"
    );
    Ok(())
}

/// A capture line as a frame, or what is wrong with it ("is not JSON: ...", ...).
fn frame(bytes: &[u8]) -> anyhow::Result<RpcLine> {
    let error = match serde_json::from_slice::<RpcLine>(bytes) {
        Ok(frame) => return Ok(frame),
        Err(error) => error,
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Err(anyhow::anyhow!("is not JSON ({error})"));
    };
    if let Some(version) = value.get("version").filter(|v| !v.is_null())
        && version.as_u64().is_none_or(|v| v > u64::from(u32::MAX))
        && version.as_str().is_none_or(|v| v.parse::<u32>().is_err())
    {
        return Err(anyhow::anyhow!(
            "has version {version}, which is not a protocol version (a whole number; reel writes 1)"
        ));
    }
    let text = error.to_string();
    if let Some(at) = text.find("unknown Any type") {
        let detail = text[at..].split(" at line").next().unwrap_or(&text[at..]);
        return Err(anyhow::anyhow!(
            "holds a payload of a type this reel does not know ({detail}): a newer reel wrote it?"
        ));
    }
    Err(anyhow::anyhow!("is JSON but not a frame ({error})"))
}

/// The log event of a frame, if it is a backend event frame.
pub fn backend_event(line: &RpcLine) -> Option<(u64, &Any)> {
    match &line.frame {
        Some(Frame::BackendEvent(event)) => Some((event.ordinal, event.payload.as_ref()?)),
        _ => None,
    }
}
