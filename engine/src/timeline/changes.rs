//! Which timeline entities changed after an ordinal, found without looking at every entity.
//!
//! Each request over stdin RPC ends with the entities it changed (`snapshot_since`). Scanning
//! all entities for that cost every request the session's age; this index keeps each entity's
//! last event ordinal in order, so the answer costs what changed. It is not stored in
//! snapshots: a projection read back from one rebuilds it on its next event (and answers by a
//! scan until then).
//!
//! A streamed reply changes one entity at every delta: the entity changed last is kept beside
//! the ordered set, not in it, so that each of those changes is two integer writes instead of a
//! removal from and an insertion into the set (a fifth of what the session's fold of a delta
//! cost).

use std::collections::BTreeSet;

use reel_proto::rpc::SnapshotEntity;

/// Every entity's (last event ordinal, position in the timeline).
#[derive(Clone, Debug, Default)]
pub(super) struct ChangeIndex {
    /// Every entity but the one changed last.
    by_change: BTreeSet<(u64, usize)>,
    /// The entity changed last: (its last event ordinal, its position).
    last: Option<(u64, usize)>,
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
            last: None,
        }
    }

    /// Whether the index knows all of `entities` (it does not right after a snapshot is read).
    pub(super) fn covers(&self, entities: &[SnapshotEntity]) -> bool {
        self.by_change.len() + usize::from(self.last.is_some()) == entities.len()
    }

    /// The entity at `at` changed at `ordinal`; `before` is its previous last event ordinal
    /// (`None` for a new entity).
    pub(super) fn changed(&mut self, at: usize, before: Option<u64>, ordinal: u64) {
        match self.last {
            Some((_, last_at)) if last_at == at => {}
            _ => {
                if let Some(before) = before {
                    self.by_change.remove(&(before, at));
                }
                if let Some(last) = self.last {
                    self.by_change.insert(last);
                }
            }
        }
        self.last = Some((ordinal, at));
    }

    /// The positions of the entities changed after `ordinal`, in timeline order.
    pub(super) fn since(&self, ordinal: u64) -> Vec<usize> {
        let mut positions: Vec<usize> = self
            .by_change
            .range((ordinal.saturating_add(1), 0)..)
            .copied()
            .chain(self.last.filter(|&(changed, _)| changed > ordinal))
            .map(|(_, at)| at)
            .collect();
        positions.sort_unstable();
        positions
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever entities change in whatever order, `since` answers what a scan of every
        /// entity's last change answers.
        #[test]
        fn since_agrees_with_a_scan(
            changes in prop::collection::vec((0usize..6, any::<bool>()), 1..60),
            asked in 0u64..70,
        ) {
            let mut index = ChangeIndex::default();
            let mut last_change: Vec<u64> = Vec::new();
            for (ordinal, (pick, new)) in (1u64..).zip(changes) {
                if new || last_change.is_empty() {
                    index.changed(last_change.len(), None, ordinal);
                    last_change.push(ordinal);
                } else {
                    let at = pick % last_change.len();
                    index.changed(at, Some(last_change[at]), ordinal);
                    last_change[at] = ordinal;
                }
            }
            let scanned: Vec<usize> = (0..last_change.len())
                .filter(|&at| last_change[at] > asked)
                .collect();
            prop_assert_eq!(index.since(asked), scanned);
            prop_assert_eq!(
                index.by_change.len() + usize::from(index.last.is_some()),
                last_change.len()
            );
        }
    }
}
