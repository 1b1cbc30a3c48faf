//! The fan-out's tests: order, acknowledgements, failures, back-pressure, inline sinks.

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
        // Through the acknowledgements: on a writer's task, it says when it waits.
        while let Some(batch) = acks.next_batch(&mut input).await {
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

/// A fan-out whose sinks run on the writer's task: no task of their own, the writer's future
/// runs them, and the idle signal says idle only while the writer and every such sink wait.
#[tokio::test]
async fn sinks_on_the_writer_task_run_within_its_future_and_count_in_its_idle_signal() {
    let mut fanout = Fanout::on_writer_task();
    fanout.attach(Box::new(SlowStore {
        delay: Duration::from_millis(5),
        fail_at: None,
    }));
    let memory = MemorySink::new();
    fanout.attach(Box::new(memory.clone()));
    let idle = fanout.idle_signal();
    let metrics = tokio::runtime::Handle::current().metrics();
    assert_eq!(metrics.num_alive_tasks(), 0, "no task was started for them");
    idle.set(true);
    assert!(!idle.is_idle(), "a sink that has not waited yet is busy");
    let sinks = fanout.take_writer_task_sinks();
    let writer = async {
        fanout.send(event(1)).await;
        fanout.send(event(2)).await;
        fanout.wait_committed(2).await.unwrap();
        fanout.close().await
    };
    let (failures, ()) = futures::future::join(writer, sinks).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(ordinals(&memory.outputs()), [1, 2]);
    // MemorySink reads its input itself: it never says it waits, so its session never
    // counts as idle; with it gone (ended), the store alone decides.
    assert!(idle.is_idle(), "every sink has ended");

    let mut fanout = Fanout::on_writer_task();
    fanout.attach(Box::new(SlowStore {
        delay: Duration::from_millis(5),
        fail_at: None,
    }));
    let idle = fanout.idle_signal();
    idle.set(true);
    let mut sinks = Box::pin(fanout.take_writer_task_sinks());
    // Polled once: the store waits for a batch with nothing in flight.
    assert!(futures::poll!(sinks.as_mut()).is_pending());
    assert!(idle.is_idle(), "the writer and its sink both wait");
    fanout.send(event(1)).await;
    fanout.flush().await;
    assert!(futures::poll!(sinks.as_mut()).is_pending());
    assert!(!idle.is_idle(), "the store commits a batch");
    let closing = async {
        let failures = fanout.close().await;
        assert!(failures.is_empty());
    };
    futures::future::join(closing, sinks).await;
}

/// Sinks meant for a writer that never took them end when the fan-out is dropped, on tasks
/// of their own, as every sink whose queue closes does.
#[tokio::test]
async fn sinks_no_writer_took_end_when_the_fan_out_is_dropped() {
    let mut fanout = Fanout::on_writer_task();
    let (ended, mut end) = mpsc::unbounded_channel();
    fanout.attach(Box::new(Ending(ended)));
    drop(fanout);
    let said = tokio::time::timeout(Duration::from_secs(5), end.recv()).await;
    assert_eq!(said.expect("the sink ran"), Some("closed"));
}

/// A sink that says when its queue closes.
struct Ending(mpsc::UnboundedSender<&'static str>);

#[async_trait::async_trait]
impl Sink for Ending {
    fn name(&self) -> String {
        "ending".into()
    }

    async fn run(
        self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        while input.recv().await.is_some() {}
        let _ = self.0.send("closed");
        Ok(())
    }
}
