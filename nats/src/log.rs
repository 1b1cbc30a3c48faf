//! A session's log read back from a JetStream stream, in order, following it as it grows.
//!
//! An ordered consumer (ephemeral, flow-controlled, recreated by the client after a gap)
//! delivers the session's subject from its first message. Each message is checked to carry the
//! next ordinal: a republished event (older than the duplicate window) is skipped, a missing
//! one is an error, never a silent gap.

use async_nats::jetstream::{
    Message,
    consumer::{DeliverPolicy, pull},
};
use futures::StreamExt;
use prost::Message as _;
use reel_engine::LogEntry;
use reel_proto::rpc::{BackendEventFrame, RpcLine, rpc_line::Frame};

use crate::{
    connection::{NatsError, ORDINAL_HEADER, connect, last_ordinal},
    target::{Encoding, NatsTarget},
};

/// A session's events in a stream, from the first on.
pub struct JetStreamLog {
    messages: pull::Ordered,
    encoding: Encoding,
    subject: String,
    /// The session's last ordinal in the stream when it was opened.
    held: u64,
    /// The ordinal the next event must have.
    next: u64,
}

impl JetStreamLog {
    /// Opens session `session_id`'s events in `target`'s stream, which must exist.
    pub async fn open(target: &NatsTarget, session_id: &str) -> Result<Self, NatsError> {
        let jetstream = connect(target, session_id).await?;
        let stream_error = |message: String| NatsError::Stream {
            stream: target.stream.clone(),
            message,
        };
        let mut stream = jetstream
            .get_stream(&target.stream)
            .await
            .map_err(|e| stream_error(e.to_string()))?;
        let subject = target.subject(session_id);
        let held = last_ordinal(&mut stream, &subject).await?;
        let messages = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subject.clone(),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| stream_error(format!("cannot read {subject}: {e}")))?
            .messages()
            .await
            .map_err(|e| stream_error(format!("cannot read {subject}: {e}")))?;
        Ok(Self {
            messages,
            encoding: target.encoding,
            subject,
            held,
            next: 1,
        })
    }

    /// The session's last ordinal in the stream when it was opened (0: none yet).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The next event, waiting for it to be published.
    pub async fn next(&mut self) -> Result<LogEntry, NatsError> {
        loop {
            let message = match self.messages.next().await {
                Some(Ok(message)) => message,
                Some(Err(error)) => return Err(self.failed(error.to_string())),
                None => return Err(self.failed("the consumer ended".to_owned())),
            };
            let entry = self.decode(&message)?;
            if entry.ordinal < self.next {
                // Published again after the duplicate window: the stream holds it twice.
                continue;
            }
            if entry.ordinal > self.next {
                return Err(self.failed(format!(
                    "event {} is missing: the next message holds event {}",
                    self.next, entry.ordinal
                )));
            }
            self.next += 1;
            return Ok(entry);
        }
    }

    /// The log entry a message holds.
    fn decode(&self, message: &Message) -> Result<LogEntry, NatsError> {
        let ordinal_header = message
            .headers
            .as_ref()
            .and_then(|h| h.get(ORDINAL_HEADER))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        let frame = match self.encoding {
            Encoding::Proto => {
                BackendEventFrame::decode(message.payload.as_ref()).map_err(|e| e.to_string())
            }
            Encoding::Json => serde_json::from_slice::<RpcLine>(&message.payload)
                .map_err(|e| e.to_string())
                .and_then(|line| match line.frame {
                    Some(Frame::BackendEvent(frame)) => Ok(frame),
                    _ => Err("not a backendEvent frame".to_owned()),
                }),
        };
        let frame = frame
            .map_err(|e| self.failed(format!("event {ordinal_header} cannot be read: {e}")))?;
        let event = frame
            .payload
            .ok_or_else(|| self.failed(format!("event {} has no payload", frame.ordinal)))?;
        let recorded_at_ms = message.info().map_or(0, |info| {
            u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
        });
        Ok(LogEntry {
            ordinal: frame.ordinal,
            recorded_at_ms,
            event,
        })
    }

    fn failed(&self, message: String) -> NatsError {
        NatsError::Read {
            subject: self.subject.clone(),
            message,
        }
    }
}
