//! A hosted session's frames as its subscribers receive them: each encoded once, with its place
//! in the session's stream, and broadcast to every subscriber without ever waiting for one.
//!
//! The place is the cursor a client resumes from. Several frames can come from one log event
//! (a segment's end and its provider call's end share an ordinal), so a frame's SSE id is its
//! ordinal when it is the last frame of that ordinal, and `ORDINAL.INDEX` before that: a
//! client that dropped between two frames of one event resumes exactly between them, and a
//! plain ordinal always means "everything of that event".

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::extract::ws::Utf8Bytes;
use prometheus_client::metrics::counter::Counter;
use reel_engine::{InlineSink, Output, OutputBatch, OutputKind, run_tally};
use reel_proto::{
    json,
    rpc::{PROTOCOL_VERSION, RpcLine, rpc_line},
};
use smallvec::SmallVec;

use crate::{frame_channel::FrameChannel, idle::Activity};

/// Where a frame sits in a session's stream: its event's ordinal and its index among that
/// event's frames ([`Position::LAST`] for the last one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub ordinal: u64,
    pub index: u32,
}

impl Position {
    /// The index of an event's last frame, so that `N` sorts after every `N.k`.
    pub const LAST: u32 = u32::MAX;

    /// Everything of event `ordinal` and before.
    pub fn through(ordinal: u64) -> Self {
        Self {
            ordinal,
            index: Self::LAST,
        }
    }

    /// The SSE id: `N`, or `N.k` for a frame before its event's last (its `Display`).
    pub fn id(&self) -> String {
        self.to_string()
    }

    /// A cursor as a client sends it (`Last-Event-ID` or `?after=`); `None` when it is not one.
    pub fn parse(cursor: &str) -> Option<Self> {
        let cursor = cursor.trim();
        match cursor.split_once('.') {
            None => cursor.parse().ok().map(Self::through),
            Some((ordinal, index)) => Some(Self {
                ordinal: ordinal.parse().ok()?,
                index: index.parse().ok().filter(|i| *i != Self::LAST)?,
            }),
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Self::LAST => write!(f, "{}", self.ordinal),
            index => write!(f, "{}.{index}", self.ordinal),
        }
    }
}

/// One frame, encoded as its JSON line (without the newline).
#[derive(Debug)]
pub struct Frame {
    /// Its place, for the frames of log events; `None` for the frames a request adds (its
    /// closing snapshot, errors, done), which are not on the log and never replayed.
    pub position: Option<Position>,
    /// Empty for a log event that projects to no frame: a marker that says the event passed,
    /// so that a subscriber need not look for it in the store. It is never sent. Shared bytes:
    /// every subscriber's connection writes these same bytes, none copies them.
    pub json: Utf8Bytes,
}

impl Frame {
    /// The server's own frame (hello, a refusal) for session `session_id`, under `request_id`;
    /// `None` when it cannot be encoded (said on stderr).
    pub fn of_line(session_id: &str, request_id: &str, frame: rpc_line::Frame) -> Option<Self> {
        let line = RpcLine {
            version: PROTOCOL_VERSION,
            session_id: session_id.to_owned(),
            request_id: request_id.to_owned(),
            frame: Some(frame),
        };
        match json::to_string(&line) {
            Ok(json) => Some(Self {
                position: None,
                json: json.into(),
            }),
            Err(error) => {
                tracing::error!("cannot encode a frame: {error}");
                None
            }
        }
    }

    /// Whether it only marks a log event that has no frames.
    pub fn is_marker(&self) -> bool {
        self.json.is_empty()
    }
}

/// The frames of one output: one for nearly every output (a delta's patch), so kept inline.
pub type Frames = SmallVec<[Frame; 1]>;

/// The frames `output` becomes (without backend events); a log event without any becomes a
/// [marker](Frame::is_marker). Encoded straight into the frames: a streamed delta's frame
/// costs its JSON's one allocation and nothing else.
pub fn frames_of(output: &Output) -> Frames {
    let ordinal = match &output.kind {
        OutputKind::Event(committed) => Some(committed.entry.ordinal),
        _ => None,
    };
    let mut frames = Frames::new();
    let encoded = output.for_each_line(false, |line| {
        frames.push(Frame {
            position: ordinal.map(|ordinal| Position {
                ordinal,
                index: frames.len() as u32,
            }),
            json: json::line_to_string(&line)?.into(),
        });
        Ok::<_, serde_json::Error>(())
    });
    if let Err(error) = encoded {
        tracing::error!("cannot encode a frame: {error}");
        return Frames::new();
    }
    match (frames.last_mut(), ordinal) {
        // An event's last frame is "everything of that event".
        (Some(last), Some(ordinal)) => last.position = Some(Position::through(ordinal)),
        (None, Some(ordinal)) => frames.push(Frame {
            position: Some(Position::through(ordinal)),
            json: Utf8Bytes::default(),
        }),
        _ => {}
    }
    frames
}

/// The sink that hands a hosted session's frames to its subscribers, on the session's own task
/// (an idle session holds no task for it). It never waits: a subscriber that falls behind
/// loses frames from its queue and catches up from the store.
pub struct FramesSink {
    /// Held here only: when the session ends, so does every subscriber's stream.
    frames: Arc<FrameChannel>,
    /// The newest ordinal it has broadcast (a cursor past it, and past the store, is an error).
    last_ordinal: Arc<AtomicU64>,
    /// A session that makes frames is in use.
    activity: Arc<Activity>,
    events_appended: Counter,
}

impl FramesSink {
    pub fn new(
        frames: Arc<FrameChannel>,
        last_ordinal: Arc<AtomicU64>,
        activity: Arc<Activity>,
        events_appended: Counter,
    ) -> Self {
        Self {
            frames,
            last_ordinal,
            activity,
            events_appended,
        }
    }
}

impl InlineSink for FramesSink {
    fn deliver(&mut self, batch: &OutputBatch) {
        self.activity.touch();
        for output in batch.iter() {
            // Before it is sent: a subscriber that listens after this reads it from the store.
            if let OutputKind::Event(committed) = &output.kind {
                self.events_appended.inc();
                self.last_ordinal
                    .fetch_max(committed.entry.ordinal, Ordering::Release);
                if let (_, Some(status)) = run_tally(std::slice::from_ref(&committed.entry)) {
                    self.activity.run_is(status);
                }
                self.activity.follow_approvals(&committed.entry.event);
            }
            self.frames.send_all(|| frames_of(output));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_order_the_frames_of_one_event_and_parse_back() {
        let first = Position {
            ordinal: 7,
            index: 0,
        };
        assert_eq!(first.id(), "7.0");
        assert_eq!(Position::through(7).id(), "7");
        assert!(first < Position::through(7) && Position::through(7) < Position::through(8));
        assert_eq!(Position::parse("7.0"), Some(first));
        assert_eq!(Position::parse(" 12 "), Some(Position::through(12)));
        for bad in ["", "x", "-1", "7.", "7.x", "1.2.3", "7.4294967295"] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
    }
}
