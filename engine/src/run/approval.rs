//! The approval step of a call of an `approval: ask` tool: the request and the person's
//! decision are appended before the call may start.
//!
//! Two ways to ask. A host with an [`Approver`](crate::tools::Approver) (an editor, over ACP)
//! is asked, and the step waits for its answer. A host without one (stdin RPC, `reel serve`)
//! gets the question as the `ChatToolApprovalRequested` frame; the call waits, as an
//! [`ApprovalWait`], for an `approve` request, which [`Session::decide`] records.

use std::{sync::Arc, time::Duration};

use reel_proto::chat::{ChatToolApprovalDecided, ChatToolApprovalRequested};
use tokio::sync::{oneshot, watch};

use super::{ActiveRun, record::RequestedTool};
use crate::{
    session::Session,
    tools::{ApprovalRequest, Execution, ToolOutput},
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

    /// Whether the call `tool_call_id` of this run waits for a person's decision.
    pub fn waits_for(&self, tool_call_id: &str) -> bool {
        self.approval_waits
            .iter()
            .any(|wait| wait.call.tool_call_id == tool_call_id)
    }

    /// The ids of the calls of this run that wait for a person's decision, in the order asked.
    pub fn calls_awaiting_decision(&self) -> impl Iterator<Item = &str> {
        self.approval_waits
            .iter()
            .map(|wait| wait.call.tool_call_id.as_str())
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
    /// the session before); both the question (unless `asked_before`: a waiting run taken up
    /// again) and the answer go on the log.
    pub(super) async fn approve(
        &mut self,
        run: &ActiveRun<'_>,
        call: &RequestedTool,
        asked_before: bool,
    ) -> Approved {
        let Some(approver) = run.approver else {
            return Approved::No(format!(
                "not run: {} needs a person's approval (approval: ask) and nobody can be asked here; run it on a terminal, with --stdin-rpc (an approve request decides), with a timeline database (the run waits for reel approve), in reel serve or in reel acp",
                call.name
            ));
        };
        let rid = Arc::clone(&run.request_id);
        if self.allowed_always.contains(&call.name) {
            let decided = decided(call, ApprovalDecision::Allowed, true, true);
            self.append(&rid, decided).await;
            return Approved::Yes;
        }
        if !asked_before {
            self.append(&rid, requested(call, None)).await;
        }
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

    /// Puts `call`'s question on the log (unless `asked_before`: a waiting run taken up again)
    /// for a host with nobody to ask directly: the call then waits for an `approve` request;
    /// the receiver gets the decision. `None` when the person allowed its tool for the session
    /// before (the decision is appended at once).
    pub(super) async fn ask_by_request(
        &mut self,
        run: &mut ActiveRun<'_>,
        call: &RequestedTool,
        asked_before: bool,
    ) -> Option<oneshot::Receiver<Verdict>> {
        let rid = Arc::clone(&run.request_id);
        if self.allowed_always.contains(&call.name) {
            let decided = decided(call, ApprovalDecision::Allowed, true, true);
            self.append(&rid, decided).await;
            return None;
        }
        if !asked_before {
            let timeout = run.tools.approval_timeout(&call.name);
            self.append(&rid, requested(call, timeout)).await;
        }
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

    /// Records a person's decision on the call `tool_call_id` of `run` that waits for one (see
    /// [`Session::decide`]) and lets the step go on once none of its calls waits any more.
    /// False, with nothing appended, when no call of the run waits under that id.
    pub async fn decide_call(
        &mut self,
        run: &mut ActiveRun<'_>,
        tool_call_id: &str,
        option: ApprovalOption,
        message: &str,
    ) -> bool {
        let Some(wait) = run.take_approval_wait(tool_call_id) else {
            return false;
        };
        let run_request = Arc::clone(&run.request_id);
        self.decide(&run_request, wait, Some(option), message).await;
        run.open_step_if_decided();
        true
    }

    /// Records that nobody decided on `wait`'s call within its tool's `approval_timeout` (its
    /// future ended, not run).
    pub(super) async fn expire(&mut self, run_request: &Arc<str>, wait: ApprovalWait) {
        let decision = ApprovalDecision::Expired;
        self.record_decision(run_request, &wait.call, decision, false)
            .await;
    }

    /// A call whose question is on the log and that nobody here can decide on (its tool is gone
    /// or cannot run, or the host can ask nobody): decided `cancelled`; what the model reads.
    pub(super) async fn unaskable(
        &mut self,
        run: &ActiveRun<'_>,
        call: &RequestedTool,
    ) -> ToolOutput {
        let rid = Arc::clone(&run.request_id);
        self.record_decision(&rid, call, ApprovalDecision::Cancelled, false)
            .await;
        ToolOutput::error(format!(
            "not run: nobody here can decide on this call of {}, or its tool cannot run any more",
            call.name
        ))
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

/// `execution` of a call waiting for a decision: it waits for `verdict` (at most the
/// `(timeout, left)` of its tool's `approval_timeout`, `left` of it still to go), then for the
/// step's gate, then runs; a refusal or an expiry is its output instead.
pub(super) fn after_decision<'a>(
    execution: Execution<'a>,
    name: &str,
    verdict: oneshot::Receiver<Verdict>,
    timeout: Option<(Duration, Duration)>,
    mut gated: watch::Receiver<bool>,
) -> Execution<'a> {
    let Execution::Running(work) = execution else {
        return execution;
    };
    let name = name.to_owned();
    Execution::Running(Box::pin(async move {
        let verdict = match timeout {
            Some((timeout, left)) => match tokio::time::timeout(left, verdict).await {
                Ok(verdict) => verdict,
                Err(_) => return expired(&name, timeout),
            },
            None => verdict.await,
        };
        if let Some(refused) = after_verdict(verdict) {
            return refused;
        }
        let _ = gated.wait_for(|open| *open).await;
        work.await
    }))
}

/// What is left of `timeout` for a question asked at `asked_at_ms` (now: all of it).
pub(super) fn remaining(timeout: Duration, asked_at_ms: Option<u64>) -> Duration {
    let Some(asked_at_ms) = asked_at_ms else {
        return timeout;
    };
    let waited = crate::log::now_ms().saturating_sub(asked_at_ms);
    timeout.saturating_sub(Duration::from_millis(waited))
}

/// What the model reads of a call nobody decided on within `timeout`.
fn expired(name: &str, timeout: std::time::Duration) -> ToolOutput {
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

/// The call's question: `ChatToolApprovalRequested` with every option, expiring after
/// `timeout` (its tool's approval_timeout) when there is one.
fn requested(call: &RequestedTool, timeout: Option<Duration>) -> ChatToolApprovalRequested {
    ChatToolApprovalRequested {
        tool_call_id: call.tool_call_id.clone(),
        tool_name: call.name.clone(),
        input: call.arguments.clone(),
        options: ApprovalOption::ALL
            .iter()
            .map(|o| String::from(*o))
            .collect(),
        correlation: Some(call.correlation.clone()),
        interrupted: false,
        expires_at_ms: timeout.map_or(0, |timeout| {
            crate::log::now_ms().saturating_add(timeout.as_millis() as u64)
        }),
    }
}

/// The question whether `call`, interrupted once, runs again (`on_interrupted: ask`).
pub(super) fn asked_again(
    call: &RequestedTool,
    timeout: Option<Duration>,
) -> ChatToolApprovalRequested {
    ChatToolApprovalRequested {
        interrupted: true,
        ..requested(call, timeout)
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
fn after_verdict(verdict: Result<Verdict, oneshot::error::RecvError>) -> Option<ToolOutput> {
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
