//! The deadlines of a session's calls waiting for a person: a call of a tool with an
//! `approval_timeout` is decided `expired` at its deadline if nobody decides first. A store
//! keeps them beside the session, so that a server finds the sessions whose deadline has
//! passed by reading those and nothing else (reading every waiting session to find them cost
//! in proportion to the inbox, at every sweep). Like the inbox's count, they follow from the
//! events of each commit.

use std::sync::Arc;

use reel_proto::Any;

use crate::log::LogEntry;

/// How a batch of events changes a session's deadlines, to be applied in this order: every
/// one dropped when a run ended in it, then `removed` dropped, then `set` written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadlineChanges {
    /// A run ended: nothing of it waits any more.
    pub cleared: bool,
    /// Calls that no longer wait, or wait without a deadline now.
    pub removed: Vec<String>,
    /// Calls that wait until a deadline (milliseconds since the Unix epoch), by call id.
    pub set: Vec<(String, u64)>,
}

impl DeadlineChanges {
    /// The changes `events` make, in order.
    pub fn of(events: &[Arc<LogEntry>]) -> Self {
        let mut changes = Self::default();
        for entry in events {
            match &entry.event {
                Any::ChatToolApprovalRequested(asked) if asked.expires_at_ms > 0 => {
                    changes.wait(&asked.tool_call_id, asked.expires_at_ms);
                }
                // Asked again without a deadline (an interrupted call's question).
                Any::ChatToolApprovalRequested(asked) => changes.remove(&asked.tool_call_id),
                Any::ChatToolApprovalDecided(decided) => changes.remove(&decided.tool_call_id),
                Any::ChatRunFinished(_) | Any::ChatRunStopped(_) | Any::ChatRunFailed(_) => {
                    changes = Self {
                        cleared: true,
                        ..Self::default()
                    };
                }
                _ => {}
            }
        }
        changes
    }

    /// Whether applying them changes nothing.
    pub fn is_empty(&self) -> bool {
        !self.cleared && self.removed.is_empty() && self.set.is_empty()
    }

    fn wait(&mut self, call_id: &str, until_ms: u64) {
        self.removed.retain(|id| id != call_id);
        self.set.retain(|(id, _)| id != call_id);
        self.set.push((call_id.to_owned(), until_ms));
    }

    fn remove(&mut self, call_id: &str) {
        self.set.retain(|(id, _)| id != call_id);
        if !self.removed.iter().any(|id| id == call_id) {
            self.removed.push(call_id.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use reel_proto::chat::{ChatRunFinished, ChatToolApprovalDecided, ChatToolApprovalRequested};

    use super::*;

    fn entry(event: impl Into<Any>) -> Arc<LogEntry> {
        Arc::new(LogEntry {
            ordinal: 1,
            recorded_at_ms: 0,
            event: event.into(),
        })
    }

    fn asked(call: &str, until_ms: u64) -> Arc<LogEntry> {
        entry(ChatToolApprovalRequested {
            tool_call_id: call.into(),
            expires_at_ms: until_ms,
            ..Default::default()
        })
    }

    fn decided(call: &str) -> Arc<LogEntry> {
        entry(ChatToolApprovalDecided {
            tool_call_id: call.into(),
            decision: "allow_once".into(),
            ..Default::default()
        })
    }

    fn run_finished() -> Arc<LogEntry> {
        entry(ChatRunFinished::default())
    }

    #[test]
    fn a_question_with_a_timeout_sets_its_deadline_and_one_without_sets_none() {
        let changes = DeadlineChanges::of(&[asked("a", 50), asked("b", 0)]);
        assert_eq!(changes.set, vec![("a".to_owned(), 50)]);
        assert_eq!(changes.removed, vec!["b".to_owned()]);
        assert!(!changes.cleared);
    }

    #[test]
    fn a_decision_removes_the_deadline_even_when_asked_in_the_same_batch() {
        let changes = DeadlineChanges::of(&[asked("a", 50), asked("b", 60), decided("a")]);
        assert_eq!(changes.set, vec![("b".to_owned(), 60)]);
        assert_eq!(changes.removed, vec!["a".to_owned()]);
    }

    #[test]
    fn asked_again_the_newest_deadline_counts() {
        let changes = DeadlineChanges::of(&[decided("a"), asked("a", 70), asked("a", 80)]);
        assert_eq!(changes.set, vec![("a".to_owned(), 80)]);
        assert!(changes.removed.is_empty());
    }

    #[test]
    fn a_run_end_clears_what_came_before_it_and_keeps_what_came_after() {
        let changes = DeadlineChanges::of(&[asked("a", 50), run_finished(), asked("b", 90)]);
        assert!(changes.cleared);
        assert_eq!(changes.set, vec![("b".to_owned(), 90)]);
        assert!(changes.removed.is_empty());
        assert!(DeadlineChanges::of(&[]).is_empty());
        assert!(!DeadlineChanges::of(&[run_finished()]).is_empty());
    }
}
