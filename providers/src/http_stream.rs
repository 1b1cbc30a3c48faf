//! One streamed model call over HTTP and SSE, for every provider that speaks SSE.
//!
//! The parts all such APIs share live here: sending the request with the key in a sensitive
//! header, retrying HTTP 429 and 5xx with exponential backoff and jitter (each retry an event),
//! failing a call whose server goes quiet for longer than the idle timeout, keeping what arrived
//! before a connection dropped, and reading error bodies. What an event means is the
//! [`Dialect`]'s business (OpenAI chat completions, Anthropic messages).

use std::{collections::VecDeque, time::Duration};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{StreamExt, stream::BoxStream};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use reel_engine::{ProviderError, ProviderEvent, ProviderStream};

use crate::{
    secrets::Secrets,
    sse_limit::{self, BodyError},
};

/// The most of an error response's body reel reads (the provider's message is at its start).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How an HTTP provider is reached.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Sent in the provider's key header; `None` for local servers that need none.
    pub api_key: Option<String>,
    /// Longest wait for the response to start, and between two pieces of it.
    pub idle_timeout: Duration,
    /// Retries after HTTP 429 or 5xx.
    pub max_retries: u32,
    /// The first retry waits this long; each further one twice as long (plus jitter).
    pub first_backoff: Duration,
}

impl HttpConfig {
    /// A config for `base_url` with the usual limits.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            idle_timeout: Duration::from_secs(60),
            max_retries: 3,
            first_backoff: Duration::from_millis(500),
        }
    }

    /// The secrets of this config (the key, and the base URL's password and query values).
    pub fn secrets(&self) -> Secrets {
        Secrets::new(self.api_key.as_deref(), &self.base_url)
    }

    /// `path` under the base URL.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base_url.trim_end_matches('/'))
    }

    /// The HTTP client every call of a provider shares.
    pub(crate) fn client(&self) -> Result<reqwest::Client, ProviderError> {
        reqwest::Client::builder()
            .connect_timeout(self.idle_timeout)
            .build()
            .map_err(|e| ProviderError::Invalid(format!("cannot build the HTTP client: {e}")))
    }
}

/// Events of a reply not yet handed out.
pub(crate) type Pending = VecDeque<Result<ProviderEvent, ProviderError>>;

/// What one streaming API's events mean.
pub(crate) trait Dialect: Send + 'static {
    /// Reads one SSE event, queueing what it says. Returns true when the reply is complete
    /// (or failed): nothing more is read.
    fn on_event(&mut self, event: &Event, out: &mut Pending) -> bool;

    /// The connection closed before [`Dialect::on_event`] said the reply was complete.
    fn on_close(&mut self, out: &mut Pending) {
        out.push_back(Err(ProviderError::Upstream(
            "the connection closed before the reply was complete".into(),
        )));
    }
}

/// A request ready to send: where, with which headers (the key among them, sensitive) and body.
pub(crate) struct HttpRequest {
    pub url: String,
    pub headers: HeaderMap,
    pub body: String,
}

impl HttpRequest {
    /// A JSON POST to `url`; `key` is the header that carries the API key and its value
    /// (`("authorization", "Bearer ...")`), marked sensitive so it is never logged.
    pub(crate) fn json(
        url: String,
        body: &Value,
        key: Option<(&'static str, String)>,
    ) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some((name, value)) = key {
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ProviderError::Invalid("the API key is not a valid header value".into())
            })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static(name), value);
        }
        Ok(Self {
            url,
            headers,
            body: body.to_string(),
        })
    }
}

/// Streams one call: `request` sent by `client`, its events read by `dialect`. Every event and
/// error is passed through `secrets` on its way out.
pub(crate) fn stream_call<D: Dialect>(
    client: reqwest::Client,
    config: HttpConfig,
    request: Result<HttpRequest, ProviderError>,
    dialect: D,
    secrets: Secrets,
) -> ProviderStream {
    let call = Call {
        client,
        config,
        request,
        attempt: 0,
        events: None,
        pending: VecDeque::new(),
        dialect,
        done: false,
    };
    futures::stream::unfold(call, |mut call| async move {
        let next = call.next().await?;
        Some((next, call))
    })
    .map(move |event| redact(&secrets, event))
    .boxed()
}

/// `event` with every secret taken out of its text.
fn redact(
    secrets: &Secrets,
    event: Result<ProviderEvent, ProviderError>,
) -> Result<ProviderEvent, ProviderError> {
    let clean = |text: String| match secrets.redact(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(clean) => clean,
    };
    Ok(match event {
        Err(ProviderError::Upstream(m)) => return Err(ProviderError::Upstream(clean(m))),
        Err(ProviderError::Invalid(m)) => return Err(ProviderError::Invalid(clean(m))),
        Err(ProviderError::Crashed(m)) => return Err(ProviderError::Crashed(clean(m))),
        Ok(ProviderEvent::TextDelta(t)) => ProviderEvent::TextDelta(clean(t)),
        Ok(ProviderEvent::ReasoningDelta(t)) => ProviderEvent::ReasoningDelta(clean(t)),
        Ok(ProviderEvent::ToolArgumentsDelta { id, delta }) => ProviderEvent::ToolArgumentsDelta {
            id,
            delta: clean(delta),
        },
        Ok(ProviderEvent::ToolCallReady {
            id,
            name,
            arguments,
        }) => ProviderEvent::ToolCallReady {
            id,
            name,
            arguments: clean(arguments),
        },
        Ok(ProviderEvent::Retrying {
            attempt,
            delay_ms,
            reason,
        }) => ProviderEvent::Retrying {
            attempt,
            delay_ms,
            reason: clean(reason),
        },
        Ok(other) => other,
    })
}

/// One model call in progress.
struct Call<D> {
    client: reqwest::Client,
    config: HttpConfig,
    request: Result<HttpRequest, ProviderError>,
    attempt: u32,
    /// The SSE events of the response, once it has started.
    events: Option<BoxStream<'static, Result<Event, EventStreamError<BodyError>>>>,
    pending: Pending,
    dialect: D,
    done: bool,
}

impl<D: Dialect> Call<D> {
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
                    self.dialect.on_close(&mut self.pending);
                }
                Ok(Some(Err(error))) => {
                    self.done = true;
                    // A transport failure says itself; the others are the stream's own words.
                    let why = match error {
                        EventStreamError::Transport(body) => body.to_string(),
                        other => other.to_string(),
                    };
                    return Some(Err(ProviderError::Upstream(format!(
                        "the reply broke off: {why}"
                    ))));
                }
                Ok(Some(Ok(event))) => {
                    self.done = self.dialect.on_event(&event, &mut self.pending);
                }
            }
        }
    }

    /// Sends the request; on 429 or 5xx queues a Retrying event and waits, up to the limit.
    async fn connect(&mut self) -> Result<(), ProviderError> {
        let request = self.request.as_ref().map_err(Clone::clone)?;
        let url = request.url.clone();
        let send = self
            .client
            .post(&url)
            .headers(request.headers.clone())
            .body(request.body.clone())
            .send();
        let response = match tokio::time::timeout(self.config.idle_timeout, send).await {
            Err(_) => {
                return Err(ProviderError::Upstream(format!(
                    "no response from {url} in time"
                )));
            }
            Ok(Err(error)) => {
                return self
                    .retry_or(format!("cannot reach {url}: {}", error_chain(&error)))
                    .await;
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            let body = sse_limit::bounded(response.bytes_stream(), sse_limit::MAX_EVENT_BYTES);
            self.events = Some(body.eventsource().boxed());
            return Ok(());
        }
        let body = error_body(response).await;
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
}

/// A small pseudo-random number below `bound`, from the clock: retries of many clients spread.
fn jitter(bound: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos) % bound
}

/// The start of an error response's body, at most [`MAX_ERROR_BODY`] bytes of it.
async fn error_body(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = MAX_ERROR_BODY - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// An error with everything that caused it ("error sending request: client error (Connect):
/// tcp connect error: Connection refused (os error 111)"), URLs left out (they may hold
/// credentials; the caller names the URL), and a word on what to do when the cause is a common
/// one.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(error) = next {
        let mut text = error.to_string();
        if let Some(at) = text.find(" for url (") {
            text.truncate(at);
        }
        if !parts.last().is_some_and(|last| last.contains(&text)) {
            parts.push(text);
        }
        next = error.source();
    }
    let chain = parts.join(": ");
    let root = parts.last().map(|p| p.to_lowercase()).unwrap_or_default();
    let hint = if root.contains("connection refused") {
        " (nothing listens there: is the server running, on that port?)"
    } else if root.contains("dns error") || root.contains("failed to lookup") {
        " (the host name does not resolve: check the base URL)"
    } else if root.contains("certificate") {
        " (the server's TLS certificate is not trusted)"
    } else if root.contains("connection closed")
        || root.contains("connection reset")
        || root.contains("end of file before message")
        || root.contains("unexpected eof")
    {
        " (the server closed the connection in the middle of the reply)"
    } else if root.contains("timed out") {
        " (no answer in time)"
    } else {
        ""
    };
    format!("{chain}{hint}")
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

/// The text of an `error` object: its message, and its type when it has one
/// (`overloaded_error: Overloaded`).
pub(crate) fn error_text(error: &Value) -> String {
    match error {
        Value::String(message) => message.clone(),
        other => {
            let message = other.get("message").and_then(Value::as_str);
            let kind = other.get("type").and_then(Value::as_str);
            match (kind, message) {
                (Some(kind), Some(message)) => format!("{kind}: {message}"),
                (None, Some(message)) => message.to_owned(),
                _ => other.to_string(),
            }
        }
    }
}
