//! One request line, checked and answered: the request kinds of stdin RPC.

use std::sync::Arc;

use reel_proto::rpc::{self, ApproveRequest, RpcRequestLine, rpc_request_line::Request};

use super::{Next, Server};
use crate::{
    id::{check_request_id, check_session_id, new_id},
    run::{CompactRequest, RunRequest},
    tools::ToolOutput,
    vocabulary::{ApprovalOption, DoneStatus, DropReason, ErrorCode, QueuedPromptKind},
};

impl<'a> Server<'a> {
    pub(super) async fn request(&mut self, line: RpcRequestLine) -> Next {
        if let Err(error) = check_request_id(&line.request_id) {
            // An id over the limit is not an id: it is never echoed, and no done can name it.
            let none: Arc<str> = Arc::from("");
            self.session
                .emit_error(
                    &none,
                    ErrorCode::InvalidRequestId,
                    &error.to_string(),
                    false,
                )
                .await;
            return Next::Continue;
        }
        let rid: Arc<str> = if line.request_id.is_empty() {
            Arc::from(new_id())
        } else {
            Arc::from(line.request_id)
        };
        if line.version != 0 && line.version != rpc::PROTOCOL_VERSION {
            let message = format!(
                "protocol version {} is not spoken here (this server speaks version {})",
                line.version,
                rpc::PROTOCOL_VERSION
            );
            return self
                .refuse(&rid, ErrorCode::UnsupportedVersion, &message)
                .await;
        }
        if !line.session_id.is_empty()
            && let Err(error) = check_session_id(&line.session_id)
        {
            return self
                .refuse(&rid, ErrorCode::InvalidSessionId, &error.to_string())
                .await;
        }
        let other_session = !line.session_id.is_empty() && line.session_id != self.session.id();
        let fixed = self.bound || self.config.id_fixed;
        if other_session && (fixed || !self.session.bind_id(&line.session_id)) {
            let message = format!(
                "this process serves session {:?}, not {:?}; start another process for another session",
                self.session.id(),
                line.session_id
            );
            return self
                .refuse(&rid, ErrorCode::SessionMismatch, &message)
                .await;
        }
        self.bound = true;
        match line.request {
            Some(Request::Submit(submit)) => self.submit(rid, submit.prompt).await,
            Some(Request::FollowUp(follow_up)) => self.follow_up(rid, follow_up.prompt).await,
            Some(Request::Steer(steer)) => self.steer(rid, steer.prompt).await,
            Some(Request::Compact(compact)) => self.compact(rid, compact.instructions).await,
            Some(Request::Cancel(cancel)) => self.cancel(rid, cancel.clear_queue).await,
            Some(Request::Snapshot(_)) => {
                self.session.emit_snapshot(&rid).await;
                self.session.emit_done(&rid, DoneStatus::Ok).await;
                Next::Continue
            }
            Some(Request::ToolResult(answer)) => {
                let output = ToolOutput {
                    result: answer.result,
                    is_error: answer.is_error,
                };
                let taken = self
                    .active
                    .as_mut()
                    .is_some_and(|run| run.answer_client_tool(&answer.tool_call_id, output));
                if !taken {
                    let message = format!(
                        "no client tool call {:?} is waiting for a result",
                        answer.tool_call_id
                    );
                    return self
                        .refuse(&rid, ErrorCode::UnknownToolCall, &message)
                        .await;
                }
                self.session.emit_done(&rid, DoneStatus::Ok).await;
                Next::Continue
            }
            Some(Request::Approve(approve)) => self.approve(rid, approve).await,
            Some(Request::Shutdown(_)) => Next::Drain(Some(rid)),
            None => {
                let message = "the request names no known kind (submit, followUp, steer, \
                               cancel, compact, snapshot, toolResult, approve, shutdown)";
                self.refuse(&rid, ErrorCode::UnknownRequest, message).await
            }
        }
    }

    /// A person's decision on a call that waits for one: recorded on the run's log, its own
    /// `done` `ok`, and the call goes on. Refused, with nothing appended, when the decision is
    /// not one of the options or no call of the running submit waits under that id.
    async fn approve(&mut self, rid: Arc<str>, approve: ApproveRequest) -> Next {
        let Some(option) = ApprovalOption::parse(&approve.decision) else {
            let message = format!(
                "decision {:?} is not one of allow_once, allow_always, reject_once",
                approve.decision
            );
            return self
                .refuse(&rid, ErrorCode::InvalidDecision, &message)
                .await;
        };
        let Some(run) = self.active.as_mut() else {
            let message = "no run is waiting for a decision";
            return self.refuse(&rid, ErrorCode::NoActiveRequest, message).await;
        };
        if !run.waits_for(&approve.call_id) {
            let message = format!(
                "no call {:?} waits for a decision (unknown, or decided already)",
                approve.call_id
            );
            return self
                .refuse(&rid, ErrorCode::UnknownToolCall, &message)
                .await;
        }
        // The first decision on a run taken up from the store continues it: the rest of the
        // run is this request's, and its done is the run's end.
        let continues = run.adopt(&rid);
        self.session
            .decide_call(run, &approve.call_id, option, &approve.message)
            .await;
        if !continues {
            self.session.emit_done(&rid, DoneStatus::Ok).await;
        }
        Next::Continue
    }

    async fn submit(&mut self, rid: Arc<str>, prompt: String) -> Next {
        if prompt.trim().is_empty() {
            return self
                .refuse(&rid, ErrorCode::EmptyPrompt, "the prompt is empty")
                .await;
        }
        if let Some(run) = &self.active {
            let message = if run.awaits_decision() {
                "a run of this session waits for a decision on a tool call (see the snapshot's \
                 awaiting_approval calls); send approve, or followUp to run this prompt after it"
                    .to_owned()
            } else {
                format!(
                    "request {:?} is still running; wait for its done, or send followUp to run \
                     this prompt after it",
                    run.request_id()
                )
            };
            return self.refuse(&rid, ErrorCode::SessionBusy, &message).await;
        }
        if let Some(message) = self.session_budget_spent() {
            return self.refuse(&rid, ErrorCode::BudgetExceeded, &message).await;
        }
        self.start_prompt(rid, prompt).await;
        Next::Continue
    }

    /// A follow-up waits for the running submit; with none running it is a submit.
    async fn follow_up(&mut self, rid: Arc<str>, prompt: String) -> Next {
        let Some(run) = &self.active else {
            return self.submit(rid, prompt).await;
        };
        if prompt.trim().is_empty() {
            return self
                .refuse(&rid, ErrorCode::EmptyPrompt, "the prompt is empty")
                .await;
        }
        let correlation = run.correlation().clone();
        self.session
            .queue_prompt(&rid, QueuedPromptKind::FollowUp, prompt, &correlation)
            .await;
        // Its done comes when its own run ends.
        Next::Continue
    }

    /// A steer goes into the running submit at its next model call.
    async fn steer(&mut self, rid: Arc<str>, prompt: String) -> Next {
        if prompt.trim().is_empty() {
            return self
                .refuse(&rid, ErrorCode::EmptyPrompt, "the prompt is empty")
                .await;
        }
        let Some(run) = self.active.as_ref().filter(|run| run.takes_steering()) else {
            let message = "there is no running submit to steer; send submit (or followUp)";
            return self.refuse(&rid, ErrorCode::NoActiveRequest, message).await;
        };
        let correlation = run.correlation().clone();
        self.session
            .queue_prompt(&rid, QueuedPromptKind::Steer, prompt, &correlation)
            .await;
        self.session.emit_done(&rid, DoneStatus::Ok).await;
        Next::Continue
    }

    async fn compact(&mut self, rid: Arc<str>, instructions: String) -> Next {
        if let Some(run) = &self.active {
            let message = format!(
                "request {:?} is still running; compact after its done (a run compacts on its \
                 own when its context passes context.compact_at)",
                run.request_id()
            );
            return self.refuse(&rid, ErrorCode::SessionBusy, &message).await;
        }
        let request = CompactRequest {
            request_id: rid,
            instructions,
            system_prompt: self.config.system_prompt.clone(),
            settings: self.config.settings.clone(),
            provider: self.config.provider,
            budgets: self.config.budgets,
            context_policy: self.config.context_policy.clone(),
        };
        self.active = Some(Box::new(self.session.start_compaction(request).await));
        Next::Continue
    }

    /// Cancel: its own done, then the running submit stops; `clear_queue` first drops every
    /// queued prompt (each follow-up's request gets done `stopped`).
    async fn cancel(&mut self, rid: Arc<str>, clear_queue: bool) -> Next {
        let queued = !self.session.timeline().queued_prompts().is_empty();
        if self.active.is_none() && !(clear_queue && queued) {
            return self
                .refuse(
                    &rid,
                    ErrorCode::NoActiveRequest,
                    "there is no running submit to cancel",
                )
                .await;
        }
        if clear_queue {
            self.drop_queue(&rid, DropReason::Cleared).await;
        }
        self.session.emit_done(&rid, DoneStatus::Ok).await;
        self.stop_active().await;
        Next::Continue
    }

    /// Starts a run of `prompt` answering request `rid`.
    pub(super) async fn start_prompt(&mut self, rid: Arc<str>, prompt: String) {
        let request = self.run_request(rid, prompt);
        self.active = Some(Box::new(self.session.start_run(request).await));
    }

    /// What a run answering request `rid` with `prompt` is made with.
    pub(super) fn run_request(&self, rid: Arc<str>, prompt: String) -> RunRequest<'a> {
        RunRequest {
            request_id: rid,
            prompt,
            system_prompt: self.config.system_prompt.clone(),
            settings: self.config.settings.clone(),
            provider: self.config.provider,
            tools: self.config.tools,
            tool_client: true,
            approver: self.config.approver,
            budgets: self.config.budgets,
            context_policy: self.config.context_policy.clone(),
        }
    }

    /// Why the session may make no more model calls, if it may not.
    pub(super) fn session_budget_spent(&self) -> Option<String> {
        let exceeded = self.config.budgets.check_session(self.session.usage())?;
        Some(exceeded.to_string())
    }

    /// Answers a request that cannot be taken: a non-terminal error and done `failed`.
    pub(super) async fn refuse(&mut self, rid: &Arc<str>, code: ErrorCode, message: &str) -> Next {
        self.session.emit_error(rid, code, message, false).await;
        self.session.emit_done(rid, DoneStatus::Failed).await;
        Next::Continue
    }
}
