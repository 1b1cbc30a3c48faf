//! Connecting to a JetStream server, and what can go wrong with it.

use std::time::Duration;

use async_nats::{
    ConnectOptions,
    jetstream::{self, Context, stream},
};
use reel_engine::SinkError;

use crate::target::NatsTarget;

/// How long connecting, and each acknowledgement, may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The header with the event's ordinal: read back when a sink starts and when a log is read.
pub(crate) const ORDINAL_HEADER: &str = "Reel-Ordinal";

/// Why a JetStream sink or log could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    #[error("cannot connect to NATS at {server}: {source}")]
    Connect {
        server: String,
        source: async_nats::ConnectError,
    },
    #[error("JetStream stream {stream}: {message}")]
    Stream { stream: String, message: String },
    #[error("session id {0:?} cannot be part of a NATS subject (it has '.', '*', '>' or a space)")]
    Subject(String),
    #[error("cannot publish event {ordinal} to JetStream: {message}")]
    Publish { ordinal: u64, message: String },
    #[error("cannot read {subject}: {message}")]
    Read { subject: String, message: String },
    #[error("cannot read the session's store to catch the stream up: {0}")]
    Store(String),
}

impl From<NatsError> for SinkError {
    fn from(error: NatsError) -> Self {
        SinkError::Io(std::io::Error::other(error.to_string()))
    }
}

/// JetStream at `target`'s server, for session `session_id` (whose id must fit in a subject).
pub(crate) async fn connect(target: &NatsTarget, session_id: &str) -> Result<Context, NatsError> {
    if session_id.contains(['.', '*', '>', ' ', '\t']) {
        return Err(NatsError::Subject(session_id.to_owned()));
    }
    let client = ConnectOptions::new()
        .connection_timeout(TIMEOUT)
        .connect(target.server.as_str())
        .await
        .map_err(|source| NatsError::Connect {
            server: target.server.clone(),
            source,
        })?;
    Ok(jetstream::new(client))
}

/// The ordinal of the last message on `subject` (0 when there is none).
pub(crate) async fn last_ordinal(
    stream: &mut stream::Stream,
    subject: &str,
) -> Result<u64, NatsError> {
    let unreadable = |message: String| NatsError::Read {
        subject: subject.to_owned(),
        message,
    };
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => message
            .headers
            .get(ORDINAL_HEADER)
            .and_then(|value| value.as_str().parse().ok())
            .ok_or_else(|| unreadable(format!("its last message has no {ORDINAL_HEADER} header"))),
        Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(error) => Err(unreadable(error.to_string())),
    }
}
