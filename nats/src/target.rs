//! Where a JetStream sink publishes: `nats://HOST:PORT/STREAM[?OPTIONS]`, options
//! `subject_prefix=P`, `encoding=json|proto`, and for a stream the sink creates,
//! `retention=limits|interest|workqueue`, `storage=file|memory`, `max_age=DURATION` and
//! `replicas=N`.

use std::time::Duration;

use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};

/// How each event is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The `backendEvent` frame's JSON, as stdout writes it.
    Json,
    /// The event's `reel.chat.v1` log entry as protobuf bytes (`Any` payload).
    Proto,
}

/// What is wrong with a `nats://` URI.
#[derive(Debug, thiserror::Error)]
pub enum UriError {
    #[error("{0:?} is not a nats:// URI")]
    NotNats(String),
    #[error("{0:?}: name the stream, nats://HOST:PORT/STREAM")]
    NoStream(String),
    #[error("{0:?}: no server")]
    NoServer(String),
    #[error("{0:?}: the stream name must be ASCII letters, digits, '_' or '-'")]
    StreamName(String),
    #[error(
        "{uri:?}: {pair:?} is not an option (subject_prefix=NAME, encoding=json|proto, retention=limits|interest|workqueue, storage=file|memory, max_age=DURATION, replicas=1..5)"
    )]
    Option { uri: String, pair: String },
}

/// A JetStream sink's server, stream and subjects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsTarget {
    /// `HOST:PORT`.
    pub server: String,
    pub stream: String,
    /// Subjects are `PREFIX.SESSION.events`.
    pub prefix: String,
    pub encoding: Encoding,
    /// How a stream the sink creates keeps messages.
    pub retention: RetentionPolicy,
    pub storage: StorageType,
    /// How long a created stream keeps a message (zero: no limit).
    pub max_age: Duration,
    pub replicas: usize,
}

impl NatsTarget {
    /// Parses `uri`; an error says what is wrong with it.
    pub fn parse(uri: &str) -> Result<Self, UriError> {
        let rest = uri
            .strip_prefix("nats://")
            .ok_or_else(|| UriError::NotNats(uri.to_owned()))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (server, stream) = path
            .split_once('/')
            .ok_or_else(|| UriError::NoStream(uri.to_owned()))?;
        if server.is_empty() {
            return Err(UriError::NoServer(uri.to_owned()));
        }
        let plain = |name: &str| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !plain(stream) {
            return Err(UriError::StreamName(uri.to_owned()));
        }
        let mut target = Self {
            server: server.to_owned(),
            stream: stream.to_owned(),
            prefix: "reel".to_owned(),
            encoding: Encoding::Json,
            retention: RetentionPolicy::Limits,
            storage: StorageType::File,
            max_age: Duration::ZERO,
            replicas: 1,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("subject_prefix", prefix)) if plain(prefix) => {
                    target.prefix = prefix.to_owned();
                }
                Some(("encoding", "json")) => target.encoding = Encoding::Json,
                Some(("encoding", "proto")) => target.encoding = Encoding::Proto,
                Some(("retention", "limits")) => target.retention = RetentionPolicy::Limits,
                Some(("retention", "interest")) => target.retention = RetentionPolicy::Interest,
                Some(("retention", "workqueue")) => {
                    target.retention = RetentionPolicy::WorkQueue;
                }
                Some(("storage", "file")) => target.storage = StorageType::File,
                Some(("storage", "memory")) => target.storage = StorageType::Memory,
                Some(("max_age", age)) if humantime::parse_duration(age).is_ok() => {
                    target.max_age = humantime::parse_duration(age).unwrap_or_default();
                }
                Some(("replicas", n)) if matches!(n.parse(), Ok(1..=5)) => {
                    target.replicas = n.parse().unwrap_or(1);
                }
                _ => {
                    return Err(UriError::Option {
                        uri: uri.to_owned(),
                        pair: pair.to_owned(),
                    });
                }
            }
        }
        Ok(target)
    }

    /// The stream the sink creates when it is missing: the sessions' subjects, kept as the
    /// options say.
    pub fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream.clone(),
            subjects: vec![format!("{}.*.events", self.prefix)],
            retention: self.retention,
            storage: self.storage,
            max_age: self.max_age,
            num_replicas: self.replicas,
            ..Default::default()
        }
    }

    /// The subject session `session_id`'s events go to.
    pub fn subject(&self, session_id: &str) -> String {
        format!("{}.{session_id}.events", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_server_stream_and_options() {
        let target =
            NatsTarget::parse("nats://127.0.0.1:4222/REEL?encoding=proto&subject_prefix=app")
                .unwrap();
        assert_eq!(target.server, "127.0.0.1:4222");
        assert_eq!(target.stream, "REEL");
        assert_eq!(target.encoding, Encoding::Proto);
        assert_eq!(target.subject("s1"), "app.s1.events");
        assert_eq!(target.retention, RetentionPolicy::Limits);
        let kept = NatsTarget::parse(
            "nats://h:1/S?retention=interest&storage=memory&max_age=1h&replicas=3",
        )
        .unwrap()
        .stream_config();
        assert_eq!(kept.retention, RetentionPolicy::Interest);
        assert_eq!(kept.storage, StorageType::Memory);
        assert_eq!(kept.max_age, Duration::from_secs(3600));
        assert_eq!(
            (kept.num_replicas, kept.subjects[0].as_str()),
            (3, "reel.*.events")
        );
        for bad in [
            "nats://127.0.0.1:4222",
            "nats:///S",
            "nats://h:1/a.b",
            "nats://h:1/S?x=1",
            "nats://h:1/S?retention=forever",
            "nats://h:1/S?storage=disk",
            "nats://h:1/S?max_age=soon",
            "nats://h:1/S?replicas=9",
            "http://h/S",
        ] {
            assert!(NatsTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
