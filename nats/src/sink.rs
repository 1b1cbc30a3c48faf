//! The JetStream sink: connects, catches the stream up with the session's store, then
//! publishes each committed event and acknowledges it once JetStream has.

use std::sync::Arc;

use async_nats::{
    HeaderMap,
    jetstream::{Context, context::PublishAckFuture},
};
use bytes::Bytes;
use prost::Message;
use reel_engine::{
    Acks, Durability, LogEntry, LogPages, OutputBatch, OutputKind, SessionCatalog, Sink, SinkError,
    error_chain,
};
use reel_proto::{
    json::{self, FrameRef, LineRef},
    rpc::BackendEventFrame,
};
use tokio::sync::{mpsc, watch};

use crate::{
    connection::{NatsError, ORDINAL_HEADER, TIMEOUT, connect, last_ordinal},
    target::{Encoding, NatsTarget},
};

/// A session's log in a JetStream stream; durable: the session waits for its acknowledgements.
pub struct JetStreamSink {
    jetstream: Context,
    target: NatsTarget,
    session_id: Arc<str>,
    subject: String,
    /// The highest ordinal the stream holds for the session.
    acknowledged: u64,
    /// What the session's store has committed: nothing is published before the store holds
    /// it, so a killed writer never leaves the stream ahead of the store.
    store_committed: Option<watch::Receiver<u64>>,
}

impl JetStreamSink {
    /// Connects to `target` for session `session_id`, creating the stream when missing, and
    /// publishes the events the session's store (`store`, with events through `stored`) holds
    /// after the last one the stream has.
    pub async fn connect(
        target: &NatsTarget,
        session_id: &str,
        store: Option<&mut dyn SessionCatalog>,
        stored: u64,
        store_committed: Option<watch::Receiver<u64>>,
    ) -> Result<Self, NatsError> {
        let jetstream = connect(target, session_id).await?;
        let stream_error = |message: String| NatsError::Stream {
            stream: target.stream.clone(),
            message,
        };
        let mut stream = match jetstream.get_or_create_stream(target.stream_config()).await {
            Ok(stream) => stream,
            Err(error) => {
                let mut message = error.to_string();
                if message.contains("overlap") {
                    message.push_str(&overlapping(&jetstream, target).await);
                }
                return Err(stream_error(message));
            }
        };
        let kept = &stream.cached_info().config;
        if (kept.retention, kept.storage) != (target.retention, target.storage) {
            // An existing stream keeps its own configuration; the URI's is for creating one.
            tracing::warn!(
                "JetStream stream {} exists with retention {:?} and storage {:?}, not as the sink URI asks",
                target.stream,
                kept.retention,
                kept.storage
            );
        }
        let subject = target.subject(session_id);
        let held = last_ordinal(&mut stream, &subject).await?;
        let mut sink = Self {
            jetstream,
            target: target.clone(),
            session_id: Arc::from(session_id),
            subject,
            acknowledged: held,
            store_committed,
        };
        if held > stored {
            tracing::warn!(
                "JetStream stream {} holds {held} events of session {session_id}, its store {stored}",
                target.stream
            );
        } else if let Some(store) = store
            && held < stored
        {
            sink.catch_up(store, stored).await?;
        }
        Ok(sink)
    }

    /// Publishes the stored events after the stream's last, through `stored`.
    async fn catch_up(
        &mut self,
        store: &mut dyn SessionCatalog,
        stored: u64,
    ) -> Result<(), NatsError> {
        let from = self.acknowledged;
        let mut pages = LogPages::new(&self.session_id, from, stored);
        loop {
            let page = pages
                .next(store)
                .await
                .map_err(|e| NatsError::Store(error_chain(&e)))?;
            if page.is_empty() {
                break;
            }
            let entries: Vec<Arc<LogEntry>> = page.into_iter().map(Arc::new).collect();
            self.publish_all(&entries).await?;
        }
        tracing::info!(
            "JetStream stream {}: published events {}..={stored} of session {} it missed",
            self.target.stream,
            from + 1,
            self.session_id
        );
        Ok(())
    }

    /// Publishes `entries` (those the stream does not hold yet) and waits for every
    /// acknowledgement.
    async fn publish_all(&mut self, entries: &[Arc<LogEntry>]) -> Result<(), NatsError> {
        let mut pending: Vec<(u64, PublishAckFuture)> = Vec::with_capacity(entries.len());
        for entry in entries.iter().filter(|e| e.ordinal > self.acknowledged) {
            let ordinal = entry.ordinal;
            let failed = |message: String| NatsError::Publish { ordinal, message };
            let mut headers = HeaderMap::new();
            headers.insert(
                "Nats-Msg-Id",
                format!("{}:{ordinal}", self.session_id).as_str(),
            );
            headers.insert(ORDINAL_HEADER, ordinal.to_string().as_str());
            let payload = self.encode(entry).map_err(|e| failed(e.to_string()))?;
            let ack = self
                .jetstream
                .publish_with_headers(self.subject.clone(), headers, payload)
                .await
                .map_err(|e| failed(e.to_string()))?;
            pending.push((ordinal, ack));
        }
        for (ordinal, ack) in pending {
            match tokio::time::timeout(TIMEOUT, ack).await {
                Ok(Ok(_)) => self.acknowledged = ordinal,
                Ok(Err(error)) => {
                    return Err(NatsError::Publish {
                        ordinal,
                        message: error.to_string(),
                    });
                }
                Err(_) => {
                    return Err(NatsError::Publish {
                        ordinal,
                        message: format!("no acknowledgement within {} s", TIMEOUT.as_secs()),
                    });
                }
            }
        }
        Ok(())
    }

    /// The message of `entry`: its `backendEvent` frame's JSON, or protobuf bytes.
    fn encode(&self, entry: &Arc<LogEntry>) -> Result<Bytes, serde_json::Error> {
        match self.target.encoding {
            Encoding::Proto => {
                let frame = BackendEventFrame {
                    ordinal: entry.ordinal,
                    name: entry.name().to_owned(),
                    payload: Some(entry.event.clone()),
                };
                Ok(Bytes::from(frame.encode_to_vec()))
            }
            Encoding::Json => {
                let line = LineRef {
                    session_id: &self.session_id,
                    request_id: "",
                    frame: FrameRef::BackendEvent(entry.backend_frame()),
                };
                json::to_string(&line).map(Bytes::from)
            }
        }
    }
}

#[async_trait::async_trait]
impl Sink for JetStreamSink {
    fn name(&self) -> String {
        format!("nats://{}/{}", self.target.server, self.target.stream)
    }

    fn durability(&self) -> Durability {
        Durability::Durable {
            acknowledged: self.acknowledged,
        }
    }

    async fn run(
        mut self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        acks: Acks,
    ) -> Result<(), SinkError> {
        while let Some(batch) = input.recv().await {
            // Every batch queued by now goes out before the acknowledgements are awaited.
            let queued = std::iter::from_fn(|| input.try_recv().ok());
            let entries: Vec<Arc<LogEntry>> = std::iter::once(batch)
                .chain(queued)
                .flat_map(|batch| {
                    batch
                        .iter()
                        .filter_map(|output| match &output.kind {
                            OutputKind::Event(committed) => Some(Arc::clone(&committed.entry)),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            let Some(last) = entries.last().map(|e| e.ordinal) else {
                continue;
            };
            if let Some(store) = &mut self.store_committed
                && store
                    .wait_for(|&committed| committed >= last)
                    .await
                    .is_err()
            {
                return Err(SinkError::Io(std::io::Error::other(
                    "the session's store failed: nothing more is published",
                )));
            }
            self.publish_all(&entries).await?;
            acks.committed(self.acknowledged);
        }
        Ok(())
    }
}

/// Which existing stream's subjects overlap the ones `target` would create its stream with,
/// and what to do about it (for the server's "subjects overlap" refusal).
async fn overlapping(jetstream: &async_nats::jetstream::Context, target: &NatsTarget) -> String {
    use futures::StreamExt;
    let ours = target.stream_config().subjects;
    let mut streams = jetstream.streams();
    while let Some(Ok(info)) = streams.next().await {
        let clash = info
            .config
            .subjects
            .iter()
            .find(|theirs| ours.iter().any(|ours| subjects_overlap(ours, theirs)));
        if let Some(theirs) = clash {
            return format!(
                ": stream {:?} takes {theirs:?}, which holds this sink's subjects ({}); write to that stream (nats://HOST:PORT/{}) or give this one subjects of its own with ?subject_prefix=NAME",
                info.config.name,
                ours.join(", "),
                info.config.name
            );
        }
    }
    " (another stream takes these subjects; give this one subjects of its own with ?subject_prefix=NAME)".to_owned()
}

/// Whether two NATS subject patterns (`*` one token, `>` the rest) can match one subject.
fn subjects_overlap(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.split('.'), b.split('.'));
    loop {
        match (a.next(), b.next()) {
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(x), Some(y)) if x == y || x == "*" || y == "*" => continue,
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod overlap_tests {
    use super::subjects_overlap;

    #[test]
    fn patterns_overlap_as_nats_matches_them() {
        assert!(subjects_overlap("reel.*.events", "reel.>"));
        assert!(subjects_overlap("reel.*.events", "reel.s1.events"));
        assert!(subjects_overlap("reel.*.events", "*.*.*"));
        assert!(!subjects_overlap("reel.*.events", "other.>"));
        assert!(!subjects_overlap("reel.*.events", "reel.*"));
        assert!(!subjects_overlap("reel.*.events", "reel.*.events.more"));
    }
}
