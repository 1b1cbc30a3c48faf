//! The recorded provider: a session's model calls played back from its log, with no network
//! and no key. The k-th call a re-run makes is answered with the k-th recorded call's output
//! (text, reasoning and its signatures, tool calls, usage, the model that answered, the stop
//! reason), after the request the re-run sends is compared with the one the recorded call was
//! sent (its `ChatProviderCallStarted.request`): a part that differs is a divergence, and the
//! call fails instead of answering, so that the re-run stops where it went another way.

use std::{collections::VecDeque, sync::Mutex};

use futures::StreamExt;
use reel_engine::{
    LogEntry, ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream,
    request_fingerprint,
};
use reel_proto::{Any, chat::ModelRequestFingerprint};

/// One recorded model call: where it starts in the log, what it was sent (absent in logs
/// older than the fingerprint), and what it answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedCall {
    /// The ordinal of its `ChatProviderCallStarted`.
    pub ordinal: u64,
    pub request: Option<ModelRequestFingerprint>,
    pub events: Vec<ProviderEvent>,
}

/// Folds a log, in order, into its model calls.
#[derive(Default)]
pub struct CallRecorder {
    calls: Vec<RecordedCall>,
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
                request: started.request.clone(),
                events: Vec::new(),
            });
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
    calls: Mutex<VecDeque<RecordedCall>>,
    divergence: Mutex<Option<RequestDivergence>>,
}

impl RecordedProvider {
    pub fn new(calls: impl IntoIterator<Item = RecordedCall>) -> Self {
        Self {
            calls: Mutex::new(calls.into_iter().collect()),
            divergence: Mutex::new(None),
        }
    }

    /// The first request that differed from its recorded call, if one has.
    pub fn divergence(&self) -> Option<RequestDivergence> {
        lock(&self.divergence).clone()
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
        "recorded"
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
        if let Some(recorded) = &call.request
            && let Some((part, was, is)) =
                first_difference(recorded, &request_fingerprint(&request))
        {
            return self.diverged(RequestDivergence {
                ordinal: call.ordinal,
                part,
                recorded: was,
                now: is,
            });
        }
        futures::stream::iter(call.events.into_iter().map(Ok)).boxed()
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
            request: Some(request_fingerprint(&request("Be brief."))),
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
