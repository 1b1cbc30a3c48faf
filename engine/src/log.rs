//! The session's event log: the only source of truth.
//!
//! Every model and tool event is appended here and gets the next ordinal: 1, 2, 3, ... with no
//! gaps. Everything else (timeline, model context, frames, databases) is derived from it.
//! The log is written by exactly one owner (the [`Session`](crate::Session)), which appends,
//! projects and fans out each event in one step, so nobody can observe events out of order.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use reel_proto::{Any, json::BackendEventRef};

/// One appended event.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    /// Position in the log, starting at 1, without gaps.
    pub ordinal: u64,
    /// Wall-clock time of the append, in milliseconds since the Unix epoch. Stored with the
    /// entry, so a projection that reads it (when a call asked for approval) replays the same.
    pub recorded_at_ms: u64,
    /// The event itself; its message name is the event name.
    pub event: Any,
}

impl LogEntry {
    /// The event name, e.g. `ChatTextDelta`.
    pub fn name(&self) -> &str {
        self.event.type_name()
    }

    /// This entry as a `backendEvent` frame, borrowed: writing it copies nothing.
    pub fn backend_frame(&self) -> BackendEventRef<'_> {
        BackendEventRef {
            ordinal: self.ordinal,
            name: self.name(),
            payload: &self.event,
        }
    }
}

/// The session's place in its log: the ordinal of the newest entry.
///
/// The log itself lives in the sinks that keep it (a timeline database, the debug file): the
/// session only hands out the next ordinal. Holding every entry in memory would cost a few
/// hundred bytes per streamed delta for the life of the process, and nothing reads them back.
#[derive(Debug, Default)]
pub struct EventLog {
    last: u64,
}

impl EventLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// A log whose entries up to `ordinal` are already written (a resumed session).
    pub fn after(ordinal: u64) -> Self {
        Self { last: ordinal }
    }

    /// Appends `event` with the next ordinal and returns the entry.
    pub fn append(&mut self, event: Any) -> Arc<LogEntry> {
        self.last += 1;
        Arc::new(LogEntry {
            ordinal: self.last,
            recorded_at_ms: now_ms(),
            event,
        })
    }

    /// The ordinal of the newest entry; 0 for an empty log.
    pub fn last_ordinal(&self) -> u64 {
        self.last
    }
}

/// Why `found` cannot follow in a log where `expected` is due: a gap, or an ordinal seen twice.
pub fn ordinal_error(found: u64, expected: u64) -> String {
    if found < expected {
        format!("ordinal {found} appears twice (or out of order): {expected} was due")
    } else {
        format!(
            "the log has a gap: ordinal {found} where {expected} was due ({} missing)",
            found - expected
        )
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
