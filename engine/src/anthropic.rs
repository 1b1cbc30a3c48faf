//! The Anthropic Messages provider, streaming over SSE.
//!
//! A reply is a sequence of content blocks, each opened by `content_block_start`, grown by
//! `content_block_delta` and closed by `content_block_stop`: `text` (`text_delta`), `thinking`
//! (`thinking_delta`, then its `signature_delta`), `redacted_thinking` (encrypted, no text) and
//! `tool_use` (its input streamed as `input_json_delta` pieces). `message_start` carries the
//! model and the input token counts, `message_delta` the stop reason and the output count,
//! `ping` keeps the connection alive, and an `error` event (`overloaded_error`, ...) fails the
//! call with its own message. The API key goes only into the `x-api-key` header, marked
//! sensitive.
//!
//! With extended thinking on (a thinking token budget), signed thinking blocks and encrypted
//! ones are kept on the log and sent back at the start of their assistant message, as the API
//! requires in a tool loop. The base URL may name the host (`https://api.anthropic.com`, as the
//! official SDKs take it) or end in `/v1`.

use eventsource_stream::Event;
use reel_proto::chat::UsageInfo;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    context::{ContextMessage, ContextRole},
    http_stream::{Dialect, HttpConfig, HttpRequest, Pending, error_text, stream_call},
    provider::{ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream},
    secrets::Secrets,
    tools::ToolChoice,
};

/// The API version reel speaks (sent as `anthropic-version`).
const API_VERSION: &str = "2023-06-01";
/// The Messages API requires a reply limit; this one is used when the settings name none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A Messages API client.
pub struct AnthropicProvider {
    client: reqwest::Client,
    config: HttpConfig,
    secrets: Secrets,
}

impl AnthropicProvider {
    /// The public API's base URL (the host, as the official SDKs take it).
    pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

    pub fn new(config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            client: config.client()?,
            secrets: config.secrets(),
            config,
        })
    }

    /// The Messages endpoint under `base_url`, which may name the host or end in `/v1`.
    fn messages_url(base_url: &str) -> String {
        let base = base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    fn request_body(request: &ModelRequest) -> Value {
        let required = request.tool_choice == ToolChoice::Required && !request.tools.is_empty();
        // Signed thinking goes back only while thinking is on: the API wants it then.
        let thinking = request.settings.thinking_budget.is_some();
        let mut messages = messages_json(&request.messages, thinking);
        // A small local model needs the start of its tool call written for it, as on the
        // OpenAI path.
        if let Some(prefill) = request
            .settings
            .tool_call_prefill
            .as_ref()
            .filter(|_| required)
        {
            messages
                .push(json!({"role": "assistant", "content": [{"type": "text", "text": prefill}]}));
        }
        let mut body = json!({
            "model": request.settings.model,
            "max_tokens": request.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
            "stream": true,
        });
        if let Some(budget) = request.settings.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        if let Some(system) = &request.system_prompt {
            body["system"] = json!(system);
        }
        if let Some(temperature) = request.settings.temperature {
            body["temperature"] = json!(temperature);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            body["tools"] = json!(tools);
            if required {
                body["tool_choice"] = json!({"type": "any"});
            }
        }
        if !request.settings.stop.is_empty() {
            body["stop_sequences"] = json!(request.settings.stop);
        }
        body
    }
}

/// The conversation as Messages API messages: tool calls are `tool_use` blocks of the
/// assistant, tool results `tool_result` blocks of the user, and consecutive messages of one
/// role are merged, because the API wants the roles to alternate. With `thinking`, each
/// assistant message starts with its signed (and encrypted) thinking blocks.
fn messages_json(messages: &[std::sync::Arc<ContextMessage>], thinking: bool) -> Vec<Value> {
    let mut out: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            ContextRole::User => ("user", text_block(&message.text)),
            ContextRole::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.text,
                    "is_error": message.is_error,
                })],
            ),
            ContextRole::Assistant => {
                // Thinking comes first in an assistant message, as the model produced it.
                let mut blocks: Vec<Value> = message
                    .reasoning
                    .iter()
                    .filter(|_| thinking)
                    .map(|block| {
                        if block.redacted_data.is_empty() {
                            json!({"type": "thinking", "thinking": block.text, "signature": block.signature})
                        } else {
                            json!({"type": "redacted_thinking", "data": block.redacted_data})
                        }
                    })
                    .collect();
                blocks.extend(text_block(&message.text));
                blocks.extend(message.tool_calls.iter().map(|call| {
                    // The arguments were checked as JSON before the tool ran; a call whose
                    // arguments were not JSON is sent with an empty input.
                    let input: Value =
                        serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A text block, or none for empty text (the API refuses empty text blocks).
fn text_block(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "text", "text": text})]
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn stream(&self, request: ModelRequest) -> ProviderStream {
        let key = self.config.api_key.clone().map(|key| ("x-api-key", key));
        let http = HttpRequest::json(
            Self::messages_url(&self.config.base_url),
            &Self::request_body(&request),
            key,
        )
        .map(|mut http| {
            http.headers.insert(
                "anthropic-version",
                reqwest::header::HeaderValue::from_static(API_VERSION),
            );
            http
        });
        stream_call(
            self.client.clone(),
            self.config.clone(),
            http,
            Blocks::default(),
            self.secrets.clone(),
        )
    }
}

/// Reads Messages API events.
#[derive(Default)]
struct Blocks {
    /// Open content blocks by index: a tool use's id, name and input so far; `None` for text
    /// and thinking blocks.
    tool_uses: Vec<Option<(String, String, String)>>,
    usage: UsageInfo,
    stop_reason: Option<String>,
}

impl Dialect for Blocks {
    fn on_event(&mut self, event: &Event, out: &mut Pending) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return false;
        }
        let message: StreamEvent = match serde_json::from_str(data) {
            Ok(message) => message,
            Err(error) => {
                out.push_back(Err(ProviderError::Upstream(format!(
                    "an unreadable event from the server: {error}"
                ))));
                return true;
            }
        };
        match message {
            StreamEvent::MessageStart { message } => {
                if let Some(model) = message.model.filter(|m| !m.is_empty()) {
                    out.push_back(Ok(ProviderEvent::ResponseModel(model)));
                }
                if let Some(usage) = message.usage {
                    self.count(&usage, out);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, content_block, out),
            StreamEvent::ContentBlockDelta { index, delta } => self.delta(index, delta, out),
            StreamEvent::ContentBlockStop { index } => self.stop_block(index, out),
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.count(&usage, out);
                }
            }
            StreamEvent::MessageStop => {
                for index in 0..self.tool_uses.len() {
                    self.stop_block(index, out);
                }
                let stop_reason = self.stop_reason.take().unwrap_or_else(|| "end_turn".into());
                out.push_back(Ok(ProviderEvent::Finished { stop_reason }));
                return true;
            }
            StreamEvent::Error { error } => {
                out.push_back(Err(ProviderError::Upstream(error_text(&error))));
                return true;
            }
            StreamEvent::Ping | StreamEvent::Unknown => {}
        }
        false
    }
}

impl Blocks {
    fn start_block(&mut self, index: usize, block: Block, out: &mut Pending) {
        while self.tool_uses.len() <= index {
            self.tool_uses.push(None);
        }
        match block {
            Block::ToolUse { id, name } => {
                out.push_back(Ok(ProviderEvent::ToolCallStarted {
                    id: id.clone(),
                    name: name.clone(),
                }));
                self.tool_uses[index] = Some((id, name, String::new()));
            }
            Block::Text { text } if !text.is_empty() => {
                out.push_back(Ok(ProviderEvent::TextDelta(text)));
            }
            Block::Thinking { thinking } if !thinking.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningDelta(thinking)));
            }
            Block::RedactedThinking { data } => {
                out.push_back(Ok(ProviderEvent::RedactedReasoning(data)));
            }
            _ => {}
        }
    }

    fn delta(&mut self, index: usize, delta: Delta, out: &mut Pending) {
        match delta {
            Delta::TextDelta { text } if !text.is_empty() => {
                out.push_back(Ok(ProviderEvent::TextDelta(text)));
            }
            Delta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningDelta(thinking)));
            }
            Delta::SignatureDelta { signature } if !signature.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningSignature(signature)));
            }
            Delta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                if let Some(Some((id, _, input))) = self.tool_uses.get_mut(index) {
                    input.push_str(&partial_json);
                    out.push_back(Ok(ProviderEvent::ToolArgumentsDelta {
                        id: id.clone(),
                        delta: partial_json,
                    }));
                }
            }
            _ => {}
        }
    }

    /// A tool use is complete when its block stops.
    fn stop_block(&mut self, index: usize, out: &mut Pending) {
        if let Some((id, name, input)) = self.tool_uses.get_mut(index).and_then(Option::take) {
            let arguments = if input.is_empty() {
                "{}".to_owned()
            } else {
                input
            };
            out.push_back(Ok(ProviderEvent::ToolCallReady {
                id,
                name,
                arguments,
            }));
        }
    }

    /// Folds a usage report in: `message_start` has the input counts, `message_delta` the
    /// output count so far; each report updates what it names. Anthropic counts cache reads
    /// and writes beside `input_tokens` (not inside it, as OpenAI's `cached_tokens`), so they
    /// stay in their own fields and are priced and summed once.
    fn count(&mut self, usage: &Usage, out: &mut Pending) {
        if let Some(n) = usage.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.usage.cache_read_input_tokens = n;
        }
        out.push_back(Ok(ProviderEvent::Usage(self.usage)));
    }
}

/// One event of the stream, read leniently: unknown event and block types are skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<Usage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    #[serde(other)]
    Other,
}

// The variants are the API's own type tags (`text_delta`, ...), which all end in "delta".
#[allow(clippy::enum_variant_names)]
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ContextToolCall;

    fn shared(messages: Vec<ContextMessage>) -> Vec<std::sync::Arc<ContextMessage>> {
        messages.into_iter().map(std::sync::Arc::new).collect()
    }

    fn message(role: ContextRole, text: &str) -> ContextMessage {
        ContextMessage {
            role,
            text: text.into(),
            reasoning: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            is_error: false,
        }
    }

    #[test]
    fn tool_rounds_become_tool_use_and_merged_tool_result_blocks() {
        let mut assistant = message(ContextRole::Assistant, "Checking.");
        assistant.tool_calls = vec![
            ContextToolCall {
                id: "toolu_1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            },
            ContextToolCall {
                id: "toolu_2".into(),
                name: "get_time".into(),
                arguments: "{}".into(),
            },
        ];
        let mut first = message(ContextRole::Tool, "sunny");
        first.tool_call_id = "toolu_1".into();
        let mut second = message(ContextRole::Tool, "no clock");
        second.tool_call_id = "toolu_2".into();
        second.is_error = true;
        let json = messages_json(
            &shared(vec![
                message(ContextRole::User, "Weather?"),
                assistant,
                first,
                second,
                message(ContextRole::Assistant, ""),
            ]),
            false,
        );
        assert_eq!(
            json,
            vec![
                json!({"role": "user", "content": [{"type": "text", "text": "Weather?"}]}),
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                ]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no clock", "is_error": true},
                ]}),
            ]
        );
    }

    /// Feeds `events` (SSE data lines) to the dialect; returns what it produced.
    fn parse(events: &[&str]) -> Vec<Result<ProviderEvent, ProviderError>> {
        let mut blocks = Blocks::default();
        let mut out = Pending::new();
        for data in events {
            let event = Event {
                event: String::new(),
                data: (*data).to_owned(),
                id: String::new(),
                retry: None,
            };
            blocks.on_event(&event, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn cache_reads_are_counted_once_beside_the_input() {
        let events = parse(&[
            r#"{"type":"message_start","message":{"model":"claude-x-2026","usage":{"input_tokens":29,"cache_read_input_tokens":30,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(
            events[0],
            Ok(ProviderEvent::ResponseModel("claude-x-2026".into()))
        );
        let usage = events
            .iter()
            .rev()
            .find_map(|e| match e {
                Ok(ProviderEvent::Usage(usage)) => Some(*usage),
                _ => None,
            })
            .unwrap();
        assert_eq!(usage.input_tokens, 29);
        assert_eq!(usage.cache_read_input_tokens, 30);
        assert_eq!(usage.cache_creation_input_tokens, 5);
        assert_eq!(
            usage.cached_tokens, 0,
            "cache reads are not also OpenAI-style cached tokens"
        );
        assert_eq!(usage.output_tokens, 12);
        assert_eq!(crate::usage::input_tokens(&usage), 64);
        assert_eq!(crate::usage::cached_tokens(&usage), 30);
    }

    #[test]
    fn thinking_signatures_and_encrypted_blocks_are_kept() {
        let events = parse(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig-1"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"enc-2"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
        ]);
        assert_eq!(
            events,
            vec![
                Ok(ProviderEvent::ReasoningDelta("Let me see.".into())),
                Ok(ProviderEvent::ReasoningSignature("sig-1".into())),
                Ok(ProviderEvent::RedactedReasoning("enc-2".into())),
            ]
        );
    }

    #[test]
    fn signed_thinking_goes_back_first_in_its_assistant_message() {
        let mut assistant = message(ContextRole::Assistant, "");
        assistant.reasoning = vec![
            crate::context::ContextReasoning {
                text: "hmm".into(),
                signature: "sig".into(),
                redacted_data: String::new(),
            },
            crate::context::ContextReasoning {
                redacted_data: "enc".into(),
                ..Default::default()
            },
        ];
        assistant.tool_calls = vec![ContextToolCall {
            id: "toolu_1".into(),
            name: "t".into(),
            arguments: "{}".into(),
        }];
        let without = messages_json(
            &shared(vec![message(ContextRole::User, "q"), assistant.clone()]),
            false,
        );
        assert_eq!(
            without[1]["content"].as_array().unwrap().len(),
            1,
            "thinking off: no blocks"
        );
        let json = messages_json(
            &shared(vec![message(ContextRole::User, "q"), assistant]),
            true,
        );
        assert_eq!(
            json[1]["content"],
            json!([
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "enc"},
                {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}},
            ])
        );
    }

    #[test]
    fn the_base_url_may_name_the_host_or_the_version() {
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            assert_eq!(
                AnthropicProvider::messages_url(base),
                "https://api.anthropic.com/v1/messages",
                "{base}"
            );
        }
        assert_eq!(
            AnthropicProvider::messages_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/v1/messages"
        );
    }

    #[test]
    fn a_forced_call_sends_the_prefill_and_thinking_its_budget() {
        let request = ModelRequest {
            messages: shared(vec![message(ContextRole::User, "weather?")]),
            settings: crate::provider::ModelSettings {
                tool_call_prefill: Some("<tool_call>\n".into()),
                temperature: Some(0.2),
                thinking_budget: Some(2048),
                ..Default::default()
            },
            tools: vec![crate::tools::ToolDefinition {
                name: "get_weather".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Required,
            ..Default::default()
        };
        let body = AnthropicProvider::request_body(&request);
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": [{"type": "text", "text": "<tool_call>\n"}]})
        );
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(body["temperature"].to_string(), "0.2");
    }
}
