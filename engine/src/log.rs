//! The session's event log: the only source of truth.
//!
//! Every model and tool event is appended here and gets the next ordinal: 1, 2, 3, ... with no
//! gaps. Everything else (timeline, model context, frames, databases) is derived from it.
//! The log is written by exactly one owner (the [`Session`](crate::Session)), which appends,
//! projects and fans out each event in one step, so nobody can observe events out of order.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use reel_proto::{Any, rpc::BackendEventFrame};

/// One appended event.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    /// Position in the log, starting at 1, without gaps.
    pub ordinal: u64,
    /// Wall-clock time of the append, in milliseconds since the Unix epoch. Informational only:
    /// projections never read it, so replay is deterministic.
    pub recorded_at_ms: u64,
    /// The event itself; its message name is the event name.
    pub event: Any,
}

impl LogEntry {
    /// The event name, e.g. `ChatTextDelta`.
    pub fn name(&self) -> &str {
        self.event.type_name()
    }

    /// This entry as a `backendEvent` frame.
    pub fn to_backend_frame(&self) -> BackendEventFrame {
        BackendEventFrame {
            ordinal: self.ordinal,
            name: self.name().to_owned(),
            payload: Some(self.event.clone()),
        }
    }
}

/// An in-memory, append-only, gap-free sequence of [`LogEntry`].
///
/// A resumed session keeps in memory only the entries after its snapshot: `base` is the
/// ordinal before the first entry held (0 for a log held from its start).
#[derive(Debug, Default)]
pub struct EventLog {
    base: u64,
    entries: Vec<Arc<LogEntry>>,
}

impl EventLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// A log whose entries up to `base` live elsewhere (a durable store), continuing with
    /// `entries`, which must be numbered `base + 1, base + 2, ...`.
    pub fn continuing(base: u64, entries: Vec<LogEntry>) -> Result<Self, String> {
        for (at, entry) in entries.iter().enumerate() {
            let expected = base + at as u64 + 1;
            if entry.ordinal != expected {
                return Err(format!(
                    "the log has a gap: ordinal {} where {expected} was due",
                    entry.ordinal
                ));
            }
        }
        Ok(Self {
            base,
            entries: entries.into_iter().map(Arc::new).collect(),
        })
    }

    /// Appends `event` with the next ordinal and returns the stored entry.
    pub fn append(&mut self, event: Any) -> Arc<LogEntry> {
        let entry = Arc::new(LogEntry {
            ordinal: self.last_ordinal() + 1,
            recorded_at_ms: now_ms(),
            event,
        });
        self.entries.push(Arc::clone(&entry));
        entry
    }

    /// The ordinal of the newest entry; 0 for an empty log.
    pub fn last_ordinal(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// The ordinal before the first entry held in memory.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// All entries held, oldest first.
    pub fn entries(&self) -> &[Arc<LogEntry>] {
        &self.entries
    }

    /// The entries with ordinals `1..=ordinal`.
    pub fn up_to(&self, ordinal: u64) -> &[Arc<LogEntry>] {
        let end = usize::try_from(ordinal)
            .unwrap_or(usize::MAX)
            .min(self.entries.len());
        &self.entries[..end]
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
