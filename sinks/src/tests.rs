//! What the sinks' unit tests share: a short real session (through the engine's [`Session`],
//! the one writer a live run has) handed to the sink under test, and a writer the test reads.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use reel_engine::{DoneStatus, Fanout, Session, Sink, SinkFailure, hello_frame};
use reel_proto::chat::{
    ChatRunFinished, ChatRunStarted, ChatTextDelta, ChatTextSegmentStarted, ChatUserMessageAccepted,
};

/// A writer whose bytes the test keeps a handle on.
#[derive(Clone, Default)]
pub struct SharedWriter(Arc<Mutex<Vec<u8>>>);

impl SharedWriter {
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs session `s1` through `sink`: hello, snapshot, one run (a prompt, a reply "Hello" in two
/// deltas, the run's end), snapshot, done. The sink's failures, if any.
pub async fn run_sink(sink: impl Sink) -> Vec<SinkFailure> {
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(sink));
    let mut session = Session::new("s1", fanout);
    let rid: Arc<str> = Arc::from("");
    session.emit_hello(&rid, hello_frame(&[])).await;
    session.emit_snapshot(&rid).await;
    session
        .append(
            &rid,
            ChatUserMessageAccepted {
                message_id: "u1".into(),
                role: "user".into(),
                text: "Say hello".into(),
                ..Default::default()
            },
        )
        .await;
    session
        .append(
            &rid,
            ChatRunStarted {
                message_id: "u1".into(),
                system_prompt: "Be brief.".into(),
                ..Default::default()
            },
        )
        .await;
    session
        .append(
            &rid,
            ChatTextSegmentStarted {
                message_id: "a1".into(),
                role: "assistant".into(),
                streaming: true,
                ..Default::default()
            },
        )
        .await;
    for text in ["Hel", "lo"] {
        let delta = ChatTextDelta {
            message_id: "a1".into(),
            text: text.into(),
        };
        session.append(&rid, delta).await;
    }
    session
        .append(
            &rid,
            ChatRunFinished {
                message_id: "u1".into(),
                status: "finished".into(),
                duration_ms: 1500,
                ..Default::default()
            },
        )
        .await;
    session.emit_snapshot(&rid).await;
    session.emit_done(&rid, DoneStatus::Ok).await;
    session.close().await
}
