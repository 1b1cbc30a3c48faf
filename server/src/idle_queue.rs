//! The loaded sessions in the order they are next due a look for eviction.
//!
//! The idle sweep used to look at every loaded session each time it ran (once a second): with
//! 10,000 sessions loaded and idle, that walk (a lock and a few cold cache lines a session)
//! cost the server 15-70 ms of CPU a second, so the more sessions sat idle, the more they
//! cost. Now each session waits here until the moment it could first be idle (its last use
//! plus the timeout), and a sweep looks only at the sessions whose moment has come: its cost
//! follows what is due, not what is loaded.

use std::{cmp::Ordering, collections::BinaryHeap, sync::Mutex};

use tokio::time::Instant;

/// Items waiting for their time, soonest first.
pub struct IdleQueue<T> {
    due: Mutex<Waiting<T>>,
}

struct Waiting<T> {
    heap: BinaryHeap<Due<T>>,
    /// Pushes so far: items due at the same instant come out in the order they went in.
    pushed: u64,
}

impl<T> Default for IdleQueue<T> {
    fn default() -> Self {
        Self {
            due: Mutex::new(Waiting {
                heap: BinaryHeap::new(),
                pushed: 0,
            }),
        }
    }
}

impl<T> IdleQueue<T> {
    /// `item` is due at `at`.
    pub fn push(&self, at: Instant, item: T) {
        let mut waiting = self.waiting();
        waiting.pushed += 1;
        let order = waiting.pushed;
        waiting.heap.push(Due { at, order, item });
    }

    /// The items due at `now` or before, soonest first; the others stay.
    pub fn take_due(&self, now: Instant) -> Vec<T> {
        let mut waiting = self.waiting();
        let mut due = Vec::new();
        while waiting.heap.peek().is_some_and(|first| first.at <= now) {
            if let Some(first) = waiting.heap.pop() {
                due.push(first.item);
            }
        }
        due
    }

    /// Items waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting().heap.len()
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting<T>> {
        // Pushes and pops only: a panic while it was held left the heap whole.
        self.due
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An item and when it is due; ordered so that the max-heap pops the soonest.
struct Due<T> {
    at: Instant,
    order: u64,
    item: T,
}

impl<T> Due<T> {
    fn key(&self) -> (Instant, u64) {
        (self.at, self.order)
    }
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Due<T> {}

impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Due<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn items_come_out_when_due_soonest_first_and_in_order_at_one_instant() {
        let queue = IdleQueue::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        queue.push(at(30), "c");
        queue.push(at(10), "a");
        queue.push(at(20), "b1");
        queue.push(at(20), "b2");
        assert!(queue.take_due(at(5)).is_empty());
        assert_eq!(queue.take_due(at(20)), ["a", "b1", "b2"]);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.take_due(at(1_000)), ["c"]);
        assert_eq!(queue.len(), 0);
    }
}
