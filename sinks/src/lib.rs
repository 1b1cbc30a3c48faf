//! Sinks: independent outputs that follow a reel session.
//!
//! * [`JsonlFrameSink`]: protocol frames as JSON lines, on stdout ([`StdoutJsonlSink`]) or in
//!   the debug file ([`DebugFileSink`]);
//! * [`TextSink`]: the assistant's reply as plain text;
//! * [`ResultDocumentSink`]: one JSON or YAML document at the end of the run.
//!
//! * [`TimelineDbSink`]: the log, entities and snapshots in a durable store, acknowledged;
//! * [`TurnsDbSink`]: after each run, the model context the next run starts from.

mod document;
mod jsonl;
mod text;
mod timeline_db;
mod turns_db;

pub use document::{
    DocumentFormat, DocumentMessage, DocumentUsage, ResultDocument, ResultDocumentSink,
};
pub use jsonl::{DebugFileSink, JsonlFrameSink, StdoutJsonlSink};
pub use text::TextSink;
pub use timeline_db::TimelineDbSink;
pub use turns_db::TurnsDbSink;
