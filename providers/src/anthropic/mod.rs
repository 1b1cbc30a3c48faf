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

mod stream;

use serde_json::{Value, json};

use reel_engine::{
    ContextRole, Conversation, ModelRequest, Provider, ProviderError, ProviderStream, ToolChoice,
};

use crate::{
    http_stream::{HttpConfig, HttpRequest, stream_call},
    secrets::Secrets,
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
fn messages_json(messages: &Conversation, thinking: bool) -> Vec<Value> {
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
            stream::Blocks::default(),
            self.secrets.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_engine::{ContextMessage, ContextToolCall};

    fn shared(messages: Vec<ContextMessage>) -> Conversation {
        messages.into_iter().map(std::sync::Arc::new).collect()
    }

    fn message(role: ContextRole, text: &str) -> ContextMessage {
        ContextMessage::new(role, text.into())
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
    #[test]
    fn signed_thinking_goes_back_first_in_its_assistant_message() {
        let mut assistant = message(ContextRole::Assistant, "");
        assistant.reasoning = vec![
            reel_engine::ContextReasoning {
                text: "hmm".into(),
                signature: "sig".into(),
                redacted_data: String::new(),
            },
            reel_engine::ContextReasoning {
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
            settings: reel_engine::ModelSettings {
                tool_call_prefill: Some("<tool_call>\n".into()),
                temperature: Some(0.2),
                thinking_budget: Some(2048),
                ..Default::default()
            },
            tools: vec![reel_engine::ToolDefinition {
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
