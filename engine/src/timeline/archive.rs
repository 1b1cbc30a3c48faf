//! Letting settled entities go, and taking them back.
//!
//! A session with a durable store need not hold its whole timeline: once no run or model call
//! is open, no event can change the entities it has (a queued prompt aside), and the store has
//! them. [`TimelineProjection::evict_settled`] lets them go, so memory holds what can still
//! change instead of everything ever said. A whole snapshot is then the store's entities created
//! up to the eviction point merged with what memory holds ([`TimelineProjection::merged`]),
//! and a reader that needs the timeline whole gets it back with [`TimelineProjection::restore`].

use reel_proto::{
    Any,
    rpc::{SnapshotEntity, SnapshotFrame},
};

use super::{TimelineProjection, changes::ChangeIndex};
use crate::vocabulary::QueuedPromptStatus;

impl TimelineProjection {
    /// Lets go of every entity no event can change any more, when nothing is open (a run, a
    /// model call, a segment): everything but the prompts still queued. Returns whether it did.
    /// Call it only once a durable store holds every entity as of [`Self::last_ordinal`].
    pub fn evict_settled(&mut self) -> bool {
        self.take_settled(u64::MAX).is_some()
    }

    /// What a durable store materializes: the entities created or changed after `ordinal`
    /// (as [`Self::snapshot_since`]), with the settled ones moved out rather than copied when
    /// nothing is open, as [`Self::evict_settled`] would let them go. A long reply's text then
    /// exists once, in the store's hands. The store must keep them before anything reads the
    /// timeline whole again.
    pub fn take_since(&mut self, ordinal: u64) -> SnapshotFrame {
        let entities = match self.take_settled(ordinal) {
            Some(taken) => taken,
            None => self.snapshot_since(ordinal).entities,
        };
        SnapshotFrame {
            snapshot_ordinal: self.last_ordinal,
            entities,
        }
    }

    /// Lets go of the settled entities as [`Self::evict_settled`] does, returning those changed
    /// after `ordinal` (and copies of the queued prompts changed after it); `None` when
    /// something is open.
    fn take_settled(&mut self, ordinal: u64) -> Option<Vec<SnapshotEntity>> {
        if self.open_run.is_some() || self.call.is_some() || !self.streams.is_empty() {
            return None;
        }
        let still_queued = |e: &SnapshotEntity| {
            matches!(&e.payload, Some(Any::QueuedPromptEntity(q))
                if q.status == QueuedPromptStatus::Queued.as_str())
        };
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        for entity in std::mem::take(&mut self.entities) {
            let changed = entity.last_event_ordinal > ordinal;
            if still_queued(&entity) {
                if changed {
                    taken.push(entity.clone());
                }
                kept.push(entity);
            } else if changed {
                taken.push(entity);
            }
        }
        self.set_entities(kept);
        self.tool_calls.clear();
        self.evicted_through = self.last_ordinal;
        Some(taken)
    }

    /// Whether entities were let go (a whole snapshot needs the store's).
    pub fn is_partial(&self) -> bool {
        self.evicted_through > 0
    }

    /// The whole timeline: `stored` (a store's entities, in creation order) where memory let
    /// them go, and what memory holds.
    pub fn merged(&self, stored: Vec<SnapshotEntity>) -> SnapshotFrame {
        let mut entities = self.archived(stored);
        entities.extend(self.entities.iter().cloned());
        entities.sort_by_key(|e| e.created_ordinal);
        SnapshotFrame {
            snapshot_ordinal: self.last_ordinal,
            entities,
        }
    }

    /// Takes the let-go entities back from `stored`: the timeline is whole again.
    pub fn restore(&mut self, stored: Vec<SnapshotEntity>) {
        if !self.is_partial() {
            return;
        }
        let mut entities = self.archived(stored);
        entities.append(&mut self.entities);
        entities.sort_by_key(|e| e.created_ordinal);
        self.set_entities(entities);
        self.evicted_through = 0;
    }

    /// The entities of `stored` that memory let go: created up to the eviction point, and not
    /// held (an entity still held is newer in memory).
    fn archived(&self, stored: Vec<SnapshotEntity>) -> Vec<SnapshotEntity> {
        stored
            .into_iter()
            .filter(|e| {
                e.created_ordinal <= self.evicted_through && !self.index.contains_key(&e.id)
            })
            .collect()
    }

    fn set_entities(&mut self, entities: Vec<SnapshotEntity>) {
        self.index = entities
            .iter()
            .enumerate()
            .map(|(at, e)| (e.id.clone(), at))
            .collect();
        self.changes = ChangeIndex::of(&entities);
        self.entities = entities;
    }
}
