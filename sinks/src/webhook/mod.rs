//! `--sink https://...`: the session's frames POSTed to a webhook, batched, signed, in order.
//!
//! Each POST's body is JSON lines, the frames `exec:` gets (the log's own events among them, as
//! `backendEvent` frames with their ordinals). One POST is in flight at a time, so the endpoint
//! sees frames in order. A POST that fails for a reason that may pass (no connection, a time
//! out, 408, 429, 5xx) is retried with the same `webhook-id` after a growing pause (or the
//! endpoint's `Retry-After`), for up to `retry_for`; then, or at once for any other answer
//! (a 4xx says retrying cannot help; a redirect is never followed), the sink fails and the session reports `sink_failed`
//! while the run goes on.
//!
//! Frames wait in a bounded queue while a POST is in flight or retried, so a slow endpoint does
//! not slow the session until the queue is full; then the session waits for it (back-pressure),
//! and memory stays bounded however long the endpoint is down.

mod signature;
mod target;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use reel_engine::{Acks, OutputBatch, Sink, SinkError, new_id};
use reqwest::{StatusCode, header};
use tokio::sync::mpsc;

pub use target::{SigningKey, WebhookTarget, WebhookUriError};

use crate::jsonl::encode;

/// Fan-out batches that may wait while a POST is in flight.
const QUEUE: usize = 256;
/// A POST's body grows to about this size at most (one frame may be larger).
const MAX_BODY: usize = 4 * 1024 * 1024;
/// How long one POST may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first pause before a retry; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const MAX_PAUSE: Duration = Duration::from_secs(10);

/// Posts a session's frames to a webhook.
pub struct WebhookSink {
    target: WebhookTarget,
    client: reqwest::Client,
    session_id: String,
}

/// How one POST went, when it did not succeed.
enum Failure {
    /// May pass: try again, after `after` when the endpoint said.
    Transient {
        message: String,
        after: Option<Duration>,
    },
    /// Will not pass by trying again.
    Refused(String),
}

impl WebhookSink {
    /// The sink for session `session_id` posting to `target`.
    pub fn new(target: &WebhookTarget, session_id: &str) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("reel/", env!("CARGO_PKG_VERSION")))
            .timeout(REQUEST_TIMEOUT)
            // A redirect would hand the frames and their signature to another address: it is
            // a failure that names where it pointed, never followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            target: target.clone(),
            client,
            session_id: session_id.to_owned(),
        })
    }

    /// Posts what the queue holds, a batch at a time, until the queue closes.
    async fn post_all(self, mut queue: mpsc::Receiver<OutputBatch>) -> Result<(), SinkError> {
        while let Some(first) = queue.recv().await {
            // What has come meanwhile joins, up to a POST's worth (a batch of the fan-out is
            // any number of frames: an event's backendEvent and ui events, or many events).
            let (mut lines, mut count) = (Vec::new(), 0);
            let mut next = Some(first);
            while let Some(batch) = next.take() {
                let start = lines.len();
                for output in batch.iter() {
                    encode(output, true, &mut lines)?;
                }
                count += line_count(&lines[start..]);
                if count < self.target.batch && lines.len() < MAX_BODY {
                    next = queue.try_recv().ok();
                }
            }
            // Then POSTs of at most `batch` frames each, in order.
            let mut rest = lines.as_slice();
            while !rest.is_empty() {
                let cut = post_end(rest, self.target.batch);
                self.deliver(Bytes::copy_from_slice(&rest[..cut])).await?;
                rest = &rest[cut..];
            }
        }
        Ok(())
    }

    /// POSTs `body` until the endpoint takes it, retrying for up to `retry_for`.
    async fn deliver(&self, body: Bytes) -> Result<(), SinkError> {
        let id = format!("msg_{}", new_id());
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (message, after) = match self.post(&id, body.clone()).await {
                Ok(()) => return Ok(()),
                Err(Failure::Refused(message)) => return Err(self.failed(&message)),
                Err(Failure::Transient { message, after }) => (message, after),
            };
            let wait = after.unwrap_or(pause).min(MAX_PAUSE);
            if started.elapsed() + wait > self.target.retry_for {
                let given_up = format!(
                    "{message}; gave up after {attempt} attempts in {:.1} s (retry_for={})",
                    started.elapsed().as_secs_f64(),
                    humantime::format_duration(self.target.retry_for)
                );
                return Err(self.failed(&given_up));
            }
            tracing::warn!(
                "webhook {}: {message}; retrying in {} ms",
                self.target.shown(),
                wait.as_millis()
            );
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// One POST of `body` as message `id`.
    async fn post(&self, id: &str, body: Bytes) -> Result<(), Failure> {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut request = self
            .client
            .post(self.target.url.clone())
            .header(header::CONTENT_TYPE, "application/x-ndjson")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp)
            .header("reel-session", &self.session_id);
        if let Some(key) = &self.target.key {
            request = request.header(
                "webhook-signature",
                signature::sign(key, id, timestamp, &body),
            );
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| Failure::Transient {
                // The URL is in every message of this sink already.
                message: reel_engine::error_chain(&e.without_url()),
                after: None,
            })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        if status.is_redirection() {
            let location = response
                .headers()
                .get(header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(Failure::Refused(format!(
                "the endpoint answered {status}, redirecting to {location:?}; reel does not follow a webhook's redirects (the frames and their signature would go elsewhere): give the URL it redirects to"
            )));
        }
        let message = format!("the endpoint answered {status}");
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            let after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_secs);
            return Err(Failure::Transient { message, after });
        }
        Err(Failure::Refused(message))
    }

    fn failed(&self, message: &str) -> SinkError {
        SinkError::Io(std::io::Error::other(format!(
            "webhook {}: {message}",
            self.target.shown()
        )))
    }
}

/// How many frames (lines) `body` holds.
fn line_count(body: &[u8]) -> usize {
    body.iter().filter(|&&b| b == b'\n').count()
}

/// Where the first POST of `lines` ends: after at most `batch` lines, and before
/// [`MAX_BODY`] bytes unless its first line alone is larger.
fn post_end(lines: &[u8], batch: usize) -> usize {
    let mut end = 0;
    for (taken, newline) in lines
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(at, _)| at + 1)
        .enumerate()
    {
        if taken == batch || (end > 0 && newline > MAX_BODY) {
            break;
        }
        end = newline;
    }
    if end == 0 { lines.len() } else { end }
}

#[async_trait::async_trait]
impl Sink for WebhookSink {
    fn name(&self) -> String {
        format!("webhook {}", self.target.shown())
    }

    async fn run(
        self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let (queue, queued) = mpsc::channel(QUEUE);
        let mut poster = tokio::spawn(self.post_all(queued));
        loop {
            tokio::select! {
                batch = input.recv() => match batch {
                    // A send fails when the poster has stopped: its result says why.
                    Some(batch) => if queue.send(batch).await.is_err() { break },
                    None => break,
                },
                ended = &mut poster => return ended.unwrap_or_else(|e| Err(joined(e))),
            }
        }
        drop(queue);
        poster.await.unwrap_or_else(|e| Err(joined(e)))
    }
}

fn joined(error: tokio::task::JoinError) -> SinkError {
    SinkError::Io(std::io::Error::other(format!(
        "the webhook poster stopped: {error}"
    )))
}

#[cfg(test)]
mod post_tests {
    use super::*;

    #[test]
    fn a_post_holds_at_most_batch_frames_and_stays_under_the_body_limit() {
        let lines = b"a\nbb\nccc\n";
        assert_eq!(post_end(lines, 1), 2);
        assert_eq!(post_end(lines, 2), 5);
        assert_eq!(post_end(lines, 256), lines.len());
        let big = vec![b'x'; MAX_BODY];
        let mut two = big.clone();
        two.push(b'\n');
        let first = two.len();
        two.extend_from_slice(b"y\n");
        assert_eq!(post_end(&two, 256), first, "a frame past the limit waits");
    }
}
