//! The approval step of a call of an `approval: ask` tool: the request and the person's
//! decision are appended before the call may start.
//!
//! Two ways to ask. A host with an [`Approver`](crate::tools::Approver) (an editor, over ACP)
//! is asked, and the step waits for its answer. A host without one (stdin RPC, `reel serve`)
//! gets the question as the `ChatToolApprovalRequested` frame; the call waits, as an
//! [`ApprovalWait`], for an `approve` request, which [`Session::decide`] records.

use std::sync::Arc;

use reel_proto::chat::{ChatToolApprovalDecided, ChatToolApprovalRequested};
use tokio::sync::oneshot;

use super::{ActiveRun, record::RequestedTool};
use crate::{
    session::Session,
    tools::{ApprovalRequest, ToolOutput},
    vocabulary::{ApprovalDecision, ApprovalOption, ToolCallStatus},
};

/// What a person decided, handed to the call that waits for it.
pub(super) enum Verdict {
    Run,
    /// It does not run; the model reads why.
    Refuse(String),
}

/// A call waiting for an `approve` request: the call, and where the decision goes.
pub struct ApprovalWait {
    pub(super) call: RequestedTool,
    answer: oneshot::Sender<Verdict>,
}

impl ActiveRun<'_> {
    /// Takes the call `tool_call_id` that waits for a person's decision; `None` when no call of
    /// this run waits under that id (unknown, decided already, or not an `approval: ask` one).
    pub(crate) fn take_approval_wait(&mut self, tool_call_id: &str) -> Option<ApprovalWait> {
        let waits = &mut self.approval_waits;
        let at = waits
            .iter()
            .position(|wait| wait.call.tool_call_id == tool_call_id)?;
        Some(waits.swap_remove(at))
    }

    /// The calls waiting for a decision, taken (see [`Session::decide`]).
    pub(crate) fn take_approval_waits(&mut self) -> Vec<ApprovalWait> {
        std::mem::take(&mut self.approval_waits)
    }

    /// Lets the calls of the tool step run once none of them waits for a decision.
    pub(crate) fn open_step_if_decided(&mut self) {
        if self.approval_waits.is_empty()
            && let Some(gate) = self.step_gate.take()
        {
            let _ = gate.send(true);
        }
    }
}

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
                "not run: {} needs a person's approval (approval: ask) and nobody can be asked here; run it on a terminal, with --stdin-rpc (an approve request decides), in reel serve or in reel acp",
                call.name
            ));
        };
        let rid = Arc::clone(&run.request_id);
        if self.allowed_always.contains(&call.name) {
            let decided = decided(call, ApprovalDecision::Allowed, true, true);
            self.append(&rid, decided).await;
            return Approved::Yes;
        }
        self.append(&rid, requested(call)).await;
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
            ApprovalDecision::Rejected | ApprovalDecision::Expired => {
                Approved::No(declined(call, ""))
            }
            ApprovalDecision::Cancelled => Approved::Cancelled,
        }
    }

    /// Puts `call`'s question on the log for a host with nobody to ask directly: the call then
    /// waits for an `approve` request; the receiver gets the decision. `None` when the person
    /// allowed its tool for the session before (the decision is appended at once).
    pub(super) async fn ask_by_request(
        &mut self,
        run: &mut ActiveRun<'_>,
        call: &RequestedTool,
    ) -> Option<oneshot::Receiver<Verdict>> {
        let rid = Arc::clone(&run.request_id);
        if self.allowed_always.contains(&call.name) {
            let decided = decided(call, ApprovalDecision::Allowed, true, true);
            self.append(&rid, decided).await;
            return None;
        }
        self.append(&rid, requested(call)).await;
        let (answer, verdict) = oneshot::channel();
        run.approval_waits.push(ApprovalWait {
            call: call.clone(),
            answer,
        });
        Some(verdict)
    }

    /// Records a person's decision on a waiting call (an `approve` request; `None` when nobody
    /// is left to decide) on the log of the run that asked (`run_request`), then lets the call
    /// go on: it runs, or the model reads that it was declined, with `message`. The call runs
    /// only once the decision is stored.
    pub(crate) async fn decide(
        &mut self,
        run_request: &Arc<str>,
        wait: ApprovalWait,
        option: Option<ApprovalOption>,
        message: &str,
    ) {
        let ApprovalWait { call, answer } = wait;
        let (decision, always) = match option {
            Some(ApprovalOption::AllowOnce) => (ApprovalDecision::Allowed, false),
            Some(ApprovalOption::AllowAlways) => (ApprovalDecision::Allowed, true),
            Some(ApprovalOption::RejectOnce) => (ApprovalDecision::Rejected, false),
            None => (ApprovalDecision::Cancelled, false),
        };
        self.record_decision(run_request, &call, decision, always)
            .await;
        let verdict = match (decision, self.storage_holds().await) {
            (ApprovalDecision::Allowed, Ok(())) => Verdict::Run,
            (ApprovalDecision::Allowed, Err(_)) => {
                Verdict::Refuse("not run: the decision to run it could not be stored".to_owned())
            }
            (ApprovalDecision::Cancelled, _) => Verdict::Refuse(format!(
                "not run: nobody was left to decide on this call of {}",
                call.name
            )),
            _ => Verdict::Refuse(declined(&call, message)),
        };
        // The run may have ended meanwhile (stopped): then nobody waits, and nothing runs.
        let _ = answer.send(verdict);
    }

    /// Records that nobody decided on `wait`'s call within its tool's `approval_timeout` (its
    /// future ended, not run).
    pub(super) async fn expire(&mut self, run_request: &Arc<str>, wait: ApprovalWait) {
        let decision = ApprovalDecision::Expired;
        self.record_decision(run_request, &wait.call, decision, false)
            .await;
    }

    /// Appends the decision on `call`, then its `ChatToolExecutionStarted` (the call goes on,
    /// to run or to be answered with why it did not).
    async fn record_decision(
        &mut self,
        run_request: &Arc<str>,
        call: &RequestedTool,
        decision: ApprovalDecision,
        always: bool,
    ) {
        self.append(run_request, decided(call, decision, always, false))
            .await;
        let started = call.execution_started(ToolCallStatus::Executing);
        self.append(run_request, started).await;
    }
}

/// What the model reads of a call nobody decided on within `timeout`.
pub(super) fn expired(name: &str, timeout: std::time::Duration) -> ToolOutput {
    ToolOutput::error(format!(
        "not run: nobody decided on this call of {name} within {}",
        humanize(timeout)
    ))
}

/// A timeout as a person reads it: whole seconds, minutes or hours.
fn humanize(timeout: std::time::Duration) -> String {
    let seconds = timeout.as_secs();
    match seconds {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s if s > 0 => format!("{s} s"),
        _ => format!("{} ms", timeout.as_millis()),
    }
}

/// The call's question: `ChatToolApprovalRequested` with every option.
fn requested(call: &RequestedTool) -> ChatToolApprovalRequested {
    ChatToolApprovalRequested {
        tool_call_id: call.tool_call_id.clone(),
        tool_name: call.name.clone(),
        input: call.arguments.clone(),
        options: ApprovalOption::ALL
            .iter()
            .map(|o| String::from(*o))
            .collect(),
        correlation: Some(call.correlation.clone()),
    }
}

/// What the model reads of a declined call, with the person's words when they gave some.
fn declined(call: &RequestedTool, message: &str) -> String {
    let mut why = format!("not run: the person declined this call of {}", call.name);
    if !message.trim().is_empty() {
        why.push_str(": ");
        why.push_str(message.trim());
    }
    why
}

/// The output of a call that waited for a decision and got `verdict` (or none: the run ended).
pub(super) fn after_verdict(
    verdict: Result<Verdict, oneshot::error::RecvError>,
) -> Option<ToolOutput> {
    match verdict {
        Ok(Verdict::Run) => None,
        Ok(Verdict::Refuse(why)) => Some(ToolOutput::error(why)),
        Err(_) => Some(ToolOutput::error("not run: nobody decided on this call")),
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
