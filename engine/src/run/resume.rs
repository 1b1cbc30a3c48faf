//! A run that waits for a person, taken up again by a new process.
//!
//! A run whose tool step waits for a decision (`ChatToolApprovalRequested` without its
//! `ChatToolApprovalDecided`) is not interrupted when its process ends: the log holds
//! everything it needs. No call of that step has run (the step's gate holds every call while
//! one waits), so the step starts over from the log: the calls still asking wait for a
//! decision again (what is left of their `approval_timeout` with them; one that expired while
//! nobody held the session is decided `expired` at once), the others run once the step's last
//! decision is in, and the run goes on with the same run id.
//!
//! A tool step its process left in the middle (a call started and never finished) goes on the
//! same way when its tools say so (`on_interrupted: retry` runs the call again with the same
//! idempotency key, `ask` asks a person first); `fail`, the default, answers it interrupted.

use std::sync::Arc;

use reel_proto::chat::ToolCallEntity;

use super::{ActiveRun, RunKind, RunRequest, record::RequestedTool, tool_calls::Arrival};
use crate::{
    session::Session,
    tools::{OnInterrupted, Toolbox},
    vocabulary::ToolCallStatus,
};

impl Session {
    /// The run the log shows waiting for a person's decision, or with tool calls to run again
    /// (see [`Session::close_interrupted_run`], which leaves only such a run open), taken up
    /// again with what
    /// `request` brings (its request id may be empty: the first `approve` adopts the run, see
    /// [`ActiveRun::adopt`]). `None` when no run waits, or when nobody could ever decide (no
    /// approver, no client that sends requests, no store to wait in).
    pub async fn resume_waiting_run<'a>(
        &mut self,
        request: RunRequest<'a>,
    ) -> Option<ActiveRun<'a>> {
        let open = self.timeline().open_run()?.clone();
        let calls = self.timeline().unanswered_tool_calls();
        let nobody_decides =
            request.approver.is_none() && !request.tool_client && !self.is_durable();
        if open.call_open
            || calls.is_empty()
            || (self.timeline().awaits_decision() && nobody_decides)
        {
            return None;
        }
        let correlation = open.correlation.clone().unwrap_or_default();
        let ordinal_before = self.log().last_ordinal();
        let mut run = ActiveRun::new(
            RunKind::Prompt,
            request,
            ordinal_before,
            open.message_id,
            correlation,
        );
        run.calls = open.reply_calls;
        let step = calls.into_iter().map(step_call).collect();
        self.start_step(&mut run, step).await;
        Some(run)
    }
}

impl Session {
    /// The calls of the tool step the log shows interrupted (started, never finished; no call
    /// of it waits for a decision), each as its tool's `on_interrupted` says: `fail` answers it
    /// interrupted, `retry` leaves it to run again with the same idempotency key, `ask` puts
    /// the question whether it runs again on the log. Whether the run goes on (a call runs
    /// again or asks); when it does not, nothing was appended.
    pub(crate) async fn interrupted_step_goes_on(
        &mut self,
        request_id: &Arc<str>,
        tools: &Toolbox,
    ) -> bool {
        if self.timeline().open_run().is_none_or(|run| run.call_open) {
            return false;
        }
        let calls = self.timeline().unanswered_tool_calls();
        let again = |call: &ToolCallEntity| {
            let started = matches!(
                ToolCallStatus::parse(&call.status),
                Some(ToolCallStatus::Executing | ToolCallStatus::AwaitingClient)
            );
            match tools.on_interrupted(&call.tool_name) {
                _ if !started => None,
                OnInterrupted::Fail => None,
                other => Some(other),
            }
        };
        if !calls.iter().any(|call| again(call).is_some()) {
            return false;
        }
        for call in calls {
            let started = matches!(
                ToolCallStatus::parse(&call.status),
                Some(ToolCallStatus::Executing | ToolCallStatus::AwaitingClient)
            );
            match again(&call) {
                Some(OnInterrupted::Ask) => {
                    let (call, _) = step_call(call);
                    let timeout = tools.approval_timeout(&call.name);
                    let question = super::approval::asked_again(&call, timeout);
                    self.append(request_id, question).await;
                }
                Some(_) => {}
                // Never started: it runs when the run goes on.
                None if !started => {}
                None => self.answer_interrupted(request_id, call).await,
            }
        }
        true
    }
}

/// A call of the waiting step, as its entity says it stands.
fn step_call(call: ToolCallEntity) -> (RequestedTool, Arrival) {
    let arrival = match ToolCallStatus::parse(&call.status) {
        Some(ToolCallStatus::AwaitingApproval) => Arrival::Asked {
            asked_at_ms: call.approval_requested_at_ms,
        },
        // Asked for, and its process ended before it could even say it started.
        Some(ToolCallStatus::Pending) => Arrival::New,
        _ => Arrival::Started,
    };
    let mut correlation = call.correlation.unwrap_or_default();
    correlation.tool_call_id.clone_from(&call.tool_call_id);
    let requested = RequestedTool {
        tool_call_id: call.tool_call_id,
        message_id: call.message_id,
        name: call.tool_name,
        arguments: call.input,
        correlation,
        requested_ordinal: call.requested_ordinal,
    };
    (requested, arrival)
}

impl ActiveRun<'_> {
    /// Gives a run taken up again without a request (see [`Session::resume_waiting_run`]) the
    /// request that continues it: its frames and its `done` go under `request_id` from now
    /// on. False when the run answers a request already.
    pub fn adopt(&mut self, request_id: &Arc<str>) -> bool {
        if !self.request_id.is_empty() {
            return false;
        }
        self.request_id = Arc::clone(request_id);
        true
    }

    /// Whether a call of the run waits for a person's decision: nothing of the run can go on
    /// until one comes (or its approval_timeout passes).
    pub fn awaits_decision(&self) -> bool {
        !self.approval_waits.is_empty()
    }
}
