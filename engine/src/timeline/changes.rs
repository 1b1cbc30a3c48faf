//! Which timeline entities changed after an ordinal, found without looking at every entity.
//!
//! Each request over stdin RPC ends with the entities it changed (`snapshot_since`). Scanning
//! all entities for that cost every request the session's age; this index keeps each entity's
//! last event ordinal in order, so the answer costs what changed. It is not stored in
//! snapshots: a projection read back from one rebuilds it on its next event (and answers by a
//! scan until then).

use std::collections::BTreeSet;

use reel_proto::rpc::SnapshotEntity;

/// Every entity's (last event ordinal, position in the timeline).
#[derive(Clone, Debug, Default)]
pub(super) struct ChangeIndex {
    by_change: BTreeSet<(u64, usize)>,
}

impl ChangeIndex {
    /// The index of `entities` as they are.
    pub(super) fn of(entities: &[SnapshotEntity]) -> Self {
        Self {
            by_change: entities
                .iter()
                .enumerate()
                .map(|(at, entity)| (entity.last_event_ordinal, at))
                .collect(),
        }
    }

    /// Whether the index knows all of `entities` (it does not right after a snapshot is read).
    pub(super) fn covers(&self, entities: &[SnapshotEntity]) -> bool {
        self.by_change.len() == entities.len()
    }

    /// The entity at `at` changed at `ordinal`; `before` is its previous last event ordinal
    /// (`None` for a new entity).
    pub(super) fn changed(&mut self, at: usize, before: Option<u64>, ordinal: u64) {
        if let Some(before) = before {
            self.by_change.remove(&(before, at));
        }
        self.by_change.insert((ordinal, at));
    }

    /// The positions of the entities changed after `ordinal`, in timeline order.
    pub(super) fn since(&self, ordinal: u64) -> Vec<usize> {
        let mut positions: Vec<usize> = self
            .by_change
            .range((ordinal.saturating_add(1), 0)..)
            .map(|&(_, at)| at)
            .collect();
        positions.sort_unstable();
        positions
    }
}
