//! Compaction inside a run: before each reply call, whether the context still fits, and the
//! summarization call that makes it fit (see [`crate::compaction`] for the policy and the
//! estimate). A `compact` request between runs is a run of its own kind that makes only the
//! summarization call.

use std::sync::Arc;

use reel_proto::chat::{ChatContextCompacted, CorrelationInfo};

use super::{ActiveRun, Phase, RunFailure, RunKind, RunOutcome, RunRequest, SyncWrapper};
use crate::{
    budget::Budgets,
    compaction::{self, ContextPolicy, Cut, estimate},
    context::summary_message,
    id::new_id,
    provider::{ModelRequest, ModelSettings, Provider},
    session::Session,
    tools::{NO_TOOLS, ToolChoice},
    vocabulary::{CallPurpose, CompactionReason, ErrorCode},
};

/// What the next model call of a run is.
pub(super) enum CallPlan {
    /// The reply call.
    Reply,
    /// A summarization call first.
    Summarize(PendingCompaction),
    /// None: the run ends so.
    Halt(RunOutcome),
}

/// A compaction whose summarization call is in progress.
pub(super) struct PendingCompaction {
    cut: Cut,
    tokens_before: u64,
    reason: CompactionReason,
    instructions: String,
}

/// A `compact` request: compact the context now, between runs.
pub struct CompactRequest<'a> {
    pub request_id: Arc<str>,
    /// Extra instructions for this summary, besides the policy's.
    pub instructions: String,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub provider: &'a dyn Provider,
    pub budgets: Budgets,
    pub context_policy: ContextPolicy,
}

impl Session {
    /// What the next model call of `run` must be: a budget may forbid it, the context may need
    /// compacting first, or may not fit at all.
    pub(super) fn plan_call(&self, run: &ActiveRun<'_>) -> CallPlan {
        if let Some(exceeded) = run.budgets.check(self.usage(), true) {
            return CallPlan::Halt(RunOutcome::BudgetExceeded(exceeded));
        }
        let policy = &run.context_policy;
        let (Some(window), Some(threshold)) = (policy.window_tokens, policy.threshold()) else {
            return CallPlan::Reply;
        };
        let estimate = self
            .context()
            .estimated_tokens(run.system_prompt.as_deref());
        if estimate <= threshold {
            return CallPlan::Reply;
        }
        if !run.compacted
            && let Some(cut) =
                compaction::cut(self.context().messages(), policy.keep_recent_turns, true)
        {
            return CallPlan::Summarize(PendingCompaction {
                cut,
                tokens_before: estimate,
                reason: CompactionReason::Threshold,
                instructions: policy.instructions.clone().unwrap_or_default(),
            });
        }
        if estimate <= window {
            return CallPlan::Reply;
        }
        let after = if run.compacted {
            " even after compaction"
        } else {
            ""
        };
        let message = format!(
            "the context does not fit the model's window{after}: the next model call needs \
             about {estimate} tokens, {} more than the window of {window} (the newest {} turns \
             and the current one are kept whole; lower context.keep_recent_turns, shorten the \
             prompt or raise the window)",
            estimate - window,
            policy.keep_recent_turns
        );
        CallPlan::Halt(RunOutcome::Failed(RunFailure {
            code: ErrorCode::ContextOverflow,
            message,
        }))
    }

    /// Starts the summarization call of `pending`.
    pub(super) async fn start_summary(
        &mut self,
        run: &mut ActiveRun<'_>,
        pending: PendingCompaction,
    ) {
        let messages = compaction::summary_request(
            self.context().messages(),
            &pending.cut,
            &pending.instructions,
        );
        let request = ModelRequest {
            system_prompt: run.system_prompt.clone(),
            messages,
            settings: run.settings.clone(),
            call_index: self.context().calls(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            purpose: CallPurpose::Summary,
        };
        if !self.open_call(run, &request).await {
            return;
        }
        run.compaction = Some(pending);
        run.phase = Phase::Model(SyncWrapper::new(run.provider.stream(request)));
    }

    /// The summarization call has finished: records the compaction and goes on with the run's
    /// reply call. Returns the outcome when the run ends here.
    pub(super) async fn finish_compaction(
        &mut self,
        run: &mut ActiveRun<'_>,
    ) -> Option<RunOutcome> {
        let pending = run.compaction.take()?;
        let summary = std::mem::take(&mut run.call.summary);
        if summary.trim().is_empty() {
            return Some(RunOutcome::Failed(RunFailure {
                code: ErrorCode::RunFailed,
                message: "the summarization call answered with no text; the context was not \
                          compacted"
                    .into(),
            }));
        }
        let system = estimate::text(run.system_prompt.as_deref().unwrap_or_default());
        let kept = estimate::messages(self.context().messages().iter().skip(pending.cut.kept_from));
        let summary_tokens =
            estimate::message(&summary_message(&summary, pending.cut.first_ordinal));
        let compacted = ChatContextCompacted {
            message_id: new_id(),
            summary,
            first_ordinal: pending.cut.first_ordinal,
            last_ordinal: pending.cut.last_ordinal,
            tokens_before: pending.tokens_before,
            tokens_after: system + summary_tokens + kept,
            messages_replaced: u32::try_from(pending.cut.kept_from).unwrap_or(u32::MAX),
            reason: pending.reason.into(),
            instructions: pending.instructions,
            correlation: Some(run.call.correlation.clone()),
        };
        let rid = Arc::clone(&run.request_id);
        self.append(&rid, compacted).await;
        match run.kind {
            RunKind::Compaction => Some(RunOutcome::Finished),
            RunKind::Prompt => {
                run.compacted = true;
                self.start_call(run).await;
                None
            }
        }
    }

    /// Starts a compaction asked for between runs. The context is cut before the newest
    /// `keep_recent_turns` turns; with nothing before them, or a budget spent, it ends at once
    /// (its first event says how).
    pub async fn start_compaction<'a>(&mut self, request: CompactRequest<'a>) -> ActiveRun<'a> {
        let correlation = CorrelationInfo {
            session_id: self.id().to_owned(),
            run_id: new_id(),
            ..Default::default()
        };
        let policy = request.context_policy;
        let mut instructions = policy.instructions.clone().unwrap_or_default();
        if !request.instructions.trim().is_empty() {
            if !instructions.is_empty() {
                instructions.push_str("\n\n");
            }
            instructions.push_str(request.instructions.trim());
        }
        let ordinal_before = self.log().last_ordinal();
        let run_request = RunRequest {
            request_id: request.request_id,
            prompt: String::new(),
            system_prompt: request.system_prompt,
            settings: request.settings,
            provider: request.provider,
            tools: &NO_TOOLS,
            tool_client: false,
            approver: None,
            budgets: request.budgets,
            context_policy: policy.clone(),
        };
        let mut run = ActiveRun::new(
            RunKind::Compaction,
            run_request,
            ordinal_before,
            String::new(),
            correlation,
        );
        if let Some(exceeded) = run.budgets.check(self.usage(), false) {
            run.phase = Phase::Halted(RunOutcome::BudgetExceeded(exceeded));
            return run;
        }
        let Some(cut) = compaction::cut(self.context().messages(), policy.keep_recent_turns, false)
        else {
            let message = format!(
                "there is nothing to compact: the context holds no more than the newest {} \
                 turns (context.keep_recent_turns) and an earlier summary",
                policy.keep_recent_turns
            );
            run.phase = Phase::Halted(RunOutcome::Failed(RunFailure {
                code: ErrorCode::NothingToCompact,
                message,
            }));
            return run;
        };
        let tokens_before = self
            .context()
            .estimated_tokens(run.system_prompt.as_deref());
        let pending = PendingCompaction {
            cut,
            tokens_before,
            reason: CompactionReason::Requested,
            instructions,
        };
        self.start_summary(&mut run, pending).await;
        run
    }
}
