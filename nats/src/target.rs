//! Where a JetStream sink publishes: `nats://HOST:PORT/STREAM[?subject_prefix=P&encoding=E]`.

/// How each event is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The `backendEvent` frame's JSON, as stdout writes it.
    Json,
    /// The event's `reel.chat.v1` log entry as protobuf bytes (`Any` payload).
    Proto,
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
}

impl NatsTarget {
    /// Parses `uri`; an error says what is wrong with it.
    pub fn parse(uri: &str) -> Result<Self, String> {
        let rest = uri
            .strip_prefix("nats://")
            .ok_or_else(|| format!("{uri:?} is not a nats:// URI"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (server, stream) = path
            .split_once('/')
            .ok_or_else(|| format!("{uri:?}: name the stream, nats://HOST:PORT/STREAM"))?;
        if server.is_empty() {
            return Err(format!("{uri:?}: no server"));
        }
        let plain = |name: &str| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !plain(stream) {
            return Err(format!(
                "{uri:?}: the stream name must be ASCII letters, digits, '_' or '-'"
            ));
        }
        let mut target = Self {
            server: server.to_owned(),
            stream: stream.to_owned(),
            prefix: "reel".to_owned(),
            encoding: Encoding::Json,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("subject_prefix", prefix)) if plain(prefix) => {
                    target.prefix = prefix.to_owned();
                }
                Some(("encoding", "json")) => target.encoding = Encoding::Json,
                Some(("encoding", "proto")) => target.encoding = Encoding::Proto,
                _ => {
                    return Err(format!(
                        "{uri:?}: {pair:?} is not an option (subject_prefix=NAME, encoding=json|proto)"
                    ));
                }
            }
        }
        Ok(target)
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
        for bad in [
            "nats://127.0.0.1:4222",
            "nats:///S",
            "nats://h:1/a.b",
            "nats://h:1/S?x=1",
            "http://h/S",
        ] {
            assert!(NatsTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
