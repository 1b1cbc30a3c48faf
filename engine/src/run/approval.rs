//! The approval step of a call of an `approval: ask` tool (see [`crate::tools::Approver`]): the
//! request and the person's decision are appended before the call may start.

use std::sync::Arc;

use reel_proto::chat::{ChatToolApprovalDecided, ChatToolApprovalRequested};

use super::{ActiveRun, record::RequestedTool};
use crate::{
    session::Session,
    tools::ApprovalRequest,
    vocabulary::{ApprovalDecision, ApprovalOption},
};

/// What became of an approval.
pub(super) enum Approved {
    /// The call may run.
    Yes,
    /// It does not run; the model reads why.
    No(String),
    /// The person cancelled the prompt while it waited: the run stops.
    Cancelled,
}

impl Session {
    /// Asks the run's approver whether `call` may run (not when the person allowed its tool for
    /// the session before); both the question and the answer go on the log.
    pub(super) async fn approve(&mut self, run: &ActiveRun<'_>, call: &RequestedTool) -> Approved {
        let Some(approver) = run.approver else {
            return Approved::No(format!(
                "not run: {} needs a person's approval (approval: ask) and this session has nobody to ask; run it from an editor with reel acp",
                call.name
            ));
        };
        let rid = Arc::clone(&run.request_id);
        if self.allowed_always.contains(&call.name) {
            let decided = decided(call, ApprovalDecision::Allowed, true, true);
            self.append(&rid, decided).await;
            return Approved::Yes;
        }
        let requested = ChatToolApprovalRequested {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.name.clone(),
            input: call.arguments.clone(),
            options: ApprovalOption::ALL
                .iter()
                .map(|o| String::from(*o))
                .collect(),
            correlation: Some(call.correlation.clone()),
        };
        self.append(&rid, requested).await;
        let answer = approver
            .ask(ApprovalRequest {
                tool_call_id: &call.tool_call_id,
                tool_name: &call.name,
                arguments: &call.arguments,
            })
            .await;
        let (decision, always) = match answer {
            Some(ApprovalOption::AllowOnce) => (ApprovalDecision::Allowed, false),
            Some(ApprovalOption::AllowAlways) => (ApprovalDecision::Allowed, true),
            Some(ApprovalOption::RejectOnce) => (ApprovalDecision::Rejected, false),
            None => (ApprovalDecision::Cancelled, false),
        };
        // Appending the decision is what remembers an "allow always" (see AllowedAlways).
        self.append(&rid, decided(call, decision, always, false))
            .await;
        match decision {
            ApprovalDecision::Allowed => Approved::Yes,
            ApprovalDecision::Rejected => Approved::No(format!(
                "not run: the person declined this call of {}",
                call.name
            )),
            ApprovalDecision::Cancelled => Approved::Cancelled,
        }
    }
}

fn decided(
    call: &RequestedTool,
    decision: ApprovalDecision,
    always: bool,
    remembered: bool,
) -> ChatToolApprovalDecided {
    ChatToolApprovalDecided {
        tool_call_id: call.tool_call_id.clone(),
        tool_name: call.name.clone(),
        decision: decision.into(),
        always,
        remembered,
        correlation: Some(call.correlation.clone()),
    }
}
