//! reel's model providers, each an implementation of the engine's [`reel_engine::Provider`]:
//! the scripted model (a script played back, or the prompt echoed; no network), and the
//! OpenAI-compatible and Anthropic streaming APIs over HTTP, with what they share (connecting,
//! retries, time-outs, bounded SSE events: [`HttpConfig`]) and what they must never write (the
//! API key and URL credentials: [`Secrets`]).
//!
//! The engine knows none of them: it asks a `Box<dyn Provider>` for each model call.

mod anthropic;
mod http_stream;
mod openai;
mod recorded;
mod scripted;
mod secrets;
mod sse_limit;

pub use anthropic::AnthropicProvider;
pub use http_stream::HttpConfig;
pub use openai::{OpenAiProvider, messages_json as openai_messages};
pub use recorded::{
    CallRecorder, RecordedCall, RecordedEnd, RecordedProvider, RequestDivergence, RequestPart,
};
pub use scripted::{
    Repeat, Script, ScriptError, ScriptToolCall, ScriptUsage, ScriptedProvider, Step, Summary,
};
pub use secrets::{REDACTED, Secrets};
