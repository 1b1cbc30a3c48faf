//! Fan-out: hands every output to every attached sink, in order, with back-pressure.
//!
//! Outputs travel in batches: [`Fanout::send`] collects them and delivers a batch when it is
//! full, and [`Fanout::flush`] delivers whatever is collected. The session flushes before it
//! waits for anything (the model, a request), so batching never delays a frame a reader could
//! already see; it only saves a thread wake-up per event when events come fast.
//!
//! Each sink runs as its own task behind a bounded channel; an [`InlineSink`] (whose work never
//! waits) is handed each batch on the session's task instead, and holds no task. When a sink
//! fails, its channel closes; the fan-out detaches it, logs the error on stderr and tells the
//! remaining sinks with a non-terminal `sink_failed` error frame (a durable sink's failure is
//! the session's to report, as a terminal `storage_failed`). The log and the other sinks are
//! never affected.

use std::sync::Arc;

use reel_proto::rpc::ErrorFrame;
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::{
    output::{Output, OutputKind},
    sink::{Acks, Durability, InlineSink, Reads, Sink, SinkError},
    vocabulary::ErrorCode,
};

/// How many batches may wait for a sink before the session waits for it.
const SINK_QUEUE: usize = 4;
/// Outputs per batch at most.
const BATCH: usize = 128;

/// Outputs in the order they were produced, shared by all sinks.
pub type OutputBatch = Arc<[Output]>;

struct AttachedSink {
    name: String,
    tx: mpsc::Sender<OutputBatch>,
    task: JoinHandle<Result<(), SinkError>>,
    /// For durable sinks: the highest ordinal the sink has committed.
    committed: Option<watch::Receiver<u64>>,
    reads: Reads,
}

/// A sink that failed and was detached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkFailure {
    pub sink: String,
    pub message: String,
    /// Whether the sink was durable: its failure means acknowledged events may not be stored.
    pub durable: bool,
}

/// The set of sinks a session writes to.
#[derive(Default)]
pub struct Fanout {
    sinks: Vec<AttachedSink>,
    /// Handed each batch before the sinks above are.
    inline: Vec<Box<dyn InlineSink>>,
    failures: Vec<SinkFailure>,
    /// Outputs collected and not yet delivered.
    pending: Vec<Output>,
}

impl Fanout {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `sink` on its own task; a durable sink's acknowledgements are waited for by
    /// [`Fanout::wait_committed`]. Must be called inside a tokio runtime.
    pub fn attach(&mut self, sink: Box<dyn Sink>) {
        let (tx, rx) = mpsc::channel(SINK_QUEUE);
        let name = sink.name();
        let reads = sink.reads();
        let (acks, committed) = match sink.durability() {
            Durability::BestEffort => (Acks::channel(0).0, None),
            Durability::Durable { acknowledged } => {
                let (acks, committed) = Acks::channel(acknowledged);
                (acks, Some(committed))
            }
        };
        let task = tokio::spawn(sink.run(rx, acks));
        self.sinks.push(AttachedSink {
            name,
            tx,
            task,
            committed,
            reads,
        });
    }

    /// Adds `sink`, handed every batch on the caller's task by [`Fanout::flush`].
    pub fn attach_inline(&mut self, sink: Box<dyn InlineSink>) {
        self.inline.push(sink);
    }

    /// What the first durable sink attached (the session's store) has committed: a sink that
    /// keeps a copy of the log elsewhere (JetStream) publishes nothing the store does not hold,
    /// so that a crash never leaves the copy ahead of the store. `None` without a store.
    pub fn store_committed(&self) -> Option<watch::Receiver<u64>> {
        self.sinks.iter().find_map(|sink| sink.committed.clone())
    }

    /// Delivers everything queued and waits until every durable sink has committed `ordinal`.
    /// Fails when a durable sink has failed, now or before.
    pub async fn wait_committed(&mut self, ordinal: u64) -> Result<(), SinkFailure> {
        self.flush().await;
        let mut failed = None;
        for (at, sink) in self.sinks.iter_mut().enumerate() {
            if let Some(committed) = &mut sink.committed
                && committed.wait_for(|&done| done >= ordinal).await.is_err()
            {
                failed = Some(at);
                break;
            }
        }
        if let Some(at) = failed {
            let sink = self.sinks.remove(at);
            let failure = Self::detach(sink).await;
            self.failures.push(failure);
        }
        match self.failures.iter().find(|f| f.durable) {
            Some(failure) => Err(failure.clone()),
            None => Ok(()),
        }
    }

    /// Whether a durable sink is attached (one whose commits a side effect must wait for).
    pub fn has_durable(&self) -> bool {
        self.sinks.iter().any(|sink| sink.committed.is_some())
    }

    /// Whether a sink still attached reads frames (ui events and snapshots), not only the log.
    pub fn reads_frames(&self) -> bool {
        self.sinks.iter().any(|sink| sink.reads == Reads::Frames)
            || self.inline.iter().any(|sink| sink.reads() == Reads::Frames)
    }

    /// Sinks still attached.
    pub fn len(&self) -> usize {
        self.sinks.len() + self.inline.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sinks detached so far.
    pub fn failures(&self) -> &[SinkFailure] {
        &self.failures
    }

    /// Queues `output` for every sink; delivers the batch when it is full.
    pub async fn send(&mut self, output: Output) {
        self.pending.push(output);
        if self.pending.len() >= BATCH {
            self.flush().await;
        }
    }

    /// Delivers every queued output, waiting while a sink's queue is full.
    pub async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch: OutputBatch = std::mem::take(&mut self.pending).into();
        for sink in &mut self.inline {
            sink.deliver(&batch);
        }
        let mut failed = Vec::new();
        for (at, sink) in self.sinks.iter().enumerate() {
            if sink.tx.send(Arc::clone(&batch)).await.is_err() {
                failed.push(at);
            }
        }
        if failed.is_empty() {
            return;
        }
        let last = batch.last().expect("batches are never empty").clone();
        let mut notices = Vec::new();
        for at in failed.into_iter().rev() {
            let sink = self.sinks.remove(at);
            notices.push(Self::detach(sink).await);
        }
        for failure in notices.into_iter().rev() {
            if failure.durable {
                // The session reports a durable sink's failure itself, as the terminal
                // storage_failed error that ends the request.
                self.failures.push(failure);
                continue;
            }
            let notice = ErrorFrame {
                code: ErrorCode::SinkFailed.into(),
                message: format!(
                    "output {} failed and was detached: {}",
                    failure.sink, failure.message
                ),
                detail: String::new(),
                terminal: false,
            };
            self.failures.push(failure);
            self.pending.push(Output {
                kind: OutputKind::Error(Arc::new(notice)),
                ..last.clone()
            });
        }
        // Boxed because a sink may fail while hearing of another sink's failure.
        Box::pin(self.flush()).await;
    }

    /// Closes every sink's queue and waits until each has written what it received.
    /// Returns every failure, including those found while closing.
    pub async fn close(mut self) -> Vec<SinkFailure> {
        self.flush().await;
        // They have everything: dropped first, as a sink whose queue closes ends first.
        self.inline.clear();
        for sink in std::mem::take(&mut self.sinks) {
            let AttachedSink {
                name,
                tx,
                task,
                committed,
                ..
            } = sink;
            drop(tx);
            if let Some(failure) = Self::outcome(name, task, committed.is_some()).await {
                self.failures.push(failure);
            }
        }
        self.failures
    }

    async fn detach(sink: AttachedSink) -> SinkFailure {
        let AttachedSink {
            name,
            tx,
            task,
            committed,
            ..
        } = sink;
        let durable = committed.is_some();
        drop(tx);
        Self::outcome(name.clone(), task, durable)
            .await
            .unwrap_or(SinkFailure {
                sink: name,
                message: "stopped reading".into(),
                durable,
            })
    }

    async fn outcome(
        name: String,
        task: JoinHandle<Result<(), SinkError>>,
        durable: bool,
    ) -> Option<SinkFailure> {
        let message = match task.await {
            Ok(Ok(())) => return None,
            Ok(Err(error)) => crate::store::error_chain(&error),
            Err(join) => format!("crashed: {join}"),
        };
        tracing::error!(sink = %name, "output failed: {message}");
        Some(SinkFailure {
            sink: name,
            message,
            durable,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reel_proto::rpc::DoneFrame;
    use tokio::sync::mpsc;

    use super::*;
    use crate::{
        output::CommittedEvent,
        sink::{Acks, MemorySink},
    };

    fn event(ordinal: u64) -> Output {
        let entry = Arc::new(crate::log::LogEntry {
            ordinal,
            recorded_at_ms: 0,
            event: reel_proto::chat::ChatTextDelta {
                message_id: "m".into(),
                text: format!("{ordinal}"),
            }
            .into(),
        });
        Output {
            session_id: Arc::from("s"),
            request_id: Arc::from(""),
            kind: OutputKind::Event(Arc::new(CommittedEvent {
                entry,
                ui_events: Vec::new(),
                context: None,
            })),
        }
    }

    fn done() -> Output {
        Output {
            session_id: Arc::from("s"),
            request_id: Arc::from(""),
            kind: OutputKind::Done(Arc::new(DoneFrame {
                status: "ok".into(),
            })),
        }
    }

    fn ordinals(outputs: &[Output]) -> Vec<u64> {
        outputs
            .iter()
            .filter_map(|o| match &o.kind {
                OutputKind::Event(e) => Some(e.entry.ordinal),
                _ => None,
            })
            .collect()
    }

    /// A durable sink that acknowledges each event after `delay`, or fails at `fail_at`.
    struct SlowStore {
        delay: Duration,
        fail_at: Option<u64>,
    }

    #[async_trait::async_trait]
    impl Sink for SlowStore {
        fn name(&self) -> String {
            "store".into()
        }

        fn durability(&self) -> Durability {
            Durability::Durable { acknowledged: 0 }
        }

        async fn run(
            self: Box<Self>,
            mut input: mpsc::Receiver<OutputBatch>,
            acks: Acks,
        ) -> Result<(), SinkError> {
            while let Some(batch) = input.recv().await {
                for ordinal in ordinals(&batch) {
                    if Some(ordinal) == self.fail_at {
                        return Err(SinkError::Io(std::io::Error::other("disk full")));
                    }
                    tokio::time::sleep(self.delay).await;
                    acks.committed(ordinal);
                }
            }
            Ok(())
        }
    }

    /// A sink that never reads.
    struct Stuck;

    #[async_trait::async_trait]
    impl Sink for Stuck {
        fn name(&self) -> String {
            "stuck".into()
        }

        async fn run(
            self: Box<Self>,
            input: mpsc::Receiver<OutputBatch>,
            _acks: Acks,
        ) -> Result<(), SinkError> {
            std::future::pending::<()>().await;
            drop(input);
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_sink_sees_every_output_in_order() {
        let (first, second) = (MemorySink::new(), MemorySink::new());
        let mut fanout = Fanout::new();
        fanout.attach(Box::new(first.clone()));
        fanout.attach(Box::new(second.clone()));
        for ordinal in 1..=1_000 {
            fanout.send(event(ordinal)).await;
        }
        assert!(fanout.close().await.is_empty());
        let expected: Vec<u64> = (1..=1_000).collect();
        assert_eq!(ordinals(&first.outputs()), expected);
        assert_eq!(ordinals(&second.outputs()), expected);
    }

    #[tokio::test]
    async fn done_waits_for_a_durable_sinks_acknowledgement() {
        let mut fanout = Fanout::new();
        fanout.attach(Box::new(SlowStore {
            delay: Duration::from_millis(20),
            fail_at: None,
        }));
        assert!(fanout.has_durable());
        for ordinal in 1..=5 {
            fanout.send(event(ordinal)).await;
        }
        // Nothing is acknowledged until the store has written ordinal 5.
        fanout.wait_committed(5).await.unwrap();
        let committed = fanout.sinks[0].committed.as_ref().unwrap();
        assert_eq!(*committed.borrow(), 5);
        assert!(fanout.close().await.is_empty());
    }

    #[tokio::test]
    async fn a_failed_durable_sink_is_a_storage_failure_not_a_notice() {
        let memory = MemorySink::new();
        let mut fanout = Fanout::new();
        fanout.attach(Box::new(memory.clone()));
        fanout.attach(Box::new(SlowStore {
            delay: Duration::ZERO,
            fail_at: Some(3),
        }));
        for ordinal in 1..=5 {
            fanout.send(event(ordinal)).await;
        }
        let failure = fanout.wait_committed(5).await.unwrap_err();
        assert!(failure.durable && failure.message.contains("disk full"));
        fanout.send(done()).await;
        let failures = fanout.close().await;
        assert_eq!(failures.len(), 1);
        // The other sinks were not told with a sink_failed frame: the session reports it.
        assert!(
            !memory
                .outputs()
                .iter()
                .any(|o| matches!(o.kind, OutputKind::Error(_)))
        );
    }

    #[tokio::test]
    async fn a_failed_best_effort_sink_is_detached_and_the_others_are_told() {
        struct Broken;
        #[async_trait::async_trait]
        impl Sink for Broken {
            fn name(&self) -> String {
                "broken".into()
            }
            async fn run(
                self: Box<Self>,
                _input: mpsc::Receiver<OutputBatch>,
                _acks: Acks,
            ) -> Result<(), SinkError> {
                Err(SinkError::Io(std::io::Error::other("pipe closed")))
            }
        }
        let memory = MemorySink::new();
        let mut fanout = Fanout::new();
        fanout.attach(Box::new(Broken));
        fanout.attach(Box::new(memory.clone()));
        tokio::task::yield_now().await;
        for ordinal in 1..=3 {
            fanout.send(event(ordinal)).await;
            fanout.flush().await;
        }
        fanout.wait_committed(3).await.unwrap();
        assert_eq!(fanout.len(), 1);
        let failures = fanout.close().await;
        assert_eq!(failures.len(), 1);
        assert!(!failures[0].durable);
        let notices: Vec<String> = memory
            .outputs()
            .iter()
            .filter_map(|o| match &o.kind {
                OutputKind::Error(e) => Some(e.code.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(notices, ["sink_failed"]);
        assert_eq!(ordinals(&memory.outputs()), [1, 2, 3]);
    }

    /// Records the batches it is handed on the caller's task.
    struct Recording(Arc<std::sync::Mutex<Vec<Output>>>);

    impl InlineSink for Recording {
        fn deliver(&mut self, batch: &OutputBatch) {
            self.0.lock().unwrap().extend(batch.iter().cloned());
        }
    }

    #[tokio::test]
    async fn an_inline_sink_gets_every_batch_at_its_flush_on_no_task_of_its_own() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut fanout = Fanout::new();
        fanout.attach_inline(Box::new(Recording(Arc::clone(&seen))));
        assert!(fanout.reads_frames() && fanout.len() == 1);
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(tasks, 0, "no task was started for it");
        fanout.send(event(1)).await;
        fanout.send(event(2)).await;
        assert!(seen.lock().unwrap().is_empty(), "held until the flush");
        fanout.flush().await;
        assert_eq!(ordinals(&seen.lock().unwrap()), [1, 2]);
        fanout.send(event(3)).await;
        fanout.send(done()).await;
        assert!(fanout.close().await.is_empty());
        let seen = seen.lock().unwrap();
        assert_eq!(ordinals(&seen), [1, 2, 3]);
        assert!(matches!(seen.last().unwrap().kind, OutputKind::Done(_)));
    }

    #[tokio::test]
    async fn a_sink_that_stops_reading_holds_the_session_back() {
        let mut fanout = Fanout::new();
        fanout.attach(Box::new(Stuck));
        // The queue holds SINK_QUEUE batches; the next delivery waits (back-pressure).
        let mut delivered = 0;
        let fill = async {
            loop {
                for _ in 0..BATCH {
                    fanout.send(event(1)).await;
                }
                delivered += 1;
            }
        };
        let waited = tokio::time::timeout(Duration::from_millis(200), fill).await;
        assert!(waited.is_err(), "sending blocked");
        assert_eq!(
            delivered, SINK_QUEUE,
            "exactly the queue's batches went through"
        );
    }
}
