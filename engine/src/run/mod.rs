//! A run: one user prompt and the model's answer, recorded event by event.
//!
//! The run appends `ChatUserMessageAccepted` and `ChatRunStarted`, streams one model call into
//! the log, and always ends with exactly one of `ChatRunFinished`, `ChatRunStopped` (cancelled)
//! or `ChatRunFailed`. Every model call likewise ends with one `ChatProviderCallFinished`.
//!
//! A run is driven step by step ([`ActiveRun`]), so that whoever owns the session can answer
//! other requests between two events of a reply; [`Session::run`] is the simple loop for one-shot
//! use.

use std::{collections::HashMap, panic::AssertUnwindSafe, sync::Arc, time::Instant};

use futures::{FutureExt, StreamExt};
use reel_proto::chat::{
    ChatProviderCallStarted, ChatRunFailed, ChatRunFinished, ChatRunStarted, ChatRunStopped,
    ChatUserMessageAccepted, CorrelationInfo,
};
use tokio_util::sync::CancellationToken;

use crate::{
    id::new_id,
    provider::{
        ModelRequest, ModelSettings, Provider, ProviderError, ProviderEvent, ProviderStream,
    },
    session::{Session, done_status},
};

/// Everything a run needs.
pub struct RunRequest<'a> {
    /// Stamps every output of this run.
    pub request_id: Arc<str>,
    pub prompt: String,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub provider: &'a dyn Provider,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Finished,
    Stopped,
    Failed(RunFailure),
}

/// Why a run failed, as its error frame reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFailure {
    /// `run_failed`, or `internal_error` when the provider crashed.
    pub code: &'static str,
    pub message: String,
}

impl RunFailure {
    fn from_provider(error: &ProviderError) -> Self {
        let code = match error {
            ProviderError::Crashed(_) => "internal_error",
            _ => "run_failed",
        };
        Self {
            code,
            message: error.to_string(),
        }
    }
}

impl RunOutcome {
    /// The `done.status` that reports this outcome.
    pub fn done_status(&self) -> &'static str {
        match self {
            RunOutcome::Finished => done_status::OK,
            RunOutcome::Stopped => done_status::STOPPED,
            RunOutcome::Failed(_) => done_status::FAILED,
        }
    }
}

/// A run in progress: the model's reply stream and the ids of what it records.
///
/// The session's owner drives it: [`Session::start_run`], then [`Session::step`] with each
/// event of [`ActiveRun::next_event`] until it returns the outcome, or [`Session::stop_run`] to
/// cancel. Between steps the owner may do anything else with the session (answer a snapshot
/// request, say), which is how a snapshot taken during a run lands between two of its events.
pub struct ActiveRun {
    request_id: Arc<str>,
    /// The last ordinal before the run's first event.
    ordinal_before: u64,
    /// The user message the run answers.
    user_message_id: String,
    /// Correlation of the run (session and run ids).
    correlation: CorrelationInfo,
    call: CallState,
    /// The model's reply; dropping it cancels the model call.
    stream: ProviderStream,
    started: Instant,
}

impl ActiveRun {
    /// The request this run answers; its outputs are stamped with it.
    pub fn request_id(&self) -> &Arc<str> {
        &self.request_id
    }

    /// The last ordinal before the run's first event: the run's events come after it.
    pub fn ordinal_before(&self) -> u64 {
        self.ordinal_before
    }

    /// The next event of the model's reply (`None` when the stream ended). A provider that
    /// panics yields [`ProviderError::Crashed`] and is not polled again.
    pub async fn next_event(&mut self) -> Option<Result<ProviderEvent, ProviderError>> {
        let next = AssertUnwindSafe(self.stream.next()).catch_unwind().await;
        self.survive(next)
    }

    /// The next event if the model has one ready now, without waiting.
    pub fn ready_event(&mut self) -> Option<Option<Result<ProviderEvent, ProviderError>>> {
        let next = AssertUnwindSafe(self.stream.next())
            .catch_unwind()
            .now_or_never()?;
        Some(self.survive(next))
    }

    fn survive(
        &mut self,
        next: std::thread::Result<Option<Result<ProviderEvent, ProviderError>>>,
    ) -> Option<Result<ProviderEvent, ProviderError>> {
        next.unwrap_or_else(|panic| {
            self.stream = futures::stream::empty().boxed();
            Some(Err(ProviderError::Crashed(panic_message(panic.as_ref()))))
        })
    }
}

mod record;

use record::CallState;

impl Session {
    /// Runs `request.prompt` against the model and records everything on the log; cancelling
    /// `cancel` stops it promptly with `ChatRunStopped`.
    pub async fn run(&mut self, request: RunRequest<'_>, cancel: &CancellationToken) -> RunOutcome {
        let mut run = self.start_run(request).await;
        loop {
            // Take what the model has ready without waiting; before waiting, hand everything
            // recorded so far to the sinks, so readers see each delta as soon as it exists.
            let ready = if cancel.is_cancelled() {
                None
            } else {
                run.ready_event()
            };
            let event = match ready {
                Some(event) => event,
                None => {
                    self.flush().await;
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return self.stop_run(&mut run).await,
                        event = run.next_event() => event,
                    }
                }
            };
            if let Some(outcome) = self.step(&mut run, event).await {
                return outcome;
            }
        }
    }

    /// Records the user's prompt and the start of the run and of its model call.
    pub async fn start_run(&mut self, request: RunRequest<'_>) -> ActiveRun {
        let rid = Arc::clone(&request.request_id);
        let ordinal_before = self.log().last_ordinal();
        let user_message_id = new_id();
        self.append(
            &rid,
            ChatUserMessageAccepted {
                message_id: user_message_id.clone(),
                role: "user".into(),
                prompt: request.prompt.clone(),
                text: request.prompt.clone(),
                status: "accepted".into(),
                ..Default::default()
            },
        )
        .await;
        let correlation = CorrelationInfo {
            session_id: self.id().to_owned(),
            run_id: new_id(),
            ..Default::default()
        };
        self.append(
            &rid,
            ChatRunStarted {
                message_id: user_message_id.clone(),
                prompt: request.prompt.clone(),
                correlation: Some(correlation.clone()),
            },
        )
        .await;

        let call = CallState {
            correlation: CorrelationInfo {
                provider_call_id: new_id(),
                ..correlation.clone()
            },
            text_id: None,
            next_text_id: new_id(),
            reasoning_id: None,
            tool_calls: HashMap::new(),
            usage: None,
            started: Instant::now(),
        };
        let started = ChatProviderCallStarted {
            correlation: Some(call.correlation.clone()),
            provider: request.provider.name().to_owned(),
            model: request.settings.model.clone(),
        };
        self.append(&rid, started).await;
        let model_request = ModelRequest {
            system_prompt: request.system_prompt,
            messages: self.context().messages().to_vec(),
            settings: request.settings,
            // The ChatProviderCallStarted just appended is counted already.
            call_index: self.context().calls() - 1,
        };
        ActiveRun {
            request_id: rid,
            ordinal_before,
            user_message_id,
            correlation,
            call,
            stream: request.provider.stream(model_request),
            started: Instant::now(),
        }
    }

    /// Records one event of the model's reply (`None`: the reply stream ended). Returns the
    /// outcome once the run has ended and its last event is on the log.
    pub async fn step(
        &mut self,
        run: &mut ActiveRun,
        event: Option<Result<ProviderEvent, ProviderError>>,
    ) -> Option<RunOutcome> {
        let rid = Arc::clone(&run.request_id);
        let outcome = match event {
            Some(Ok(ProviderEvent::Finished { stop_reason })) => {
                let class = if run.call.tool_calls.is_empty() {
                    "completed"
                } else {
                    "tool_calls"
                };
                self.finish_call(&rid, &run.call, &stop_reason, class).await;
                RunOutcome::Finished
            }
            Some(Ok(event)) => {
                self.record(&rid, &mut run.call, event).await;
                return None;
            }
            Some(Err(error)) => {
                self.finish_call(&rid, &run.call, "error", "error").await;
                RunOutcome::Failed(RunFailure::from_provider(&error))
            }
            None => {
                self.finish_call(&rid, &run.call, "error", "error").await;
                RunOutcome::Failed(RunFailure {
                    code: "run_failed",
                    message: "the model's reply ended before it was complete".into(),
                })
            }
        };
        self.end_run(run, &outcome).await;
        Some(outcome)
    }

    /// Cancels the run: the model call is dropped at once and the run ends with ChatRunStopped.
    pub async fn stop_run(&mut self, run: &mut ActiveRun) -> RunOutcome {
        // Dropping the reply stream aborts the provider's work before anything else happens.
        run.stream = futures::stream::empty().boxed();
        self.finish_call(
            &Arc::clone(&run.request_id),
            &run.call,
            "cancelled",
            "cancelled",
        )
        .await;
        self.end_run(run, &RunOutcome::Stopped).await;
        RunOutcome::Stopped
    }

    /// Appends the event that ends the run.
    async fn end_run(&mut self, run: &ActiveRun, outcome: &RunOutcome) {
        let rid = Arc::clone(&run.request_id);
        let duration_ms = run.started.elapsed().as_millis() as u64;
        let correlation = Some(run.correlation.clone());
        let message_id = run.user_message_id.clone();
        match outcome {
            RunOutcome::Finished => {
                let status = "finished".into();
                let event = ChatRunFinished {
                    message_id,
                    status,
                    duration_ms,
                    correlation,
                    ..Default::default()
                };
                self.append(&rid, event).await
            }
            RunOutcome::Stopped => {
                let (status, error) = ("stopped".into(), "cancelled".into());
                let event = ChatRunStopped {
                    message_id,
                    status,
                    error,
                    correlation,
                    duration_ms,
                };
                self.append(&rid, event).await
            }
            RunOutcome::Failed(failure) => {
                let event = ChatRunFailed {
                    message_id: new_id(),
                    status: "failed".into(),
                    error: failure.message.clone(),
                    correlation,
                    duration_ms,
                };
                self.append(&rid, event).await
            }
        };
    }
}

/// The text of a panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
