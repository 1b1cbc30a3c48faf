//! Identifiers for messages, runs and model calls.
//!
//! Ids are UUID v7: globally unique across processes and restarts (a per-process counter once
//! collided after a restart and overwrote old entities), and roughly time-sorted for people
//! reading a database. Chronology itself always comes from log ordinals, never from ids.

/// A new globally unique id.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
