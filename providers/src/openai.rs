//! The OpenAI-compatible chat completions provider, streaming over SSE. One provider covers
//! OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio and most gateways.
//!
//! It reads the response leniently (servers differ: `finish_reason: ""`, `choices: null`,
//! `reasoning_content` or `reasoning`) and turns each SSE event into [`ProviderEvent`]s;
//! connecting, retries and timeouts are [`crate::http_stream`]'s. The API key is only ever put
//! in the Authorization header, marked sensitive; it is never logged or written anywhere.

use eventsource_stream::Event;
use reel_proto::chat::UsageInfo;
use serde::Deserialize;
use serde_json::{Value, json};

use reel_engine::{
    ContextMessage, ContextRole, ModelRequest, Provider, ProviderError, ProviderEvent,
    ProviderStream, TokenLimitField, ToolChoice,
};

use crate::{
    http_stream::{Dialect, HttpConfig, HttpRequest, Pending, error_text, stream_call},
    secrets::Secrets,
};

/// A chat completions client.
pub struct OpenAiProvider {
    client: reqwest::Client,
    config: HttpConfig,
    secrets: Secrets,
}

impl OpenAiProvider {
    /// The public API's base URL.
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    pub fn new(config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            client: config.client()?,
            secrets: config.secrets(),
            config,
        })
    }

    fn request_body(request: &ModelRequest) -> Value {
        let mut messages = messages_json(request.system_prompt.as_deref(), &request.messages);
        let required = request.tool_choice == ToolChoice::Required && !request.tools.is_empty();
        if let Some(prefill) = request
            .settings
            .tool_call_prefill
            .as_ref()
            .filter(|_| required)
        {
            messages.push(json!({"role": "assistant", "content": prefill}));
        }
        let mut body = json!({
            "model": request.settings.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Some(temperature) = request.settings.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = request.settings.max_tokens {
            let field = request
                .settings
                .max_tokens_field
                .unwrap_or_else(|| TokenLimitField::for_model(&request.settings.model));
            body[field.as_str()] = json!(max_tokens);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
            body["tools"] = json!(tools);
            if required {
                body["tool_choice"] = json!("required");
            }
        }
        if !request.settings.stop.is_empty() {
            body["stop"] = json!(request.settings.stop);
        }
        body
    }
}

/// A conversation as chat-completions messages (what `reel export --format turns` writes, and
/// what every request sends).
pub fn messages_json(
    system_prompt: Option<&str>,
    messages: &reel_engine::Conversation,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system_prompt {
        out.push(json!({"role": "system", "content": system}));
    }
    out.extend(messages.iter().filter_map(|m| message_json(m)));
    out
}

fn message_json(message: &ContextMessage) -> Option<Value> {
    Some(match message.role {
        ContextRole::User => json!({"role": "user", "content": message.text}),
        ContextRole::Tool => {
            json!({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text})
        }
        ContextRole::Assistant => {
            if message.text.is_empty() && message.tool_calls.is_empty() {
                return None;
            }
            let mut assistant = json!({"role": "assistant", "content": message.text});
            if !message.tool_calls.is_empty() {
                let calls: Vec<Value> = message
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                assistant["tool_calls"] = json!(calls);
            }
            assistant
        }
    })
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn stream(&self, request: ModelRequest) -> ProviderStream {
        let key = self
            .config
            .api_key
            .as_ref()
            .map(|key| ("authorization", format!("Bearer {key}")));
        let http = HttpRequest::json(
            self.config.url("chat/completions"),
            &Self::request_body(&request),
            key,
        );
        stream_call(
            self.client.clone(),
            self.config.clone(),
            http,
            Chunks::default(),
            self.secrets.clone(),
        )
    }
}

/// Reads chat completion chunks.
#[derive(Default)]
struct Chunks {
    /// Tool calls by their index in the response: id, name, arguments so far.
    tool_calls: Vec<(String, String, String)>,
    finish_reason: Option<String>,
    /// Whether the server has said which model answers.
    model_named: bool,
}

impl Dialect for Chunks {
    fn on_event(&mut self, event: &Event, out: &mut Pending) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return false;
        }
        if data == "[DONE]" {
            let reason = self.finish_reason.take().unwrap_or_else(|| "stop".into());
            self.finish(reason, out);
            return true;
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(error) => {
                out.push_back(Err(ProviderError::Upstream(format!(
                    "an unreadable event from the server: {error}"
                ))));
                return true;
            }
        };
        if let Some(error) = chunk.error {
            out.push_back(Err(ProviderError::Upstream(error_text(&error))));
            return true;
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty() && !self.model_named) {
            self.model_named = true;
            out.push_back(Ok(ProviderEvent::ResponseModel(model)));
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                self.on_delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            out.push_back(Ok(ProviderEvent::Usage(UsageInfo {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cached_tokens: usage
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                ..Default::default()
            })));
        }
        false
    }

    fn on_close(&mut self, out: &mut Pending) {
        match self.finish_reason.take() {
            // Some servers end without [DONE] after a finish reason: the reply is whole.
            Some(reason) => self.finish(reason, out),
            None => out.push_back(Err(ProviderError::Upstream(
                "the connection closed before the reply was complete".into(),
            ))),
        }
    }
}

impl Chunks {
    fn on_delta(&mut self, delta: Delta, out: &mut Pending) {
        if let Some(text) = delta
            .reasoning_content
            .or(delta.reasoning)
            .filter(|t| !t.is_empty())
        {
            out.push_back(Ok(ProviderEvent::ReasoningDelta(text)));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            out.push_back(Ok(ProviderEvent::TextDelta(text)));
        }
        for call in delta.tool_calls.into_iter().flatten() {
            let index = call.index.unwrap_or(self.tool_calls.len());
            while self.tool_calls.len() <= index {
                self.tool_calls.push(Default::default());
            }
            let function = call.function.unwrap_or_default();
            let slot = &mut self.tool_calls[index];
            if slot.0.is_empty() {
                slot.0 = call.id.unwrap_or_else(|| format!("call_{index}"));
                slot.1 = function.name.clone().unwrap_or_default();
                out.push_back(Ok(ProviderEvent::ToolCallStarted {
                    id: slot.0.clone(),
                    name: slot.1.clone(),
                }));
            }
            if let Some(arguments) = function.arguments.filter(|a| !a.is_empty()) {
                slot.2.push_str(&arguments);
                out.push_back(Ok(ProviderEvent::ToolArgumentsDelta {
                    id: slot.0.clone(),
                    delta: arguments,
                }));
            }
        }
    }

    /// Completes the tool calls and finishes the reply.
    fn finish(&mut self, stop_reason: String, out: &mut Pending) {
        for (id, name, arguments) in std::mem::take(&mut self.tool_calls) {
            let arguments = if arguments.is_empty() {
                "{}".to_owned()
            } else {
                arguments
            };
            out.push_back(Ok(ProviderEvent::ToolCallReady {
                id,
                name,
                arguments,
            }));
        }
        out.push_back(Ok(ProviderEvent::Finished { stop_reason }));
    }
}

/// One streamed chunk, read leniently: every field may be missing or null.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize, Default, Clone)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<UsageDetails>,
}

#[derive(Deserialize)]
struct UsageDetails {
    #[serde(default)]
    cached_tokens: Option<u32>,
}
