//! What a session hands its sinks: an ordered stream of [`Output`]s.
//!
//! Most outputs are committed log events together with the ui events projected from them; the
//! rest are the protocol's own frames (hello, snapshots, errors, done). Outputs are cheap to
//! clone (everything heavy is behind an `Arc`), because every sink receives each one.

use std::sync::Arc;

use reel_proto::{
    json::{FrameRef, LineRef},
    rpc::{self, DoneFrame, ErrorFrame, HelloFrame, SnapshotFrame, UiEventFrame},
};

use crate::{context::ModelContextProjection, log::LogEntry};

/// What every reel stream offers; hello lists these first.
const BASE_CAPABILITIES: [&str; 3] = ["ui-events", "snapshot", "done"];

/// The hello frame that opens every stream: this reel's protocol, version and capabilities
/// (the base ones, then `extra`). A stored session's stream has no extras, as a one-shot run's.
pub fn hello_frame(extra: &[&str]) -> HelloFrame {
    HelloFrame {
        protocol: rpc::PROTOCOL.into(),
        server: format!("reel/{}", env!("CARGO_PKG_VERSION")),
        capabilities: BASE_CAPABILITIES
            .iter()
            .chain(extra)
            .map(|c| (*c).to_owned())
            .collect(),
        protocol_version: rpc::PROTOCOL_VERSION,
    }
}

/// A log entry and the ui events the timeline projected from it.
#[derive(Debug)]
pub struct CommittedEvent {
    pub entry: Arc<LogEntry>,
    pub ui_events: Vec<UiEventFrame>,
    /// The model context right after this event, on the events after which a durable sink may
    /// snapshot the projections (a run's end, a compaction): an O(1) clone of the session's,
    /// sharing its messages, so that sink need not fold (and hold) a copy of its own.
    pub context: Option<ModelContextProjection>,
}

/// One item of a session's output stream.
#[derive(Clone, Debug)]
pub enum OutputKind {
    Hello(Arc<HelloFrame>),
    Event(Arc<CommittedEvent>),
    Snapshot(Arc<SnapshotFrame>),
    Error(Arc<ErrorFrame>),
    Done(Arc<DoneFrame>),
}

/// An output stamped with the session and the request it belongs to.
#[derive(Clone, Debug)]
pub struct Output {
    pub session_id: Arc<str>,
    /// The request this output answers; empty in one-shot mode.
    pub request_id: Arc<str>,
    pub kind: OutputKind,
}

impl Output {
    fn line<'a>(&'a self, frame: FrameRef<'a>) -> LineRef<'a> {
        LineRef {
            session_id: &self.session_id,
            request_id: &self.request_id,
            frame,
        }
    }

    /// Calls `write` with each `RpcLine` this output becomes, in order. Backend event frames
    /// (the log's own events) come before the ui events of the same entry when requested.
    pub fn for_each_line<E>(
        &self,
        include_backend_events: bool,
        mut write: impl FnMut(LineRef<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        match &self.kind {
            OutputKind::Hello(f) => write(self.line(FrameRef::Hello(f))),
            OutputKind::Snapshot(f) => write(self.line(FrameRef::Snapshot(f))),
            OutputKind::Error(f) => write(self.line(FrameRef::Error(f))),
            OutputKind::Done(f) => write(self.line(FrameRef::Done(f))),
            OutputKind::Event(committed) => {
                if include_backend_events {
                    let backend = committed.entry.backend_frame();
                    write(self.line(FrameRef::BackendEvent(backend)))?;
                }
                committed
                    .ui_events
                    .iter()
                    .try_for_each(|ui| write(self.line(FrameRef::UiEvent(ui))))
            }
        }
    }
}
