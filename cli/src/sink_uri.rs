//! `--sink URI` (repeatable) and a command file's `sinks:`: more outputs of a session, named by
//! URI and checked before anything runs.
//!
//! `exec:COMMAND` runs COMMAND (split into words as a shell would, quotes respected, but with
//! no shell) with the session's frames on its stdin; `nats://HOST:PORT/STREAM` keeps the
//! session's log in a JetStream stream (see the `reel-nats` crate); `http(s)://...` POSTs the
//! frames to a webhook (see [`reel_sinks::WebhookSink`]).

use anyhow::{Context, bail};
use reel_engine::{SessionCatalog, Sink};
use reel_nats::{JetStreamSink, NatsTarget};
use reel_otel::Traces;
use reel_sinks::{ExecSink, WebhookSink, WebhookTarget};
use tokio::sync::watch;

/// A sink a URI names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkUri {
    /// `exec:COMMAND`: the program and its arguments.
    Exec(Vec<String>),
    /// `nats://HOST:PORT/STREAM[?subject_prefix=P&encoding=json|proto]`.
    Nats(NatsTarget),
    /// `http(s)://HOST/PATH[?secret_env=NAME&batch=N&retry_for=DURATION]`.
    Webhook(WebhookTarget),
    /// OTLP traces (`--otlp-endpoint` or the `OTEL_EXPORTER_OTLP_*` variables; no URI).
    Traces(Traces),
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
            Some("http" | "https") => WebhookTarget::parse(uri)
                .map(Self::Webhook)
                .map_err(|e| anyhow::anyhow!("sink {e}")),
            _ => bail!(
                "sink {uri:?}: not a sink URI; the sinks are exec:COMMAND, nats://HOST:PORT/STREAM and http(s)://HOST/PATH (a webhook)"
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
            Self::Traces(traces) => Ok(Box::new(traces.sink(session_id))),
            Self::Webhook(target) => {
                let sink = WebhookSink::new(target, session_id)
                    .context("sink webhook: cannot build an HTTP client")?;
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
        assert!(matches!(
            SinkUri::parse("https://example.com/hook?batch=10"),
            Ok(SinkUri::Webhook(_))
        ));
        for bad in [
            "exec:",
            "exec:'open",
            "ftp://x",
            "file.jsonl",
            "nats://127.0.0.1:4222",
            "https://example.com/hook?secret_env=REEL_TEST_UNSET_SECRET",
            "https://example.com/hook?batch=none",
        ] {
            assert!(SinkUri::parse(bad).is_err(), "{bad}");
        }
    }
}
