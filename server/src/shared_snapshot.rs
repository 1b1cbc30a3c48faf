//! A hosted session's whole timeline as frames, encoded once for every subscriber that starts
//! from the same event: a session whose snapshot is megabytes is not copied per subscriber.

use std::sync::{Arc, Weak};

use reel_engine::{SessionCatalog, StoreError, StoredStream};

use crate::frames::{Frame, Position, frames_of};

/// The frames of a hosted session's whole timeline as of one ordinal, shared by the
/// subscribers that start from it. Held weakly: it lives while a subscriber holds it.
#[derive(Default)]
pub struct SharedSnapshot(tokio::sync::Mutex<(u64, Vec<Weak<Frame>>)>);

impl SharedSnapshot {
    /// The timeline's frames as of event `ordinal`: the ones still held, or new ones.
    pub async fn shared(
        &self,
        catalog: &mut dyn SessionCatalog,
        id: &str,
        ordinal: u64,
    ) -> Result<Vec<Arc<Frame>>, StoreError> {
        let mut cached = self.0.lock().await;
        let held: Option<Vec<Arc<Frame>>> = cached.1.iter().map(Weak::upgrade).collect();
        if let Some(held) = held.filter(|held| cached.0 == ordinal && !held.is_empty()) {
            return Ok(held);
        }
        let whole = StoredStream::open(catalog, id, ordinal, Some(ordinal)).await?;
        let frames = snapshot_frames(&whole, ordinal);
        *cached = (ordinal, frames.iter().map(Arc::downgrade).collect());
        Ok(frames)
    }
}

/// The frames of `whole`'s timeline, each at event `ordinal`.
pub fn snapshot_frames(whole: &StoredStream, ordinal: u64) -> Vec<Arc<Frame>> {
    frames_of(&whole.snapshot())
        .into_iter()
        .map(|frame| {
            Arc::new(Frame {
                position: Some(Position::through(ordinal)),
                json: frame.json,
            })
        })
        .collect()
}
