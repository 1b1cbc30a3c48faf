//! The OpenAI-compatible chat completions provider, streaming over SSE. One provider covers
//! OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio and most gateways.
//!
//! It reads the response leniently (servers differ: `finish_reason: ""`, `choices: null`,
//! `reasoning_content` or `reasoning`), turns each SSE event into [`ProviderEvent`]s, retries
//! HTTP 429 and 5xx with exponential backoff and jitter (each retry an event), fails a call whose
//! server goes quiet for longer than the idle timeout, and keeps what arrived before a
//! connection dropped. The API key is only ever put in the Authorization header, marked
//! sensitive; it is never logged or written anywhere.

use std::{collections::VecDeque, time::Duration};

use eventsource_stream::{Event, Eventsource};
use futures::{StreamExt, stream::BoxStream};
use reel_proto::chat::UsageInfo;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    context::{ContextMessage, ContextRole},
    provider::{ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream},
};

/// How an OpenAI-compatible provider is reached.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Sent as a bearer token; `None` for local servers that need none.
    pub api_key: Option<String>,
    /// Longest wait for the response to start, and between two pieces of it.
    pub idle_timeout: Duration,
    /// Retries after HTTP 429 or 5xx.
    pub max_retries: u32,
    /// The first retry waits this long; each further one twice as long (plus jitter).
    pub first_backoff: Duration,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            idle_timeout: Duration::from_secs(60),
            max_retries: 3,
            first_backoff: Duration::from_millis(500),
        }
    }
}

/// A chat completions client.
pub struct OpenAiProvider {
    client: reqwest::Client,
    config: OpenAiConfig,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.idle_timeout)
            .build()
            .map_err(|e| ProviderError::Invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { client, config })
    }

    fn request_body(request: &ModelRequest) -> Value {
        let mut messages = Vec::new();
        if let Some(system) = &request.system_prompt {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.extend(request.messages.iter().filter_map(message_json));
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
            body["max_tokens"] = json!(max_tokens);
        }
        body
    }
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
        let call = Call {
            client: self.client.clone(),
            config: self.config.clone(),
            body: Self::request_body(&request),
            attempt: 0,
            events: None,
            pending: VecDeque::new(),
            reply: Reply::default(),
            done: false,
        };
        futures::stream::unfold(call, |mut call| async move {
            let next = call.next().await?;
            Some((next, call))
        })
        .boxed()
    }
}

/// One model call in progress.
struct Call {
    client: reqwest::Client,
    config: OpenAiConfig,
    body: Value,
    attempt: u32,
    /// The SSE events of the response, once it has started.
    events: Option<BoxStream<'static, Result<Event, String>>>,
    pending: VecDeque<Result<ProviderEvent, ProviderError>>,
    reply: Reply,
    done: bool,
}

/// What the reply has said so far.
#[derive(Default)]
struct Reply {
    /// Tool calls by their index in the response: id, name, arguments so far.
    tool_calls: Vec<(String, String, String)>,
    finish_reason: Option<String>,
}

impl Call {
    async fn next(&mut self) -> Option<Result<ProviderEvent, ProviderError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            if self.events.is_none() {
                if let Err(error) = self.connect().await {
                    self.done = true;
                    return Some(Err(error));
                }
                continue;
            }
            let events = self.events.as_mut().expect("connected");
            match tokio::time::timeout(self.config.idle_timeout, events.next()).await {
                Err(_) => {
                    self.done = true;
                    let secs = self.config.idle_timeout.as_secs_f64();
                    return Some(Err(ProviderError::Upstream(format!(
                        "the server sent nothing for {secs} s"
                    ))));
                }
                Ok(None) => {
                    self.done = true;
                    match self.reply.finish_reason.take() {
                        // Some servers end without [DONE] after a finish reason: the reply is whole.
                        Some(reason) => self.finish(reason),
                        None => self.pending.push_back(Err(ProviderError::Upstream(
                            "the connection closed before the reply was complete".into(),
                        ))),
                    }
                }
                Ok(Some(Err(error))) => {
                    self.done = true;
                    return Some(Err(ProviderError::Upstream(format!(
                        "the reply stream broke: {error}"
                    ))));
                }
                Ok(Some(Ok(event))) => self.on_event(&event),
            }
        }
    }

    /// Sends the request; on 429 or 5xx queues a Retrying event and waits, up to the limit.
    async fn connect(&mut self) -> Result<(), ProviderError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut request = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(self.body.to_string());
        if let Some(key) = &self.config.api_key {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| {
                    ProviderError::Invalid("the API key is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        let response = match tokio::time::timeout(self.config.idle_timeout, request.send()).await {
            Err(_) => {
                return Err(ProviderError::Upstream(format!(
                    "no response from {url} in time"
                )));
            }
            Ok(Err(error)) => {
                return self
                    .retry_or(format!("cannot reach {url}: {}", without_url(&error)))
                    .await;
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            let events = response
                .bytes_stream()
                .eventsource()
                .map(|event| event.map_err(|e| e.to_string()));
            self.events = Some(events.boxed());
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        let message = format!("HTTP {}: {}", status.as_u16(), error_message(&body));
        if status.as_u16() == 429 || status.is_server_error() {
            self.retry_or(message).await
        } else {
            Err(ProviderError::Upstream(message))
        }
    }

    async fn retry_or(&mut self, reason: String) -> Result<(), ProviderError> {
        if self.attempt >= self.config.max_retries {
            return Err(ProviderError::Upstream(format!(
                "{reason} (after {} retries)",
                self.attempt
            )));
        }
        self.attempt += 1;
        let base = self.config.first_backoff.as_millis() as u64 * (1 << (self.attempt - 1));
        let delay_ms = base + jitter(base / 4 + 1);
        self.pending.push_back(Ok(ProviderEvent::Retrying {
            attempt: self.attempt,
            delay_ms,
            reason,
        }));
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok(())
    }

    fn on_event(&mut self, event: &Event) {
        let data = event.data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            self.done = true;
            let reason = self
                .reply
                .finish_reason
                .take()
                .unwrap_or_else(|| "stop".into());
            self.finish(reason);
            return;
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(error) => {
                self.done = true;
                self.pending.push_back(Err(ProviderError::Upstream(format!(
                    "an unreadable event from the server: {error}"
                ))));
                return;
            }
        };
        if let Some(error) = chunk.error {
            self.done = true;
            self.pending
                .push_back(Err(ProviderError::Upstream(error_text(&error))));
            return;
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                self.on_delta(delta);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.reply.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            self.pending.push_back(Ok(ProviderEvent::Usage(UsageInfo {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cached_tokens: usage
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                ..Default::default()
            })));
        }
    }

    fn on_delta(&mut self, delta: Delta) {
        if let Some(text) = delta
            .reasoning_content
            .or(delta.reasoning)
            .filter(|t| !t.is_empty())
        {
            self.pending
                .push_back(Ok(ProviderEvent::ReasoningDelta(text)));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.pending.push_back(Ok(ProviderEvent::TextDelta(text)));
        }
        for call in delta.tool_calls.into_iter().flatten() {
            let index = call.index.unwrap_or(self.reply.tool_calls.len());
            while self.reply.tool_calls.len() <= index {
                self.reply.tool_calls.push(Default::default());
            }
            let function = call.function.unwrap_or_default();
            let slot = &mut self.reply.tool_calls[index];
            if slot.0.is_empty() {
                slot.0 = call.id.unwrap_or_else(|| format!("call_{index}"));
                slot.1 = function.name.clone().unwrap_or_default();
                self.pending.push_back(Ok(ProviderEvent::ToolCallStarted {
                    id: slot.0.clone(),
                    name: slot.1.clone(),
                }));
            }
            if let Some(arguments) = function.arguments.filter(|a| !a.is_empty()) {
                slot.2.push_str(&arguments);
                self.pending
                    .push_back(Ok(ProviderEvent::ToolArgumentsDelta {
                        id: slot.0.clone(),
                        delta: arguments,
                    }));
            }
        }
    }

    /// Completes the tool calls and finishes the reply.
    fn finish(&mut self, stop_reason: String) {
        for (id, name, arguments) in std::mem::take(&mut self.reply.tool_calls) {
            let arguments = if arguments.is_empty() {
                "{}".to_owned()
            } else {
                arguments
            };
            self.pending.push_back(Ok(ProviderEvent::ToolCallReady {
                id,
                name,
                arguments,
            }));
        }
        self.pending
            .push_back(Ok(ProviderEvent::Finished { stop_reason }));
    }
}

/// A small pseudo-random number below `bound`, from the clock: retries of many clients spread.
fn jitter(bound: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos) % bound
}

/// An HTTP error without the URL (which may hold credentials in user-info).
fn without_url(error: &reqwest::Error) -> String {
    let mut error = error.to_string();
    if let Some(at) = error.find(" for url (") {
        error.truncate(at);
    }
    error
}

/// The provider's own message from an error body, or the body itself.
fn error_message(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => value
            .get("error")
            .map(error_text)
            .unwrap_or_else(|| body.trim().to_owned()),
        Err(_) => body.trim().chars().take(500).collect(),
    }
}

fn error_text(error: &Value) -> String {
    match error {
        Value::String(message) => message.clone(),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| other.to_string()),
    }
}

/// One streamed chunk, read leniently: every field may be missing or null.
#[derive(Deserialize)]
struct Chunk {
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
