//! OpenTelemetry traces of reel's sessions, exported over OTLP (HTTP/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `--otlp-endpoint`) says where.
//!
//! The spans are made from the session's log by a sink like any other output ([`TraceSink`]):
//! a run is an `invoke_agent` span, each model call a `chat` span and each tool execution an
//! `execute_tool` span under it, with the attributes of the OpenTelemetry GenAI semantic
//! conventions, the session id and the ordinals of the events that opened and closed them.
//! Each span starts and ends at the recorded time of those events, so the trace says exactly
//! what the log says, for a live session as for any other, and the engine knows nothing of
//! OpenTelemetry. Prompt, reply and tool text stay out unless asked for
//! (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
//!
//! [`Traces`] is the process's exporter: one batch exporter for every session.

mod spans;
mod traces;

pub use spans::TraceSink;
pub use traces::{Traces, TracesError};
