//! A hosted session's live frames, handed to each subscriber's own queue.
//!
//! Each subscriber has a queue of its own, allocated as it fills: a session followed by one
//! subscriber costs that subscriber's queue (under a kilobyte when it keeps up), not a ring of
//! frames sized for the slowest reader (a broadcast ring of 1,024 frames costs 40 KB per
//! session, whoever reads it). The sender never waits: a frame of the log for a queue that
//! holds [`LIVE_FRAMES`] is dropped and the subscriber told how far it lagged, and it reads
//! what it missed from the store.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};

use tokio::sync::mpsc;

use crate::frames::Frame;

/// Frames of the log a subscriber may fall behind by before it catches up from the store
/// instead: room for a reply of a thousand deltas at once (a scripted one; a model's comes far
/// slower).
const LIVE_FRAMES: usize = 1024;

/// A hosted session's subscribers.
#[derive(Default)]
pub struct FrameChannel(Mutex<Vec<Subscriber>>);

/// The session's end of one subscriber's queue.
struct Subscriber {
    tx: mpsc::UnboundedSender<Arc<Frame>>,
    shared: Arc<Shared>,
}

/// What both ends of a queue know.
#[derive(Default)]
struct Shared {
    /// Frames in the queue.
    queued: AtomicUsize,
    /// The newest ordinal whose frame was dropped for a full queue (0: none since the
    /// subscriber last heard of it).
    missed_through: AtomicU64,
}

/// What a subscriber receives next.
pub enum Live {
    Frame(Arc<Frame>),
    /// Frames of the log through this ordinal were dropped: read them from the store.
    Lagged(u64),
    /// The session ended (unloaded): no frame will come.
    Closed,
}

/// A subscriber's end: the frames sent since it subscribed.
pub struct LiveFrames {
    rx: mpsc::UnboundedReceiver<Arc<Frame>>,
    shared: Arc<Shared>,
}

impl LiveFrames {
    /// The next frame, or that some were missed, or that the session ended.
    pub async fn recv(&mut self) -> Live {
        if let Some(live) = self.try_recv() {
            return live;
        }
        let frame = self.rx.recv().await;
        self.taken(frame)
    }

    /// What [`LiveFrames::recv`] would give now, if it would give it without waiting.
    pub fn try_recv(&mut self) -> Option<Live> {
        // Before the queue: the frames queued after a gap come after what the store gives.
        let missed = self.shared.missed_through.swap(0, Ordering::AcqRel);
        if missed > 0 {
            return Some(Live::Lagged(missed));
        }
        match self.rx.try_recv() {
            Ok(frame) => Some(self.taken(Some(frame))),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(Live::Closed),
        }
    }

    /// What the queue gave, `None` once the session has ended, counted out of the queue.
    fn taken(&self, frame: Option<Arc<Frame>>) -> Live {
        match frame {
            Some(frame) => {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                Live::Frame(frame)
            }
            None => Live::Closed,
        }
    }

    /// How many frames are queued.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }
}

impl FrameChannel {
    /// A new subscriber of the frames sent from now on.
    pub fn subscribe(&self) -> LiveFrames {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        self.subscribers().push(Subscriber {
            tx,
            shared: Arc::clone(&shared),
        });
        LiveFrames { rx, shared }
    }

    /// How many subscribers listen (the ones gone are forgotten here).
    pub fn receiver_count(&self) -> usize {
        let mut subscribers = self.subscribers();
        subscribers.retain(|s| !s.tx.is_closed());
        subscribers.len()
    }

    /// How many frames wait in the fullest queue.
    pub fn len(&self) -> usize {
        self.subscribers()
            .iter()
            .map(|s| s.shared.queued.load(Ordering::Acquire))
            .max()
            .unwrap_or(0)
    }

    /// Hands the frames `make` encodes to every subscriber without waiting; with no subscriber
    /// nothing is encoded (later subscribers read the store). One look at the list per output,
    /// whatever its frames. A frame of the log for a queue that holds [`LIVE_FRAMES`] is
    /// dropped (its subscriber reads it from the store); a request's own frame (its `done`, an
    /// error), which the store does not hold, always goes. A subscriber gone is forgotten.
    pub(crate) fn send_all<F: IntoIterator<Item = Frame>>(&self, make: impl FnOnce() -> F) {
        let mut subscribers = self.subscribers();
        if subscribers.is_empty() {
            return;
        }
        for frame in make() {
            let frame = Arc::new(frame);
            subscribers.retain(|s| {
                if let Some(position) = frame.position
                    && s.shared.queued.load(Ordering::Acquire) >= LIVE_FRAMES
                {
                    s.shared
                        .missed_through
                        .fetch_max(position.ordinal, Ordering::AcqRel);
                    return true;
                }
                s.shared.queued.fetch_add(1, Ordering::AcqRel);
                s.tx.send(Arc::clone(&frame)).is_ok()
            });
        }
    }

    fn subscribers(&self) -> std::sync::MutexGuard<'_, Vec<Subscriber>> {
        // Pushes and removals only: a panic while it was held left the list whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::Position;

    fn frame(ordinal: u64) -> Frame {
        Frame {
            position: Some(Position::through(ordinal)),
            json: format!("{{\"n\":{ordinal}}}").into(),
        }
    }

    fn ordinal(live: Live) -> Option<u64> {
        match live {
            Live::Frame(frame) => frame.position.map(|p| p.ordinal),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_full_queue_loses_log_frames_says_how_far_keeps_request_frames_and_ends() {
        let channel = FrameChannel::default();
        let mut slow = channel.subscribe();
        let mut fast = channel.subscribe();
        let full = LIVE_FRAMES as u64;
        for n in 1..=full {
            channel.send_all(|| vec![frame(n)]);
            assert_eq!(ordinal(fast.recv().await), Some(n));
        }
        assert_eq!(channel.len(), LIVE_FRAMES);
        channel.send_all(|| vec![frame(full + 1), frame(full + 2)]);
        // A request's own frame (`done`) is not in the store: it is queued all the same.
        channel.send_all(|| {
            vec![Frame {
                position: None,
                json: "{\"done\":{}}".into(),
            }]
        });
        assert_eq!(ordinal(fast.recv().await), Some(full + 1));
        assert!(matches!(slow.recv().await, Live::Lagged(n) if n == full + 2));
        assert_eq!(ordinal(slow.recv().await), Some(1), "what was queued stays");
        assert_eq!(channel.receiver_count(), 2);
        drop(fast);
        assert_eq!(channel.receiver_count(), 1);
        drop(channel);
        let mut left = Vec::new();
        while let Live::Frame(frame) = slow.recv().await {
            left.push(frame);
        }
        assert_eq!(left.len(), LIVE_FRAMES, "the queue drains, then the end");
        assert!(
            left.last().unwrap().position.is_none(),
            "the done came last"
        );
    }
}
