//! How a run ended, and why a run failed, as the run's end event and the request's frames
//! report it.

use crate::{
    budget::BudgetExceeded,
    fanout::SinkFailure,
    provider::ProviderError,
    vocabulary::{DoneStatus, ErrorCode},
};

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    Finished,
    Stopped,
    Failed(RunFailure),
    /// The model still asked for tools when the run had made `limit` model calls: those calls
    /// were answered "not run" and the run ended. A warning, not a failure.
    IterationLimit {
        limit: u32,
    },
    /// A budget was spent before the next model call: the run ended there (`ChatRunFinished`
    /// with status `budget_exceeded`). A warning, not a failure.
    BudgetExceeded(BudgetExceeded),
    /// The run waits for a person's decision on a tool call and nobody here can send one
    /// (a one-shot run without a terminal): it has not ended; it waits in the store, and
    /// `reel approve` (or any host of the session) continues it.
    Waiting,
}

/// Why a run failed, as its error frame reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFailure {
    /// `run_failed`, or `internal_error` when the provider crashed.
    pub code: ErrorCode,
    pub message: String,
}

impl RunFailure {
    /// The durable store failed: the run stops before its next side effect.
    pub fn storage(failure: &SinkFailure) -> Self {
        Self {
            code: ErrorCode::StorageFailed,
            message: format!(
                "{} failed, so the run stopped before its next model call or tool: {}",
                failure.sink, failure.message
            ),
        }
    }

    /// Whether this is the durable store's failure (reported once, as a terminal error, by
    /// the request's done).
    pub fn is_storage(&self) -> bool {
        self.code == ErrorCode::StorageFailed
    }

    pub(super) fn from_provider(error: &ProviderError) -> Self {
        let code = match error {
            ProviderError::Crashed(_) => ErrorCode::InternalError,
            _ => ErrorCode::RunFailed,
        };
        Self {
            code,
            message: error.to_string(),
        }
    }
}

impl RunOutcome {
    /// The `done.status` that reports this outcome.
    pub fn done_status(&self) -> DoneStatus {
        match self {
            RunOutcome::Finished
            | RunOutcome::IterationLimit { .. }
            | RunOutcome::BudgetExceeded(_) => DoneStatus::Ok,
            RunOutcome::Stopped => DoneStatus::Stopped,
            RunOutcome::Failed(_) => DoneStatus::Failed,
            RunOutcome::Waiting => DoneStatus::Waiting,
        }
    }

    /// The warning a finished run carries: its error frame (non-terminal) says it.
    pub fn warning(&self) -> Option<(ErrorCode, String)> {
        match self {
            RunOutcome::IterationLimit { limit } => Some((
                ErrorCode::MaxIterationsReached,
                format!(
                    "the model still asked for tools after {limit} model calls; those calls were \
                     not run (raise --max-iterations to allow more)"
                ),
            )),
            RunOutcome::BudgetExceeded(exceeded) => {
                Some((ErrorCode::BudgetExceeded, exceeded.to_string()))
            }
            _ => None,
        }
    }
}
