//! A run: one user prompt and the model's answer, recorded event by event.
//!
//! The run appends `ChatUserMessageAccepted` and `ChatRunStarted`, streams one model call into
//! the log, and always ends with exactly one of `ChatRunFinished`, `ChatRunStopped` (cancelled)
//! or `ChatRunFailed`. Every model call likewise ends with one `ChatProviderCallFinished`.

use std::{collections::HashMap, sync::Arc, time::Instant};

use futures::{FutureExt, StreamExt};
use reel_proto::chat::{
    ChatProviderCallFinished, ChatProviderCallMetadataUpdated, ChatProviderCallStarted,
    ChatReasoningDelta, ChatReasoningSegmentStarted, ChatRunFailed, ChatRunFinished,
    ChatRunStarted, ChatRunStopped, ChatTextDelta, ChatTextSegmentStarted, ChatToolArgumentsDelta,
    ChatToolCallRequested, ChatToolCallStarted, ChatUserMessageAccepted, CorrelationInfo,
    UsageInfo,
};
use tokio_util::sync::CancellationToken;

use crate::{
    id::new_id,
    provider::{ModelRequest, ModelSettings, Provider, ProviderEvent},
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
    /// Cancelling it stops the run promptly with `ChatRunStopped`.
    pub cancel: CancellationToken,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Finished,
    Stopped,
    Failed(String),
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

/// How one model call ended.
enum CallOutcome {
    Completed,
    Cancelled,
    Failed(String),
}

/// Ids and totals of the model call in progress.
struct CallState {
    correlation: CorrelationInfo,
    /// The text segment receiving deltas, if one is open.
    text_id: Option<String>,
    /// The id the next text segment will take; reasoning names it as its parent.
    next_text_id: String,
    reasoning_id: Option<String>,
    /// Provider tool call id -> reel's id for that call.
    tool_calls: HashMap<String, String>,
    usage: Option<UsageInfo>,
    started: Instant,
}

impl Session {
    /// Runs `request.prompt` against the model and records everything on the log.
    pub async fn run(&mut self, request: RunRequest<'_>) -> RunOutcome {
        let started = Instant::now();
        let rid = Arc::clone(&request.request_id);
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

        let outcome = match self.model_call(&request, &correlation).await {
            CallOutcome::Completed => RunOutcome::Finished,
            CallOutcome::Cancelled => RunOutcome::Stopped,
            CallOutcome::Failed(error) => RunOutcome::Failed(error),
        };

        let duration_ms = started.elapsed().as_millis() as u64;
        let correlation = Some(correlation);
        match &outcome {
            RunOutcome::Finished => {
                let status = "finished".into();
                let event = ChatRunFinished {
                    message_id: user_message_id,
                    status,
                    duration_ms,
                    correlation,
                    ..Default::default()
                };
                self.append(&rid, event).await
            }
            RunOutcome::Stopped => {
                let event = ChatRunStopped {
                    message_id: user_message_id,
                    status: "stopped".into(),
                    error: "cancelled".into(),
                    correlation,
                    duration_ms,
                };
                self.append(&rid, event).await
            }
            RunOutcome::Failed(error) => {
                let event = ChatRunFailed {
                    message_id: new_id(),
                    status: "failed".into(),
                    error: error.clone(),
                    correlation,
                    duration_ms,
                };
                self.append(&rid, event).await
            }
        };
        outcome
    }

    async fn model_call(&mut self, request: &RunRequest<'_>, run: &CorrelationInfo) -> CallOutcome {
        let rid = &request.request_id;
        let mut call = CallState {
            correlation: CorrelationInfo {
                provider_call_id: new_id(),
                ..run.clone()
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
        self.append(rid, started).await;

        let model_request = ModelRequest {
            system_prompt: request.system_prompt.clone(),
            messages: self.context().messages().to_vec(),
            settings: request.settings.clone(),
        };
        let mut stream = request.provider.stream(model_request);
        loop {
            // Take what the model has ready without waiting; before waiting, hand everything
            // recorded so far to the sinks, so readers see each delta as soon as it exists.
            let ready = if request.cancel.is_cancelled() {
                None
            } else {
                stream.next().now_or_never()
            };
            let next = match ready {
                Some(next) => next,
                None => {
                    self.flush().await;
                    tokio::select! {
                        biased;
                        () = request.cancel.cancelled() => {
                            // Dropping the stream aborts the provider's work at once.
                            drop(stream);
                            self.finish_call(rid, &call, "cancelled", "cancelled").await;
                            return CallOutcome::Cancelled;
                        }
                        next = stream.next() => next,
                    }
                }
            };
            match next {
                Some(Ok(ProviderEvent::Finished { stop_reason })) => {
                    let class = if call.tool_calls.is_empty() {
                        "completed"
                    } else {
                        "tool_calls"
                    };
                    self.finish_call(rid, &call, &stop_reason, class).await;
                    return CallOutcome::Completed;
                }
                Some(Ok(event)) => self.record(rid, &mut call, event).await,
                Some(Err(error)) => {
                    self.finish_call(rid, &call, "error", "error").await;
                    return CallOutcome::Failed(error.to_string());
                }
                None => {
                    self.finish_call(rid, &call, "error", "error").await;
                    return CallOutcome::Failed(
                        "the model's reply ended before it was complete".into(),
                    );
                }
            }
        }
    }

    /// Appends the log events for one provider event.
    async fn record(&mut self, rid: &Arc<str>, call: &mut CallState, event: ProviderEvent) {
        match event {
            ProviderEvent::TextDelta(text) => {
                call.reasoning_id = None;
                let message_id = match &call.text_id {
                    Some(id) => id.clone(),
                    None => {
                        let id = std::mem::replace(&mut call.next_text_id, new_id());
                        let started = ChatTextSegmentStarted {
                            message_id: id.clone(),
                            role: "assistant".into(),
                            status: "streaming".into(),
                            streaming: true,
                            correlation: Some(CorrelationInfo {
                                segment_id: id.clone(),
                                ..call.correlation.clone()
                            }),
                            ..Default::default()
                        };
                        self.append(rid, started).await;
                        call.text_id = Some(id.clone());
                        id
                    }
                };
                self.append(rid, ChatTextDelta { message_id, text }).await;
            }
            ProviderEvent::ReasoningDelta(text) => {
                call.text_id = None;
                let message_id = match &call.reasoning_id {
                    Some(id) => id.clone(),
                    None => {
                        let id = new_id();
                        let started = ChatReasoningSegmentStarted {
                            message_id: id.clone(),
                            role: "thinking".into(),
                            status: "streaming".into(),
                            streaming: true,
                            correlation: Some(CorrelationInfo {
                                segment_id: id.clone(),
                                ..call.correlation.clone()
                            }),
                            parent_message_id: call.next_text_id.clone(),
                            ..Default::default()
                        };
                        self.append(rid, started).await;
                        call.reasoning_id = Some(id.clone());
                        id
                    }
                };
                self.append(rid, ChatReasoningDelta { message_id, text })
                    .await;
            }
            ProviderEvent::ToolCallStarted { id, name } => {
                let message_id = new_id();
                call.tool_calls.insert(id.clone(), message_id.clone());
                let started = ChatToolCallStarted {
                    message_id,
                    tool_name: name,
                    status: "streaming_args".into(),
                    correlation: Some(CorrelationInfo {
                        tool_call_id: id.clone(),
                        ..call.correlation.clone()
                    }),
                    tool_call_id: id,
                    ..Default::default()
                };
                self.append(rid, started).await;
            }
            ProviderEvent::ToolArgumentsDelta { id, delta } => {
                let message_id = call.tool_calls.entry(id).or_insert_with(new_id).clone();
                self.append(
                    rid,
                    ChatToolArgumentsDelta {
                        message_id,
                        arguments: delta,
                    },
                )
                .await;
            }
            ProviderEvent::ToolCallReady {
                id,
                name,
                arguments,
            } => {
                let message_id = call
                    .tool_calls
                    .entry(id.clone())
                    .or_insert_with(new_id)
                    .clone();
                let requested = ChatToolCallRequested {
                    message_id,
                    tool_name: name,
                    input: arguments,
                    status: "pending".into(),
                    correlation: Some(CorrelationInfo {
                        tool_call_id: id.clone(),
                        ..call.correlation.clone()
                    }),
                    tool_call_id: id,
                    ..Default::default()
                };
                self.append(rid, requested).await;
            }
            ProviderEvent::Usage(usage) => {
                call.usage = Some(usage);
                let updated = ChatProviderCallMetadataUpdated {
                    stop_reason: String::new(),
                    usage: Some(usage),
                    correlation: Some(call.correlation.clone()),
                };
                self.append(rid, updated).await;
            }
            ProviderEvent::Finished { .. } => unreachable!("handled by the call loop"),
        }
    }

    async fn finish_call(
        &mut self,
        rid: &Arc<str>,
        call: &CallState,
        stop_reason: &str,
        finish_class: &str,
    ) {
        let finished = ChatProviderCallFinished {
            stop_reason: stop_reason.to_owned(),
            finish_class: finish_class.to_owned(),
            usage: call.usage,
            duration_ms: call.started.elapsed().as_millis() as u64,
            has_tool_calls: !call.tool_calls.is_empty(),
            correlation: Some(call.correlation.clone()),
        };
        self.append(rid, finished).await;
    }
}
