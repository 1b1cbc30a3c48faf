//! Where an event and an entity keep content a person may need erased: message and reasoning
//! text, prompts, attachments, tool arguments and results, summaries, errors, and which
//! entity each event's content belongs to.
//!
//! Ids, statuses, names, usage and times are not content: they stay, so an erased log still
//! folds into the same timeline, with the same ordinals, runs and costs.

use reel_proto::{
    Any,
    chat::{
        ChatAttachment, ChatContextCompacted, ChatMessageEntity, ChatPromptDelivered,
        ChatPromptQueued, ChatReasoningDelta, ChatReasoningPatch, ChatReasoningSegmentFinished,
        ChatReasoningSignature, ChatRunFailed, ChatRunFinished, ChatRunStarted, ChatRunStopped,
        ChatTextDelta, ChatTextPatch, ChatTextSegmentFinished, ChatToolApprovalRequested,
        ChatToolArgumentsDelta, ChatToolArgumentsPatch, ChatToolCallRequested, ChatToolCallStarted,
        ChatToolExecutionStarted, ChatToolResultReady, ChatUserMessageAccepted, QueuedPromptEntity,
        ToolCallEntity, ToolResultEntity,
    },
};

/// How a content field is erased.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// The whole value (a message's text, a call's arguments): it becomes the tombstone.
    Whole,
    /// A streamed piece of a value (a text delta): the entity's first piece becomes the
    /// tombstone and the others nothing, so the folded value reads as the tombstone once.
    Piece,
    /// An opaque value a provider signed or encrypted: it becomes nothing (a tombstone would
    /// be a forged signature).
    Opaque,
}

/// Whose content an event carries.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner<'a> {
    /// An entity, by its id.
    Entity(&'a str),
    /// A tool call, by the provider's id of it (the newest call with that id).
    ToolCall(&'a str),
}

/// An event's content, borrowed for erasing.
#[derive(Default)]
pub(super) struct Fields<'a> {
    pub owners: Vec<Owner<'a>>,
    pub parts: Vec<(Part, &'a mut String)>,
}

impl<'a> Fields<'a> {
    fn owned_by(owner: &'a str) -> Self {
        Self {
            owners: vec![Owner::Entity(owner)],
            parts: Vec::new(),
        }
    }

    fn whole(mut self, values: impl IntoIterator<Item = &'a mut String>) -> Self {
        self.parts
            .extend(values.into_iter().map(|value| (Part::Whole, value)));
        self
    }

    fn piece(mut self, value: &'a mut String) -> Self {
        self.parts.push((Part::Piece, value));
        self
    }

    fn opaque(mut self, values: impl IntoIterator<Item = &'a mut String>) -> Self {
        self.parts
            .extend(values.into_iter().map(|value| (Part::Opaque, value)));
        self
    }

    fn attachments(self, attachments: &'a mut [ChatAttachment]) -> Self {
        let values = attachments
            .iter_mut()
            .flat_map(|a| [&mut a.name, &mut a.uri]);
        self.whole(values)
    }

    /// Whether any part holds something.
    pub fn has_content(&self) -> bool {
        self.parts.iter().any(|(_, value)| !value.is_empty())
    }
}

/// The content of `event` and whose it is (nothing for an event that carries none).
pub(super) fn fields(event: &mut Any) -> Fields<'_> {
    match event {
        Any::ChatUserMessageAccepted(m) => {
            let ChatUserMessageAccepted {
                message_id,
                prompt,
                text,
                content,
                attachments,
                ..
            } = &mut **m;
            Fields::owned_by(message_id)
                .whole([prompt, text, content])
                .attachments(attachments)
        }
        Any::ChatRunStarted(r) => {
            let ChatRunStarted {
                message_id, prompt, ..
            } = &mut **r;
            Fields::owned_by(message_id).whole([prompt])
        }
        Any::ChatRunFinished(r) => {
            let ChatRunFinished {
                message_id, error, ..
            } = &mut **r;
            Fields::owned_by(message_id).whole([error])
        }
        Any::ChatRunStopped(r) => {
            let ChatRunStopped {
                message_id, error, ..
            } = &mut **r;
            Fields::owned_by(message_id).whole([error])
        }
        Any::ChatRunFailed(r) => {
            let ChatRunFailed {
                message_id, error, ..
            } = &mut **r;
            Fields::owned_by(message_id).whole([error])
        }
        Any::ChatTextDelta(d) => {
            let ChatTextDelta { message_id, text } = &mut **d;
            Fields::owned_by(message_id).piece(text)
        }
        Any::ChatReasoningDelta(d) => {
            let ChatReasoningDelta { message_id, text } = &mut **d;
            Fields::owned_by(message_id).piece(text)
        }
        Any::ChatTextPatch(p) => {
            let ChatTextPatch {
                message_id,
                text,
                prompt,
                ..
            } = &mut **p;
            Fields::owned_by(message_id).piece(text).whole([prompt])
        }
        Any::ChatReasoningPatch(p) => {
            let ChatReasoningPatch {
                message_id,
                text,
                prompt,
                ..
            } = &mut **p;
            Fields::owned_by(message_id).piece(text).whole([prompt])
        }
        Any::ChatTextSegmentFinished(f) => {
            let ChatTextSegmentFinished {
                message_id,
                prompt,
                text,
                content,
                ..
            } = &mut **f;
            Fields::owned_by(message_id).whole([prompt, text, content])
        }
        Any::ChatReasoningSegmentFinished(f) => {
            let ChatReasoningSegmentFinished {
                message_id,
                prompt,
                text,
                content,
                ..
            } = &mut **f;
            Fields::owned_by(message_id).whole([prompt, text, content])
        }
        Any::ChatReasoningSignature(s) => {
            let ChatReasoningSignature {
                message_id,
                signature,
                redacted_data,
                ..
            } = &mut **s;
            Fields::owned_by(message_id).opaque([signature, redacted_data])
        }
        Any::ChatToolCallStarted(t) => {
            let ChatToolCallStarted {
                message_id, input, ..
            } = &mut **t;
            Fields::owned_by(message_id).piece(input)
        }
        Any::ChatToolArgumentsDelta(d) => {
            let ChatToolArgumentsDelta {
                message_id,
                arguments,
            } = &mut **d;
            Fields::owned_by(message_id).piece(arguments)
        }
        Any::ChatToolArgumentsPatch(p) => {
            let ChatToolArgumentsPatch {
                message_id,
                arguments,
                ..
            } = &mut **p;
            Fields::owned_by(message_id).piece(arguments)
        }
        Any::ChatToolCallRequested(t) => {
            let ChatToolCallRequested {
                message_id, input, ..
            } = &mut **t;
            Fields::owned_by(message_id).whole([input])
        }
        Any::ChatToolExecutionStarted(t) => {
            let ChatToolExecutionStarted {
                message_id, input, ..
            } = &mut **t;
            Fields::owned_by(message_id).whole([input])
        }
        Any::ChatToolApprovalRequested(a) => {
            let ChatToolApprovalRequested {
                tool_call_id,
                input,
                ..
            } = &mut **a;
            Fields {
                owners: vec![Owner::ToolCall(tool_call_id)],
                parts: Vec::new(),
            }
            .whole([input])
        }
        Any::ChatToolResultReady(r) => {
            let ChatToolResultReady {
                message_id, result, ..
            } = &mut **r;
            Fields::owned_by(message_id).whole([result])
        }
        Any::ChatContextCompacted(c) => {
            let ChatContextCompacted {
                message_id,
                summary,
                instructions,
                ..
            } = &mut **c;
            Fields::owned_by(message_id).whole([summary, instructions])
        }
        Any::ChatPromptQueued(q) => {
            let ChatPromptQueued {
                message_id, prompt, ..
            } = &mut **q;
            Fields::owned_by(message_id).whole([prompt])
        }
        Any::ChatPromptDelivered(d) => {
            let ChatPromptDelivered {
                message_id,
                prompt,
                user_message_id,
                ..
            } = &mut **d;
            let mut fields = Fields::owned_by(message_id).whole([prompt]);
            fields.owners.push(Owner::Entity(user_message_id));
            fields
        }
        _ => Fields::default(),
    }
}

/// The content an entity shows (what `--match` looks at: a message's whole text, which its
/// deltas only hold in pieces).
pub(super) fn entity_texts(payload: &Any) -> Vec<&str> {
    match payload {
        Any::ChatMessageEntity(m) => {
            let ChatMessageEntity {
                prompt,
                text,
                content,
                error,
                attachments,
                ..
            } = &**m;
            let mut texts = vec![prompt.as_str(), text, content, error];
            texts.extend(attachments.iter().flat_map(|a| [a.name.as_str(), &a.uri]));
            texts
        }
        Any::ToolCallEntity(c) => {
            let ToolCallEntity { input, error, .. } = &**c;
            vec![input, error]
        }
        Any::ToolResultEntity(r) => {
            let ToolResultEntity { result, .. } = &**r;
            vec![result]
        }
        Any::QueuedPromptEntity(q) => {
            let QueuedPromptEntity { prompt, .. } = &**q;
            vec![prompt]
        }
        Any::ChatContextCompacted(c) => vec![&c.summary, &c.instructions],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_is_a_piece_of_its_message_and_ids_are_not_content() {
        let mut event = Any::from(ChatTextDelta {
            message_id: "m1".into(),
            text: "hello".into(),
        });
        let fields = fields(&mut event);
        assert_eq!(fields.owners, vec![Owner::Entity("m1")]);
        assert_eq!(fields.parts.len(), 1);
        assert_eq!(fields.parts[0].0, Part::Piece);
        assert!(fields.has_content());
        let mut finished = Any::from(reel_proto::chat::ChatToolCallFinished::default());
        assert!(!super::fields(&mut finished).has_content());
    }
}
