//! Segments of the timeline projection: text, reasoning and tool arguments that stream in
//! deltas. A segment opens with its `...Started` event (or implicitly with its first delta),
//! turns each delta into an append-mode patch with `offset` and `sequence`, and finishes with
//! the whole text once.

use reel_proto::{
    Any,
    chat::{
        ChatMessageEntity, ChatReasoningPatch, ChatReasoningSegmentFinished,
        ChatReasoningSegmentStarted, ChatStreamPatchMode, ChatTextPatch, ChatTextSegmentFinished,
        ChatTextSegmentStarted, ChatToolArgumentsPatch, CorrelationInfo,
    },
};

use super::{KIND_MESSAGE, TimelineProjection, UiEvents};
use crate::vocabulary::{MessageStatus, ToolCallStatus};

/// What an open stream is producing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum StreamKind {
    Text,
    Reasoning,
    ToolArguments,
}

/// A segment that is still receiving deltas.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct OpenStream {
    kind: StreamKind,
    /// Number of patches emitted so far.
    sequence: u64,
    /// Length of the streamed content in Unicode scalar values (the next patch's offset).
    chars: u64,
}

/// How a text or reasoning segment starts, from its `...Started` event or implied by a delta.
pub(super) struct ProseStart {
    pub kind: StreamKind,
    pub message_id: String,
    pub role: String,
    pub prompt: String,
    pub parent_message_id: String,
    pub correlation: Option<CorrelationInfo>,
}

impl ProseStart {
    /// The `...SegmentStarted` event that would have started this segment.
    fn started_event(&self) -> Any {
        let (message_id, role, status) = (
            self.message_id.clone(),
            self.role.clone(),
            MessageStatus::Streaming.into(),
        );
        let correlation = self.correlation.clone();
        match self.kind {
            StreamKind::Reasoning => ChatReasoningSegmentStarted {
                message_id,
                role,
                status,
                streaming: true,
                correlation,
                ..Default::default()
            }
            .into(),
            _ => ChatTextSegmentStarted {
                message_id,
                role,
                status,
                streaming: true,
                correlation,
                ..Default::default()
            }
            .into(),
        }
    }
}

impl TimelineProjection {
    pub(super) fn open(
        &mut self,
        kind: StreamKind,
        id: &str,
        ordinal: u64,
        entity_kind: &str,
        payload: Any,
    ) {
        self.close_stream(id);
        self.insert(entity_kind, id, ordinal, payload);
        self.streams.push((
            id.to_owned(),
            OpenStream {
                kind,
                sequence: 0,
                chars: 0,
            },
        ));
    }

    pub(super) fn close_stream(&mut self, id: &str) -> Option<OpenStream> {
        let at = self.streams.iter().position(|(open, _)| open == id)?;
        Some(self.streams.remove(at).1)
    }

    /// Opens a text or reasoning segment: open prose segments end, a streaming message begins.
    pub(super) fn start_prose(&mut self, out: &mut UiEvents, start: ProseStart) {
        self.finish_prose_streams(out, MessageStatus::Finished, "");
        let segment_type = match start.kind {
            StreamKind::Reasoning => "reasoning",
            _ => "text",
        };
        let entity = ChatMessageEntity {
            message_id: start.message_id.clone(),
            role: start.role,
            prompt: start.prompt,
            status: MessageStatus::Streaming.into(),
            streaming: true,
            parent_message_id: start.parent_message_id,
            segment_type: segment_type.into(),
            correlation: start.correlation,
            ..Default::default()
        };
        self.open(
            start.kind,
            &start.message_id,
            out.ordinal,
            KIND_MESSAGE,
            entity.into(),
        );
    }

    /// Deltas for a segment nobody started (a log written by hand or a newer version) start
    /// one implicitly, so no streamed text is ever dropped from the timeline.
    fn stream_state(&mut self, out: &mut UiEvents, id: &str, kind: StreamKind) -> &mut OpenStream {
        if !self.streams.iter().any(|(open, _)| open == id) {
            let role = if kind == StreamKind::Reasoning {
                "thinking"
            } else {
                "assistant"
            };
            let start = ProseStart {
                kind,
                message_id: id.to_owned(),
                role: role.to_owned(),
                prompt: String::new(),
                parent_message_id: String::new(),
                correlation: self.call.clone(),
            };
            let started = start.started_event();
            self.start_prose(out, start);
            out.push_owned(started);
        }
        let at = self
            .streams
            .iter()
            .rposition(|(open, _)| open == id)
            .expect("opened above");
        &mut self.streams[at].1
    }

    pub(super) fn text_delta(
        &mut self,
        out: &mut UiEvents,
        id: &str,
        text: &str,
        kind: StreamKind,
    ) {
        let stream = self.stream_state(out, id, kind);
        stream.sequence += 1;
        let (sequence, offset) = (stream.sequence, stream.chars);
        stream.chars += text.chars().count() as u64;
        let wanted = out.wanted;
        let (role, parent) = match self.entity_mut(id, out.ordinal) {
            Some(Any::ChatMessageEntity(message)) => {
                message.text.push_str(text);
                // Copied only for the patch: a fold that makes no ui events needs neither.
                if wanted {
                    (message.role.clone(), message.parent_message_id.clone())
                } else {
                    Default::default()
                }
            }
            _ => Default::default(),
        };
        if !wanted {
            return;
        }
        let mode = ChatStreamPatchMode::Append as i32;
        let patch: Any = match kind {
            StreamKind::Reasoning => ChatReasoningPatch {
                message_id: id.to_owned(),
                role,
                sequence,
                offset,
                text: text.to_owned(),
                mode,
                status: MessageStatus::Streaming.into(),
                parent_message_id: parent,
                ..Default::default()
            }
            .into(),
            _ => ChatTextPatch {
                message_id: id.to_owned(),
                role,
                sequence,
                offset,
                text: text.to_owned(),
                mode,
                status: MessageStatus::Streaming.into(),
                ..Default::default()
            }
            .into(),
        };
        out.push_owned(patch);
    }

    pub(super) fn arguments_delta(&mut self, out: &mut UiEvents, id: &str, arguments: &str) {
        let Some(at) = self.streams.iter().position(|(open, _)| open == id) else {
            // Arguments for a call that never started or already completed: the complete input
            // arrives with ChatToolCallRequested, so there is nothing to show.
            return;
        };
        let stream = &mut self.streams[at].1;
        stream.sequence += 1;
        let (sequence, offset) = (stream.sequence, stream.chars);
        stream.chars += arguments.chars().count() as u64;
        let mut patch = ChatToolArgumentsPatch {
            message_id: id.to_owned(),
            sequence,
            offset,
            arguments: arguments.to_owned(),
            mode: ChatStreamPatchMode::Append as i32,
            status: ToolCallStatus::StreamingArgs.into(),
            ..Default::default()
        };
        if let Some(Any::ToolCallEntity(call)) = self.entity_mut(id, out.ordinal) {
            call.input.push_str(arguments);
            patch.tool_call_id.clone_from(&call.tool_call_id);
            patch.tool_name.clone_from(&call.tool_name);
        }
        out.push_owned(patch.into());
    }

    /// Ends open text and reasoning segments (the model moved on to another segment).
    pub(super) fn finish_prose_streams(
        &mut self,
        out: &mut UiEvents,
        status: MessageStatus,
        finish_reason: &str,
    ) {
        let prose: Vec<String> = self
            .streams
            .iter()
            .filter(|(_, s)| s.kind != StreamKind::ToolArguments)
            .map(|(id, _)| id.clone())
            .collect();
        for id in prose {
            self.finish_stream(out, &id, status, finish_reason);
        }
    }

    pub(super) fn finish_all_streams(
        &mut self,
        out: &mut UiEvents,
        status: MessageStatus,
        finish_reason: &str,
    ) {
        let open: Vec<String> = self.streams.iter().map(|(id, _)| id.clone()).collect();
        for id in open {
            self.finish_stream(out, &id, status, finish_reason);
        }
    }

    fn finish_stream(
        &mut self,
        out: &mut UiEvents,
        id: &str,
        status: MessageStatus,
        finish_reason: &str,
    ) {
        let Some(stream) = self.close_stream(id) else {
            return;
        };
        let ordinal = out.ordinal;
        let finished: Option<Any> = match self.entity_mut(id, ordinal) {
            Some(Any::ChatMessageEntity(m)) => {
                m.status = status.into();
                m.streaming = false;
                m.r#final = true;
                // The whole text, copied: only for a caller that reads the ui events.
                out.wanted.then(|| match stream.kind {
                    StreamKind::Reasoning => ChatReasoningSegmentFinished {
                        message_id: m.message_id.clone(),
                        role: m.role.clone(),
                        text: m.text.clone(),
                        status: status.into(),
                        r#final: true,
                        finish_reason: finish_reason.to_owned(),
                        correlation: m.correlation.clone(),
                        parent_message_id: m.parent_message_id.clone(),
                        ..Default::default()
                    }
                    .into(),
                    _ => ChatTextSegmentFinished {
                        message_id: m.message_id.clone(),
                        role: m.role.clone(),
                        prompt: m.prompt.clone(),
                        text: m.text.clone(),
                        status: status.into(),
                        r#final: true,
                        finish_reason: finish_reason.to_owned(),
                        correlation: m.correlation.clone(),
                        ..Default::default()
                    }
                    .into(),
                })
            }
            // A tool call whose arguments never completed.
            Some(Any::ToolCallEntity(call)) => {
                call.status = status.into();
                None
            }
            _ => None,
        };
        if let Some(event) = finished {
            out.push_owned(event);
        }
    }
}
