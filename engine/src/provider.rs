//! The `Provider` trait: a model backend that streams a reply.
//!
//! A provider turns a [`ModelRequest`] into a stream of [`ProviderEvent`]s. Cancellation is by
//! drop: the session stops polling and drops the stream, which must abort whatever the provider
//! was doing (an HTTP request, a sleep) at once.

use futures::stream::BoxStream;
use reel_proto::chat::UsageInfo;

use crate::{
    context::ContextMessage,
    tools::{ToolChoice, ToolDefinition},
};

/// Settings a provider call is made with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelSettings {
    pub model: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Prices the cost of each call's usage is computed with.
    pub pricing: Option<crate::usage::Pricing>,
    /// Sequences that end the reply where they appear.
    pub stop: Vec<String>,
    /// For a call that must call a tool: the start of the assistant's reply, sent as a prefill
    /// (small local models need `<tool_call>` to begin one).
    pub tool_call_prefill: Option<String>,
}

/// What a model is asked.
#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    pub system_prompt: Option<String>,
    /// The conversation, ending with the newest user message or tool results.
    pub messages: Vec<ContextMessage>,
    pub settings: ModelSettings,
    /// How many model calls the session made before this one (0 for its first).
    pub call_index: u64,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Whether it must call one.
    pub tool_choice: ToolChoice,
}

/// One step of a streamed reply.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderEvent {
    ReasoningDelta(String),
    /// The provider's signature of the reasoning just streamed (Anthropic's extended thinking):
    /// it must go back with the conversation.
    ReasoningSignature(String),
    /// A reasoning block the provider sent encrypted, with no text to show; it must go back
    /// with the conversation as it came.
    RedactedReasoning(String),
    /// The model the server says is answering (it may differ from the one asked for).
    ResponseModel(String),
    TextDelta(String),
    /// The model began a tool call; `id` is the provider's call id.
    ToolCallStarted {
        id: String,
        name: String,
    },
    ToolArgumentsDelta {
        id: String,
        delta: String,
    },
    /// The tool call is complete; `arguments` is its whole JSON input.
    ToolCallReady {
        id: String,
        name: String,
        arguments: String,
    },
    /// Token counts so far (the newest report wins).
    Usage(UsageInfo),
    /// The call failed in a way worth another try; the provider waits `delay_ms` and retries.
    Retrying {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The reply is complete.
    Finished {
        stop_reason: String,
    },
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ProviderError {
    /// The backend reported an error; the text is its own message.
    #[error("{0}")]
    Upstream(String),
    /// The provider was configured or used wrongly.
    #[error("{0}")]
    Invalid(String),
    /// The provider panicked: a bug, reported as an internal error.
    #[error("{0}")]
    Crashed(String),
}

/// A stream of reply events; dropping it cancels the call.
pub type ProviderStream = BoxStream<'static, Result<ProviderEvent, ProviderError>>;

/// A model backend.
pub trait Provider: Send + Sync {
    /// Short name, e.g. `scripted`.
    fn name(&self) -> &str;

    /// Starts a model call.
    fn stream(&self, request: ModelRequest) -> ProviderStream;
}
