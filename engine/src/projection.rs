//! The `Projection` trait: a pure fold of the log.
//!
//! A projection's state depends only on the entries applied to it, in order: never on clocks,
//! ids made up on the spot or hash-map order. The live session and a replay therefore call the
//! same `apply` and end in the same state.

use crate::log::LogEntry;

/// A pure fold of log entries.
pub trait Projection: Default {
    /// What applying one entry yields (the timeline yields ui events).
    type Output;

    /// Folds one entry in.
    fn apply(&mut self, entry: &LogEntry) -> Self::Output;

    /// Folds `entries` into a fresh projection. The projection of a log's first N entries is
    /// its state as of ordinal N, so this gives a snapshot at any ordinal.
    fn replay<'a>(entries: impl IntoIterator<Item = &'a LogEntry>) -> Self {
        let mut projection = Self::default();
        for entry in entries {
            projection.apply(entry);
        }
        projection
    }
}
