//! Tools that ask a person before they run (`approval: ask` in a command file).
//!
//! Before such a call starts, the run appends `ChatToolApprovalRequested` with the options,
//! asks the session's [`Approver`] (an editor, over ACP's `session/request_permission`) and
//! appends `ChatToolApprovalDecided` with the answer: the decision is on the log before
//! anything runs. "Allow always" is remembered by the session for that tool; a session with no
//! approver (stdin RPC, `reel serve`) cannot ask, and such a call is not run.

use std::collections::HashSet;

use crate::vocabulary::ApprovalOption;

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

/// The tools a person has allowed for the rest of the session.
#[derive(Debug, Default)]
pub struct AllowedAlways(HashSet<String>);

impl AllowedAlways {
    pub fn contains(&self, tool: &str) -> bool {
        self.0.contains(tool)
    }

    pub fn insert(&mut self, tool: &str) {
        self.0.insert(tool.to_owned());
    }
}
