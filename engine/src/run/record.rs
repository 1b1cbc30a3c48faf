//! Recording one model call: each provider event becomes log events (segments opened on first
//! use, deltas, tool calls, usage, retries), and the call ends with ChatProviderCallFinished.

use std::{collections::HashMap, sync::Arc, time::Instant};

use reel_proto::chat::{
    ChatProviderCallFinished, ChatProviderCallMetadataUpdated, ChatProviderCallRetrying,
    ChatProviderCallStarted, ChatReasoningDelta, ChatReasoningSegmentStarted,
    ChatReasoningSignature, ChatRunWarning, ChatTextDelta, ChatTextSegmentStarted,
    ChatToolArgumentsDelta, ChatToolCallRequested, ChatToolCallStarted, ChatToolExecutionStarted,
    CorrelationInfo, ModelRequestFingerprint, UsageInfo,
};

use crate::{
    id::new_id,
    provider::ProviderEvent,
    session::Session,
    usage::Pricing,
    vocabulary::{CallPurpose, FinishClass, MessageStatus, ToolCallStatus, WarningCode},
};

/// Ids and totals of the model call in progress.
pub(super) struct CallState {
    pub(super) correlation: CorrelationInfo,
    /// The text segment receiving deltas, if one is open.
    pub(super) text_id: Option<String>,
    /// The id the next text segment will take; reasoning names it as its parent.
    pub(super) next_text_id: String,
    pub(super) reasoning_id: Option<String>,
    /// The newest reasoning segment, which a signature that follows it signs.
    pub(super) last_reasoning_id: Option<String>,
    /// The model the server said answered.
    pub(super) response_model: String,
    /// Whether this call had to call a tool (tool_choice: required).
    pub(super) tool_required: bool,
    /// Whether the call has started and not finished (its ChatProviderCallFinished is due).
    pub(super) open: bool,
    /// Provider tool call id -> reel's id for that call.
    pub(super) tool_calls: HashMap<String, String>,
    pub(super) usage: Option<UsageInfo>,
    /// Prices the usage's cost is computed with.
    pub(super) pricing: Option<Pricing>,
    pub(super) started: Instant,
    /// The complete tool calls of this model call, in the order the model made them.
    pub(super) requested: Vec<RequestedTool>,
    /// What the call is for.
    pub(super) purpose: CallPurpose,
    /// A summarization call's text so far: it goes into ChatContextCompacted, not the
    /// conversation.
    pub(super) summary: String,
}

/// A tool call the model asked for, until its result is on the log.
#[derive(Clone, Debug)]
pub(super) struct RequestedTool {
    pub(super) tool_call_id: String,
    /// reel's id of the call (the ChatToolCall entity).
    pub(super) message_id: String,
    pub(super) name: String,
    pub(super) arguments: String,
    /// The model call's correlation, with this tool call's id.
    pub(super) correlation: CorrelationInfo,
    /// The ordinal of its `ChatToolCallRequested`: the call's place for good.
    pub(super) requested_ordinal: u64,
}

impl RequestedTool {
    /// The event that starts the call's execution, with `status` (executing, awaiting_client).
    pub(super) fn execution_started(&self, status: ToolCallStatus) -> ChatToolExecutionStarted {
        ChatToolExecutionStarted {
            message_id: self.message_id.clone(),
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.name.clone(),
            input: self.arguments.clone(),
            executing: true,
            status: status.into(),
            correlation: Some(self.correlation.clone()),
        }
    }
}

impl CallState {
    pub(super) fn new(correlation: CorrelationInfo, pricing: Option<Pricing>) -> Self {
        Self {
            correlation,
            text_id: None,
            next_text_id: new_id(),
            reasoning_id: None,
            last_reasoning_id: None,
            response_model: String::new(),
            tool_required: false,
            open: false,
            tool_calls: HashMap::new(),
            usage: None,
            pricing,
            started: Instant::now(),
            requested: Vec::new(),
            purpose: CallPurpose::Reply,
            summary: String::new(),
        }
    }

    /// The call's start, sending a request of fingerprint `request`.
    pub(super) fn started_event(
        &self,
        provider: &str,
        model: &str,
        request: ModelRequestFingerprint,
    ) -> ChatProviderCallStarted {
        ChatProviderCallStarted {
            correlation: Some(self.correlation.clone()),
            provider: provider.to_owned(),
            model: model.to_owned(),
            purpose: self.purpose.into(),
            request: Some(request),
        }
    }
}

impl Session {
    /// Appends the log events for one provider event.
    pub(super) async fn record(
        &mut self,
        rid: &Arc<str>,
        call: &mut CallState,
        event: ProviderEvent,
    ) {
        // A summary is gathered, not streamed into the conversation; reasoning and tool calls
        // have no place in it.
        let event = match (call.purpose, event) {
            (CallPurpose::Summary, ProviderEvent::TextDelta(text)) => {
                call.summary.push_str(&text);
                return;
            }
            (
                CallPurpose::Summary,
                event @ (ProviderEvent::Usage(_)
                | ProviderEvent::Retrying { .. }
                | ProviderEvent::ResponseModel(_)),
            ) => event,
            (CallPurpose::Summary, _) => return,
            (CallPurpose::Reply, event) => event,
        };
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
                            status: MessageStatus::Streaming.into(),
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
                            status: MessageStatus::Streaming.into(),
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
                        call.last_reasoning_id = Some(id.clone());
                        id
                    }
                };
                self.append(rid, ChatReasoningDelta { message_id, text })
                    .await;
            }
            ProviderEvent::ReasoningSignature(signature) => {
                let signed = ChatReasoningSignature {
                    message_id: call.last_reasoning_id.clone().unwrap_or_else(new_id),
                    signature,
                    redacted_data: String::new(),
                    correlation: Some(call.correlation.clone()),
                };
                self.append(rid, signed).await;
            }
            ProviderEvent::RedactedReasoning(data) => {
                // An encrypted block ends any open segment: what follows is a new one.
                call.reasoning_id = None;
                call.text_id = None;
                let redacted = ChatReasoningSignature {
                    message_id: new_id(),
                    signature: String::new(),
                    redacted_data: data,
                    correlation: Some(call.correlation.clone()),
                };
                self.append(rid, redacted).await;
            }
            ProviderEvent::ResponseModel(model) => call.response_model = model,
            ProviderEvent::ToolCallStarted { id, name } => {
                let message_id = new_id();
                call.tool_calls.insert(id.clone(), message_id.clone());
                let started = ChatToolCallStarted {
                    message_id,
                    tool_name: name,
                    status: ToolCallStatus::StreamingArgs.into(),
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
                let correlation = CorrelationInfo {
                    tool_call_id: id.clone(),
                    ..call.correlation.clone()
                };
                let mut tool = RequestedTool {
                    tool_call_id: id.clone(),
                    message_id: message_id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    correlation: correlation.clone(),
                    requested_ordinal: 0,
                };
                let requested = ChatToolCallRequested {
                    message_id,
                    tool_name: name,
                    input: arguments,
                    status: ToolCallStatus::Pending.into(),
                    correlation: Some(correlation),
                    tool_call_id: id,
                    ..Default::default()
                };
                tool.requested_ordinal = self.append(rid, requested).await;
                call.requested.push(tool);
            }
            ProviderEvent::Usage(mut usage) => {
                if let Some(pricing) = &call.pricing {
                    usage.cost_usd = pricing.cost(&usage);
                }
                call.usage = Some(usage);
                let updated = ChatProviderCallMetadataUpdated {
                    stop_reason: String::new(),
                    usage: Some(usage),
                    correlation: Some(call.correlation.clone()),
                };
                self.append(rid, updated).await;
            }
            ProviderEvent::Retrying {
                attempt,
                delay_ms,
                reason,
            } => {
                let retrying = ChatProviderCallRetrying {
                    attempt,
                    delay_ms,
                    reason,
                    correlation: Some(call.correlation.clone()),
                };
                self.append(rid, retrying).await;
            }
            ProviderEvent::Finished { .. } => unreachable!("handled by the call loop"),
        }
    }

    /// A call that had to call a tool answered without one: the run goes on (the answer is
    /// an answer), but a person should know, on the log and on stderr.
    pub(super) async fn warn_required_tool_call(&mut self, rid: &Arc<str>, call: &CallState) {
        let message = "the model had to call a tool (tool_choice: required) and answered without one; \
                       a small model may need tool_call_prefill and stop (see docs/command-files.md, Model providers)";
        tracing::warn!("{message}");
        let warning = ChatRunWarning {
            code: WarningCode::RequiredToolCallMissing.into(),
            message: message.into(),
            correlation: Some(call.correlation.clone()),
        };
        self.append(rid, warning).await;
    }

    pub(super) async fn finish_call(
        &mut self,
        rid: &Arc<str>,
        call: &mut CallState,
        stop_reason: &str,
        finish_class: FinishClass,
    ) {
        call.open = false;
        let finished = ChatProviderCallFinished {
            stop_reason: stop_reason.to_owned(),
            finish_class: finish_class.into(),
            usage: call.usage,
            duration_ms: call.started.elapsed().as_millis() as u64,
            has_tool_calls: !call.tool_calls.is_empty(),
            correlation: Some(call.correlation.clone()),
            response_model: call.response_model.clone(),
        };
        self.append(rid, finished).await;
    }
}
