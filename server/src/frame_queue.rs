//! One subscriber's queue of frames, bounded in bytes rather than in frames: a frame of a
//! delta is a hundred bytes, a snapshot frame can be megabytes, so a bound in frames bounds
//! nothing. A frame costs its length (at least one byte, at most the whole budget, so a frame
//! larger than the budget still passes, alone); its sender waits while the queue holds the
//! budget, which is where a subscriber that does not read stops reading the session.
//!
//! Frames are shared (`Arc`), never copied: a snapshot queued for many subscribers is held
//! once.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use crate::frames::Frame;

/// The bytes of frames one subscriber's queue holds at most (besides one larger frame).
pub const SUBSCRIBER_BYTES: usize = 1024 * 1024;

/// A queue of frames holding at most `budget` bytes.
pub fn frame_queue(budget: usize) -> (FrameSender, FrameReceiver) {
    let room = Arc::new(Semaphore::new(budget));
    let (tx, rx) = mpsc::unbounded_channel();
    let sender = FrameSender {
        tx,
        room: Arc::clone(&room),
        budget,
    };
    (sender, FrameReceiver { rx, room })
}

/// The subscriber's side that queues frames.
pub struct FrameSender {
    tx: mpsc::UnboundedSender<(Arc<Frame>, u32)>,
    room: Arc<Semaphore>,
    budget: usize,
}

/// The receiver has gone: the client left.
#[derive(Debug)]
pub struct Gone;

impl FrameSender {
    /// Queues `frame` once there is room for it.
    pub async fn send(&self, frame: Arc<Frame>) -> Result<(), Gone> {
        let cost = frame.json.len().clamp(1, self.budget) as u32;
        let permit = self.room.acquire_many(cost).await.map_err(|_closed| Gone)?;
        // The receiver gives the room back when it takes the frame.
        permit.forget();
        self.tx.send((frame, cost)).map_err(|_| Gone)
    }

    /// Whether the receiver has gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves when the receiver has gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// The connection's side that takes frames.
pub struct FrameReceiver {
    rx: mpsc::UnboundedReceiver<(Arc<Frame>, u32)>,
    room: Arc<Semaphore>,
}

impl FrameReceiver {
    /// The next frame; `None` once the sender has gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        let (frame, cost) = self.rx.recv().await?;
        self.room.add_permits(cost as usize);
        Some(frame)
    }
}

impl FrameReceiver {
    /// How many frames are queued now.
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// The next frame if one is queued now.
    pub fn try_recv(&mut self) -> Option<Arc<Frame>> {
        let (frame, cost) = self.rx.try_recv().ok()?;
        self.room.add_permits(cost as usize);
        Some(frame)
    }
}

impl Drop for FrameReceiver {
    fn drop(&mut self) {
        // A sender waiting for room learns at once that nobody will make any.
        self.room.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::Position;

    fn frame(bytes: usize) -> Arc<Frame> {
        Arc::new(Frame {
            position: Some(Position::through(1)),
            json: "x".repeat(bytes).into(),
        })
    }

    #[tokio::test]
    async fn the_queue_holds_bytes_not_frames() {
        let (tx, mut rx) = frame_queue(100);
        for _ in 0..10 {
            tx.send(frame(10)).await.unwrap();
        }
        let full = tokio::time::timeout(std::time::Duration::from_millis(50), tx.send(frame(1)));
        assert!(
            full.await.is_err(),
            "100 bytes queued: no room for one more"
        );
        rx.recv().await.unwrap();
        tx.send(frame(10)).await.unwrap();
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_budget_passes_alone() {
        let (tx, mut rx) = frame_queue(100);
        tx.send(frame(10_000)).await.unwrap();
        let full = tokio::time::timeout(std::time::Duration::from_millis(50), tx.send(frame(1)));
        assert!(full.await.is_err());
        assert_eq!(rx.recv().await.unwrap().json.len(), 10_000);
        tx.send(frame(1)).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiting_sender_hears_that_the_receiver_left() {
        let (tx, rx) = frame_queue(10);
        tx.send(frame(10)).await.unwrap();
        let waiting = tokio::spawn(async move { tx.send(frame(10)).await });
        tokio::task::yield_now().await;
        drop(rx);
        assert!(waiting.await.unwrap().is_err());
    }
}
