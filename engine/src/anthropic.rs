//! The Anthropic Messages provider, streaming over SSE.
//!
//! A reply is a sequence of content blocks, each opened by `content_block_start`, grown by
//! `content_block_delta` and closed by `content_block_stop`: `text` (`text_delta`), `thinking`
//! (`thinking_delta`; its `signature_delta` is not shown) and `tool_use` (its input streamed as
//! `input_json_delta` pieces). `message_start` carries the input token counts, `message_delta`
//! the stop reason and the output count, `ping` keeps the connection alive, and an `error` event
//! (`overloaded_error`, ...) fails the call with its own message. The API key goes only into
//! the `x-api-key` header, marked sensitive.

use eventsource_stream::Event;
use reel_proto::chat::UsageInfo;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    context::{ContextMessage, ContextRole},
    http_stream::{Dialect, HttpConfig, HttpRequest, Pending, error_text, stream_call},
    provider::{ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream},
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
}

impl AnthropicProvider {
    /// The public API's base URL.
    pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";

    pub fn new(config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            client: config.client()?,
            config,
        })
    }

    fn request_body(request: &ModelRequest) -> Value {
        let mut body = json!({
            "model": request.settings.model,
            "max_tokens": request.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages_json(&request.messages),
            "stream": true,
        });
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
            if request.tool_choice == ToolChoice::Required {
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
/// role are merged, because the API wants the roles to alternate.
fn messages_json(messages: &[ContextMessage]) -> Vec<Value> {
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
                let mut blocks = text_block(&message.text);
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
            self.config.url("messages"),
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
    /// output count so far; each report updates what it names.
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
            self.usage.cached_tokens = n;
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

    fn message(role: ContextRole, text: &str) -> ContextMessage {
        ContextMessage {
            role,
            text: text.into(),
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
        let json = messages_json(&[
            message(ContextRole::User, "Weather?"),
            assistant,
            first,
            second,
            message(ContextRole::Assistant, ""),
        ]);
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
}
