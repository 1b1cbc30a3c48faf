//! `--sink URI` (repeatable) and a command file's `sinks:`: more outputs of a session, named by
//! URI and checked before anything runs.
//!
//! `exec:COMMAND` runs COMMAND (split into words as a shell would, quotes respected, but with
//! no shell) with the session's frames on its stdin; `nats://HOST:PORT/STREAM` keeps the
//! session's log in a JetStream stream (see the `reel-nats` crate).

use anyhow::{Context, bail};
use reel_engine::{SessionCatalog, Sink};
use reel_nats::{JetStreamSink, NatsTarget};
use reel_sinks::ExecSink;
use tokio::sync::watch;

/// A sink a URI names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkUri {
    /// `exec:COMMAND`: the program and its arguments.
    Exec(Vec<String>),
    /// `nats://HOST:PORT/STREAM[?subject_prefix=P&encoding=json|proto]`.
    Nats(NatsTarget),
}

impl SinkUri {
    /// The sink `uri` names; a clear error for a scheme reel has no sink for, or a bad URI.
    pub fn parse(uri: &str) -> anyhow::Result<Self> {
        if let Some(command) = uri.strip_prefix("exec:") {
            let words = shell_words::split(command)
                .with_context(|| format!("sink {uri:?}: the command's quotes do not close"))?;
            if words.is_empty() {
                bail!("sink {uri:?}: exec: needs a command, e.g. exec:\"jq -c .\"");
            }
            return Ok(Self::Exec(words));
        }
        match uri.split_once("://").map(|(scheme, _)| scheme) {
            Some("nats") => NatsTarget::parse(uri)
                .map(Self::Nats)
                .map_err(|e| anyhow::anyhow!("sink {e}")),
            Some(scheme @ ("http" | "https")) => bail!(
                "sink {uri:?}: {scheme}:// (webhook) sinks are not in this build yet; the sinks are exec:COMMAND and nats://HOST:PORT/STREAM"
            ),
            _ => bail!(
                "sink {uri:?}: not a sink URI; the sinks are exec:COMMAND and nats://HOST:PORT/STREAM"
            ),
        }
    }

    /// Starts the sink for session `session_id`, whose store (`store`, when it has one)
    /// holds its events through `stored` and has `committed` them: a JetStream sink first
    /// publishes the ones its stream lacks, then publishes no event before the store holds it.
    pub async fn start(
        &self,
        session_id: &str,
        store: Option<&mut dyn SessionCatalog>,
        stored: u64,
        committed: Option<watch::Receiver<u64>>,
    ) -> anyhow::Result<Box<dyn Sink>> {
        match self {
            Self::Exec(argv) => {
                let sink = ExecSink::spawn(argv)
                    .with_context(|| format!("sink exec: cannot start {:?}", argv[0]))?;
                Ok(Box::new(sink))
            }
            Self::Nats(target) => {
                let sink =
                    JetStreamSink::connect(target, session_id, store, stored, committed).await?;
                Ok(Box::new(sink))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_as_a_shell_would_and_unknown_schemes_are_refused() {
        assert_eq!(
            SinkUri::parse(r#"exec:jq -c '.frame' "a b""#).unwrap(),
            SinkUri::Exec(vec![
                "jq".into(),
                "-c".into(),
                ".frame".into(),
                "a b".into()
            ])
        );
        assert!(matches!(
            SinkUri::parse("nats://127.0.0.1:4222/REEL?encoding=proto"),
            Ok(SinkUri::Nats(_))
        ));
        for bad in [
            "exec:",
            "exec:'open",
            "ftp://x",
            "file.jsonl",
            "nats://127.0.0.1:4222",
            "https://example.com/hook",
        ] {
            assert!(SinkUri::parse(bad).is_err(), "{bad}");
        }
    }
}
