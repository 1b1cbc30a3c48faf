//! Tools that ask a person before they run (`approval: ask` in a command file).
//!
//! Before such a call starts, the run appends `ChatToolApprovalRequested` with the options,
//! asks the session's [`Approver`] (an editor, over ACP's `session/request_permission`) and
//! appends `ChatToolApprovalDecided` with the answer: the decision is on the log before
//! anything runs. "Allow always" is remembered for that tool by the session's log
//! ([`AllowedAlways`], folded like every projection), so it holds after the session is loaded
//! again; a session with no approver (stdin RPC, `reel serve`) cannot ask, and such a call is
//! not run.

use std::collections::BTreeSet;

use reel_proto::Any;

use crate::{
    log::LogEntry,
    projection::Projection,
    vocabulary::{ApprovalDecision, ApprovalOption},
};

/// Whether a tool asks first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// It runs when the model calls it.
    #[default]
    Never,
    /// A person decides each call (or allows the tool for the session).
    Ask,
}

/// A call waiting for a decision.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalRequest<'a> {
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    /// The call's arguments (JSON text).
    pub arguments: &'a str,
}

/// Who decides the calls of `approval: ask` tools.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The option the person chose; `None` when they cancelled (or could not be asked).
    async fn ask(&self, request: ApprovalRequest<'_>) -> Option<ApprovalOption>;
}

/// The tools a person has allowed for the rest of the session ("allow always"): a projection of
/// the log's `ChatToolApprovalDecided` events, so a session loaded again, by any process,
/// remembers them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllowedAlways(BTreeSet<String>);

impl AllowedAlways {
    pub fn contains(&self, tool: &str) -> bool {
        self.0.contains(tool)
    }
}

impl Projection for AllowedAlways {
    type Output = ();

    fn apply(&mut self, entry: &LogEntry) {
        if let Any::ChatToolApprovalDecided(decided) = &entry.event
            && decided.always
            && decided.decision == ApprovalDecision::Allowed.as_str()
        {
            self.0.insert(decided.tool_name.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use reel_proto::chat::ChatToolApprovalDecided;

    use super::*;

    fn decided(ordinal: u64, tool: &str, decision: ApprovalDecision, always: bool) -> LogEntry {
        LogEntry {
            ordinal,
            recorded_at_ms: 0,
            event: ChatToolApprovalDecided {
                tool_name: tool.into(),
                decision: decision.into(),
                always,
                ..Default::default()
            }
            .into(),
        }
    }

    #[test]
    fn only_an_allowed_always_decision_is_remembered() {
        let log = [
            decided(1, "once", ApprovalDecision::Allowed, false),
            decided(2, "no", ApprovalDecision::Rejected, false),
            decided(3, "cancelled", ApprovalDecision::Cancelled, false),
            decided(4, "mail", ApprovalDecision::Allowed, true),
        ];
        let allowed = AllowedAlways::replay(&log);
        assert!(allowed.contains("mail"));
        for tool in ["once", "no", "cancelled"] {
            assert!(!allowed.contains(tool), "{tool}");
        }
    }
}
