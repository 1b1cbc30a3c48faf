//! Sinks: independent outputs that follow a reel session, live or read back from its log
//! (a stored session's outputs are the ones its live run produced, see
//! [`reel_engine::StoredStream`], so every sink renders both alike).
//!
//! * [`JsonlFrameSink`]: protocol frames as JSON lines, on stdout, in the debug file
//!   ([`DebugFileSink`]) or in an export;
//! * [`TextSink`]: the assistant's reply as plain text;
//! * [`ResultDocumentSink`]: one JSON or YAML document at the end of the run;
//! * [`TranscriptSink`]: the session for people, as markdown, HTML or terminal text;
//! * [`FollowTextSink`]: a followed session for people (`reel tail` on a terminal);
//! * [`TurnsDocumentSink`]: the model context as a JSON list of chat messages;
//! * [`EventCountSink`]: how many events of each kind the session appended;
//! * [`ExecSink`]: the frames on a child process's stdin (`--sink exec:COMMAND`);
//! * [`WebhookSink`]: the frames POSTed to a webhook, batched and signed (`--sink https://...`).
//!
//! * [`TimelineDbSink`]: the log, entities and snapshots in a durable store, acknowledged;
//! * [`TurnsDbSink`]: after each run, the model context the next run starts from.

mod blocking;
mod document;
mod event_counts;
mod exec;
mod follow_text;
mod jsonl;
mod printable;
mod text;
mod timeline_db;
mod transcript;
mod turns_db;
mod turns_document;
mod webhook;

#[cfg(test)]
mod tests;

pub use document::{
    DocumentFormat, DocumentMessage, DocumentUsage, ResultDocument, ResultDocumentSink,
};
pub use event_counts::EventCountSink;
pub use exec::{ChildInput, ExecSink};
pub use follow_text::FollowTextSink;
pub use jsonl::{DebugFileSink, JsonlFrameSink};
pub use printable::{is_bidi_control, one_line, printable};
pub use text::TextSink;
pub use timeline_db::TimelineDbSink;
pub use transcript::{Transcript, TranscriptFormat, TranscriptSink, html_escape};
pub use turns_db::TurnsDbSink;
pub use turns_document::TurnsDocumentSink;
pub use webhook::{SigningKey, WebhookSink, WebhookTarget, WebhookUriError};
