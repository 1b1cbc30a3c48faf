//! How a run ends: finished, stopped (a cancel) or failed (the model, or the store that must
//! record it), always with every tool call answered and exactly one end event on the log.

use std::sync::Arc;

use reel_proto::chat::{ChatRunFailed, ChatRunFinished, ChatRunStopped};

use super::{ActiveRun, Phase, RunFailure, RunKind, RunOutcome};
use crate::{
    id::new_id,
    session::Session,
    vocabulary::{DropReason, FinishClass, QueuedPromptKind, RunStatus},
};

impl Session {
    /// Ends the run as failed at once (its store failed): the model call or the tools are
    /// dropped, as for a cancel, and the run ends with ChatRunFailed.
    pub async fn fail_run(&mut self, run: &mut ActiveRun<'_>, failure: RunFailure) -> RunOutcome {
        drop(std::mem::replace(&mut run.phase, Phase::Idle));
        if run.call.open {
            let rid = Arc::clone(&run.request_id);
            self.finish_call(&rid, &mut run.call, "error", FinishClass::Error)
                .await;
        }
        let outcome = RunOutcome::Failed(failure);
        self.end_run(run, &outcome).await;
        outcome
    }

    /// Cancels the run: the model call or the tools are dropped at once (a command tool's
    /// processes are killed), and the run ends with ChatRunStopped.
    pub async fn stop_run(&mut self, run: &mut ActiveRun<'_>) -> RunOutcome {
        // Dropping what the run waits for aborts that work before anything else happens.
        drop(std::mem::replace(&mut run.phase, Phase::Idle));
        if run.call.open {
            let rid = Arc::clone(&run.request_id);
            self.finish_call(&rid, &mut run.call, "cancelled", FinishClass::Cancelled)
                .await;
        }
        self.end_run(run, &RunOutcome::Stopped).await;
        RunOutcome::Stopped
    }

    /// Appends the event that ends the run, after answering every tool call still without a
    /// result.
    pub(super) async fn end_run(&mut self, run: &mut ActiveRun<'_>, outcome: &RunOutcome) {
        if *outcome == RunOutcome::Waiting {
            // Not an end: the run waits in the store (no step returns it; Session::drive does).
            return;
        }
        run.phase = Phase::Idle;
        if run.kind == RunKind::Compaction {
            // A compaction between runs has no run events: its call's end is on the log.
            if let Some((_, message)) = outcome.warning() {
                tracing::warn!("{message}");
            }
            return;
        }
        self.close_unanswered(run, outcome).await;
        let rid = Arc::clone(&run.request_id);
        // A steer that did not reach a model call before the run ended never will.
        self.drop_queued(&rid, Some(QueuedPromptKind::Steer), DropReason::RunEnded)
            .await;
        let duration_ms = run.started.elapsed().as_millis() as u64;
        let correlation = Some(run.correlation.clone());
        let message_id = run.user_message_id.clone();
        // Every model call of the run has finished by now, so the totals are whole.
        let usage = Some(self.usage().run());
        let session_usage = Some(self.usage().session());
        match outcome {
            RunOutcome::Finished
            | RunOutcome::IterationLimit { .. }
            | RunOutcome::BudgetExceeded(_) => {
                let status = match outcome {
                    RunOutcome::IterationLimit { .. } => RunStatus::MaxIterationsReached,
                    RunOutcome::BudgetExceeded(_) => RunStatus::BudgetExceeded,
                    _ => RunStatus::Finished,
                };
                let error = match outcome.warning() {
                    Some((_, message)) => {
                        tracing::warn!("{message}");
                        message
                    }
                    None => String::new(),
                };
                let status = status.into();
                let event = ChatRunFinished {
                    message_id,
                    status,
                    error,
                    duration_ms,
                    correlation,
                    usage,
                    session_usage,
                };
                self.append(&rid, event).await
            }
            RunOutcome::Stopped => {
                let (status, error) = (RunStatus::Stopped.into(), "cancelled".into());
                let event = ChatRunStopped {
                    message_id,
                    status,
                    error,
                    correlation,
                    duration_ms,
                    usage,
                    session_usage,
                };
                self.append(&rid, event).await
            }
            RunOutcome::Waiting => 0,
            RunOutcome::Failed(failure) => {
                let event = ChatRunFailed {
                    message_id: new_id(),
                    status: RunStatus::Failed.into(),
                    error: failure.message.clone(),
                    correlation,
                    duration_ms,
                    usage,
                    session_usage,
                    interrupted: false,
                };
                self.append(&rid, event).await
            }
        };
    }
}
