//! The `Provider` trait: a model backend that streams a reply.
//!
//! A provider turns a [`ModelRequest`] into a stream of [`ProviderEvent`]s. Cancellation is by
//! drop: the session stops polling and drops the stream, which must abort whatever the provider
//! was doing (an HTTP request, a sleep) at once.

use futures::stream::BoxStream;
use reel_proto::chat::UsageInfo;

use crate::vocabulary::CallPurpose;
use crate::{
    context::Conversation,
    tools::{ToolChoice, ToolDefinition},
};

/// Which request field carries the reply limit on an OpenAI-compatible server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenLimitField {
    /// `max_tokens`: what most servers (and OpenAI's older models) take.
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's reasoning models (o1, o3, o4, gpt-5) require.
    MaxCompletionTokens,
}

impl TokenLimitField {
    /// The field `model` needs when the settings name none: OpenAI's reasoning models refuse
    /// `max_tokens`.
    pub fn for_model(model: &str) -> Self {
        let name = model.rsplit('/').next().unwrap_or(model);
        let reasoning = ["o1", "o3", "o4", "gpt-5"]
            .iter()
            .any(|family| name == *family || name.starts_with(&format!("{family}-")));
        if reasoning {
            TokenLimitField::MaxCompletionTokens
        } else {
            TokenLimitField::MaxTokens
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenLimitField::MaxTokens => "max_tokens",
            TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// Settings a provider call is made with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelSettings {
    pub model: String,
    /// Sent exactly as given (an `f64`, so 0.2 goes out as 0.2).
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Where an OpenAI-compatible request puts `max_tokens`; `None` chooses by model family.
    pub max_tokens_field: Option<TokenLimitField>,
    /// Tokens Anthropic's extended thinking may use; `None` leaves it off.
    pub thinking_budget: Option<u32>,
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
    /// The conversation, ending with the newest user message or tool results; shared with the
    /// session's context (an O(1) clone), not copied.
    pub messages: Conversation,
    pub settings: ModelSettings,
    /// How many model calls the session made before this one (0 for its first).
    pub call_index: u64,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Whether it must call one.
    pub tool_choice: ToolChoice,
    /// A reply, or a compaction's summary (the conversation to summarize, ending with a user
    /// message that asks for it).
    pub purpose: CallPurpose,
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

#[cfg(test)]
mod tests {
    use super::TokenLimitField;

    #[test]
    fn reasoning_models_get_max_completion_tokens() {
        for model in [
            "o1",
            "o3-mini",
            "o4-mini-2025",
            "gpt-5",
            "gpt-5-nano",
            "openai/o3",
        ] {
            assert_eq!(
                TokenLimitField::for_model(model),
                TokenLimitField::MaxCompletionTokens,
                "{model}"
            );
        }
        for model in ["gpt-4o", "gpt-4.1-mini", "llama3.2", "smollm2", "", "o1x"] {
            assert_eq!(
                TokenLimitField::for_model(model),
                TokenLimitField::MaxTokens,
                "{model}"
            );
        }
    }
}
