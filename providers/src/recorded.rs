//! The recorded provider: a session's model calls played back from its log, with no network
//! and no key. The k-th call a re-run makes is answered with the k-th recorded call's output
//! (text, reasoning and its signatures, tool calls, usage, the model that answered, the stop
//! reason), after the request the re-run sends is compared with the one the recorded call was
//! sent (its `ChatProviderCallStarted.request`): a part that differs is a divergence, and the
//! call fails instead of answering, so that the re-run stops where it went another way.
//!
//! A call that failed fails again with the run's recorded error; a call that was cancelled
//! streams what it had streamed and then waits, for the cancel the re-run feeds at that point.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use futures::StreamExt;
use reel_engine::{
    Fingerprinter, LogEntry, ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream,
};
use reel_proto::{Any, chat::ModelRequestFingerprint};

/// One recorded model call: where it starts in the log, what it was sent (absent in logs
/// older than the fingerprint), and what it answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedCall {
    /// The ordinal of its `ChatProviderCallStarted`.
    pub ordinal: u64,
    /// The provider that answered it (`ChatProviderCallStarted.provider`).
    pub provider: String,
    pub request: Option<ModelRequestFingerprint>,
    pub events: Vec<ProviderEvent>,
    pub end: RecordedEnd,
}

/// How a recorded call ended, besides the events it streamed.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum RecordedEnd {
    /// It finished (its last event is `Finished`), or the log ends before it did.
    #[default]
    Answered,
    /// It failed with this error (the run's `ChatRunFailed.error`).
    Failed(String),
    /// The run was cancelled while it streamed.
    Cancelled,
}

/// Folds a log, in order, into its model calls.
#[derive(Default)]
pub struct CallRecorder {
    calls: Vec<RecordedCall>,
    /// The provider's call id of each streamed tool call, by its entity's message id (what a
    /// `ChatToolArgumentsDelta` names).
    tool_calls: HashMap<String, String>,
}

impl CallRecorder {
    /// Folds one log entry in.
    pub fn apply(&mut self, entry: &LogEntry) {
        if let Any::ChatContextCompacted(compacted) = &entry.event {
            // A summarization call's text is not streamed into the log: it is the summary
            // this event holds, the answer of the call just before it.
            if let Some(call) = self.calls.last_mut() {
                let end = call
                    .events
                    .iter()
                    .position(|e| matches!(e, ProviderEvent::Finished { .. }))
                    .unwrap_or(call.events.len());
                call.events
                    .insert(end, ProviderEvent::TextDelta(compacted.summary.clone()));
            }
            return;
        }
        if let Any::ChatProviderCallStarted(started) = &entry.event {
            self.calls.push(RecordedCall {
                ordinal: entry.ordinal,
                provider: started.provider.clone(),
                request: started.request.clone(),
                ..RecordedCall::default()
            });
            self.tool_calls.clear();
            return;
        }
        if let Any::ChatRunFailed(failed) = &entry.event {
            // The run failed at its last call: the call failed with this error.
            if let Some(call) = self.calls.last_mut()
                && call.end == RecordedEnd::Failed(String::new())
            {
                call.end = RecordedEnd::Failed(failed.error.clone());
            }
            return;
        }
        let Some(call) = self.calls.last_mut() else {
            return;
        };
        let events = &mut call.events;
        match &entry.event {
            Any::ChatTextDelta(delta) => events.push(ProviderEvent::TextDelta(delta.text.clone())),
            Any::ChatReasoningDelta(delta) => {
                events.push(ProviderEvent::ReasoningDelta(delta.text.clone()))
            }
            Any::ChatReasoningSignature(signed) if !signed.redacted_data.is_empty() => events.push(
                ProviderEvent::RedactedReasoning(signed.redacted_data.clone()),
            ),
            Any::ChatReasoningSignature(signed) => {
                events.push(ProviderEvent::ReasoningSignature(signed.signature.clone()))
            }
            Any::ChatToolCallStarted(started) => {
                self.tool_calls
                    .insert(started.message_id.clone(), started.tool_call_id.clone());
                events.push(ProviderEvent::ToolCallStarted {
                    id: started.tool_call_id.clone(),
                    name: started.tool_name.clone(),
                });
            }
            Any::ChatToolArgumentsDelta(delta) => {
                if let Some(id) = self.tool_calls.get(&delta.message_id) {
                    events.push(ProviderEvent::ToolArgumentsDelta {
                        id: id.clone(),
                        delta: delta.arguments.clone(),
                    });
                }
            }
            Any::ChatProviderCallRetrying(retrying) => events.push(ProviderEvent::Retrying {
                attempt: retrying.attempt,
                delay_ms: retrying.delay_ms,
                reason: retrying.reason.clone(),
            }),
            Any::ChatToolCallRequested(call) => events.push(ProviderEvent::ToolCallReady {
                id: call.tool_call_id.clone(),
                name: call.tool_name.clone(),
                arguments: call.input.clone(),
            }),
            Any::ChatProviderCallMetadataUpdated(updated) => {
                if let Some(usage) = updated.usage {
                    events.push(ProviderEvent::Usage(usage));
                }
            }
            // The end of a call the run cancelled, or that failed, is the engine's, not the
            // model's: the call answers so again (see RecordedEnd).
            Any::ChatProviderCallFinished(finished) if finished.finish_class == "cancelled" => {
                call.end = RecordedEnd::Cancelled;
            }
            Any::ChatProviderCallFinished(finished) if finished.finish_class == "error" => {
                call.end = RecordedEnd::Failed(String::new());
            }
            Any::ChatProviderCallFinished(finished) => {
                if !finished.response_model.is_empty() {
                    events.push(ProviderEvent::ResponseModel(
                        finished.response_model.clone(),
                    ));
                }
                events.push(ProviderEvent::Finished {
                    stop_reason: finished.stop_reason.clone(),
                });
            }
            _ => {}
        }
    }

    /// The calls folded so far.
    pub fn calls(self) -> Vec<RecordedCall> {
        self.calls
    }
}

/// Which part of a model request differs from the recorded one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestPart {
    SystemPrompt,
    Messages,
    Tools,
    Parameters,
    /// The re-run makes a model call the recording does not have.
    NoSuchCall,
}

impl RequestPart {
    /// How a report names it.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestPart::SystemPrompt => "system prompt",
            RequestPart::Messages => "messages",
            RequestPart::Tools => "tools offered",
            RequestPart::Parameters => "parameters",
            RequestPart::NoSuchCall => "model calls",
        }
    }
}

/// A request that differs from the recorded call's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDivergence {
    /// The recorded call's `ChatProviderCallStarted` (0: the recording has no such call).
    pub ordinal: u64,
    pub part: RequestPart,
    pub recorded: String,
    pub now: String,
}

/// Plays recorded calls back in order; see the module's documentation.
pub struct RecordedProvider {
    /// The recorded provider's name, which the re-run's calls carry too: the re-run's events
    /// are the original's but for ids and times (its first event says it is a re-run).
    name: String,
    calls: Mutex<VecDeque<RecordedCall>>,
    divergence: Mutex<Option<RequestDivergence>>,
    /// Calls answered whose recording does not say what they were sent (older logs).
    unchecked: AtomicUsize,
    /// Fingerprints the calls as the session does: each hashes only the messages added
    /// since the last (a whole digest a call would make a long re-run quadratic).
    fingerprinter: Mutex<Fingerprinter>,
}

impl RecordedProvider {
    pub fn new(calls: impl IntoIterator<Item = RecordedCall>) -> Self {
        let calls: VecDeque<RecordedCall> = calls.into_iter().collect();
        let name = calls
            .front()
            .map(|call| call.provider.clone())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "recorded".to_owned());
        Self {
            name,
            calls: Mutex::new(calls),
            divergence: Mutex::new(None),
            unchecked: AtomicUsize::new(0),
            fingerprinter: Mutex::default(),
        }
    }

    /// The first request that differed from its recorded call, if one has.
    pub fn divergence(&self) -> Option<RequestDivergence> {
        lock(&self.divergence).clone()
    }

    /// How many calls were answered without comparing their request: the log was written
    /// before reel recorded what each model call was sent.
    pub fn unchecked_requests(&self) -> usize {
        self.unchecked.load(Ordering::Relaxed)
    }

    /// How many recorded calls have not been asked for.
    pub fn calls_left(&self) -> usize {
        lock(&self.calls).len()
    }

    fn diverged(&self, divergence: RequestDivergence) -> ProviderStream {
        let message = format!(
            "the re-run's model call differs from the recorded one (event {}) in its {}",
            divergence.ordinal,
            divergence.part.as_str()
        );
        lock(&self.divergence).get_or_insert(divergence);
        futures::stream::once(async move { Err(ProviderError::Invalid(message)) }).boxed()
    }
}

impl Provider for RecordedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: ModelRequest) -> ProviderStream {
        let Some(call) = lock(&self.calls).pop_front() else {
            return self.diverged(RequestDivergence {
                ordinal: 0,
                part: RequestPart::NoSuchCall,
                recorded: "no more model calls".into(),
                now: "one more model call".into(),
            });
        };
        if call.request.is_none() {
            self.unchecked.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(recorded) = &call.request
            && let Some((part, was, is)) =
                first_difference(recorded, &lock(&self.fingerprinter).fingerprint(&request))
        {
            return self.diverged(RequestDivergence {
                ordinal: call.ordinal,
                part,
                recorded: was,
                now: is,
            });
        }
        let answered = futures::stream::iter(call.events.into_iter().map(Ok));
        match call.end {
            RecordedEnd::Answered => answered.boxed(),
            RecordedEnd::Failed(error) => {
                let failed =
                    futures::stream::once(async move { Err(ProviderError::Upstream(error)) });
                answered.chain(failed).boxed()
            }
            RecordedEnd::Cancelled => answered.chain(futures::stream::pending()).boxed(),
        }
    }
}

/// The first part in which `now` differs from `recorded`, with both values (the digests, or
/// what is kept in clear: the tool names, the parameters, the message count).
fn first_difference(
    recorded: &ModelRequestFingerprint,
    now: &ModelRequestFingerprint,
) -> Option<(RequestPart, String, String)> {
    if recorded.system_prompt != now.system_prompt {
        let show = |f: &ModelRequestFingerprint| format!("digest {}", f.system_prompt);
        return Some((RequestPart::SystemPrompt, show(recorded), show(now)));
    }
    if recorded.tools != now.tools {
        let show = |f: &ModelRequestFingerprint| format!("[{}]", f.tool_names.join(", "));
        return Some((RequestPart::Tools, show(recorded), show(now)));
    }
    if recorded.parameters != now.parameters {
        return Some((
            RequestPart::Parameters,
            recorded.parameters.clone(),
            now.parameters.clone(),
        ));
    }
    if recorded.messages != now.messages {
        let show = |f: &ModelRequestFingerprint| {
            format!("{} messages, digest {}", f.message_count, f.messages)
        };
        return Some((RequestPart::Messages, show(recorded), show(now)));
    }
    None
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing is left half-changed under these locks: a poisoned one is whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;
    use reel_engine::{ContextMessage, ContextRole};
    use reel_proto::chat::{
        ChatProviderCallFinished, ChatProviderCallStarted, ChatTextDelta, ChatToolCallRequested,
    };

    use super::*;

    fn request(system: &str) -> ModelRequest {
        let message = ContextMessage::new(ContextRole::User, "hi".into());
        ModelRequest {
            system_prompt: Some(system.into()),
            messages: std::iter::once(Arc::new(message)).collect(),
            ..Default::default()
        }
    }

    fn entry(ordinal: u64, event: impl Into<Any>) -> LogEntry {
        LogEntry {
            ordinal,
            recorded_at_ms: 0,
            event: event.into(),
        }
    }

    /// A log of one call sent `request("Be brief.")`, answering text and a tool call.
    fn recorded() -> Vec<RecordedCall> {
        let mut recorder = CallRecorder::default();
        let started = ChatProviderCallStarted {
            request: Some(reel_engine::request_fingerprint(&request("Be brief."))),
            ..Default::default()
        };
        for entry in [
            entry(3, started),
            entry(
                4,
                ChatTextDelta {
                    text: "Sure.".into(),
                    ..Default::default()
                },
            ),
            entry(
                5,
                ChatToolCallRequested {
                    tool_call_id: "c1".into(),
                    tool_name: "note".into(),
                    input: "{}".into(),
                    ..Default::default()
                },
            ),
            entry(
                6,
                ChatProviderCallFinished {
                    stop_reason: "tool_calls".into(),
                    ..Default::default()
                },
            ),
        ] {
            recorder.apply(&entry);
        }
        recorder.calls()
    }

    #[tokio::test]
    async fn the_same_request_gets_the_recorded_answer() {
        let provider = RecordedProvider::new(recorded());
        let events: Vec<_> = provider.stream(request("Be brief.")).collect().await;
        let events: Vec<ProviderEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            events,
            [
                ProviderEvent::TextDelta("Sure.".into()),
                ProviderEvent::ToolCallReady {
                    id: "c1".into(),
                    name: "note".into(),
                    arguments: "{}".into()
                },
                ProviderEvent::Finished {
                    stop_reason: "tool_calls".into()
                },
            ]
        );
        assert_eq!(provider.divergence(), None);
        assert_eq!(provider.calls_left(), 0);
    }

    #[tokio::test]
    async fn another_system_prompt_is_a_divergence_at_the_recorded_call() {
        let provider = RecordedProvider::new(recorded());
        let events: Vec<_> = provider.stream(request("Be long.")).collect().await;
        assert!(matches!(
            events.as_slice(),
            [Err(ProviderError::Invalid(_))]
        ));
        let divergence = provider.divergence().unwrap();
        assert_eq!(
            (divergence.ordinal, divergence.part),
            (3, RequestPart::SystemPrompt)
        );
        assert_ne!(divergence.recorded, divergence.now);
    }

    #[tokio::test]
    async fn a_call_the_recording_does_not_have_is_a_divergence() {
        let provider = RecordedProvider::new(Vec::new());
        let events: Vec<_> = provider.stream(request("Be brief.")).collect().await;
        assert_eq!(events.len(), 1);
        assert_eq!(provider.divergence().unwrap().part, RequestPart::NoSuchCall);
    }
}
