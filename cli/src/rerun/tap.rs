//! The re-run session's own events, handed back in-process: each re-run turn is folded from
//! them as they are written, instead of being read back from the store it was just written to
//! (which cost a tenth more CPU per turn than the run being replayed).

use std::sync::Arc;

use reel_engine::{Acks, LogEntry, OutputBatch, OutputKind, Reads, Session, Sink, SinkError};
use tokio::sync::mpsc;

/// The receiving end: the session's events in order.
pub struct EventTap {
    events: mpsc::UnboundedReceiver<Arc<LogEntry>>,
}

impl EventTap {
    /// Taps `session`'s events from now on.
    pub fn attach(session: &mut Session) -> Self {
        let (sender, events) = mpsc::unbounded_channel();
        session.attach(Box::new(TapSink { sender }));
        Self { events }
    }

    /// The tapped events after `after` up to `up_to`, waiting until the session has handed
    /// them all over (call it after [`Session::flush`]); earlier ones are dropped.
    pub async fn between(&mut self, after: u64, up_to: u64) -> Vec<Arc<LogEntry>> {
        let mut events = Vec::new();
        if up_to <= after {
            return events;
        }
        while let Some(entry) = self.events.recv().await {
            let ordinal = entry.ordinal;
            if ordinal > after {
                events.push(entry);
            }
            if ordinal >= up_to {
                break;
            }
        }
        events
    }
}

/// Forwards every event it is handed to the tap; nobody waits for it.
struct TapSink {
    sender: mpsc::UnboundedSender<Arc<LogEntry>>,
}

#[async_trait::async_trait]
impl Sink for TapSink {
    fn name(&self) -> String {
        "re-run tap".into()
    }

    fn reads(&self) -> Reads {
        Reads::LogOnly
    }

    async fn run(
        self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        while let Some(batch) = input.recv().await {
            for output in batch.iter() {
                if let OutputKind::Event(event) = &output.kind {
                    // The tap is gone only when the re-run is over: nothing is left to tell.
                    let _ = self.sender.send(Arc::clone(&event.entry));
                }
            }
        }
        Ok(())
    }
}
