//! Prompts queued while a run goes (steers and follow-ups), and the markers of compaction and
//! redaction, in the timeline.
//!
//! A queued prompt is an entity of its own (`ChatQueuedPrompt`, status queued, delivered or
//! dropped), so a snapshot shows the queue. A delivered steer is also a user message, placed
//! where the model saw it. The projection keeps the prompts still queued, in order: the session
//! delivers, starts and drops them from there, so a replay finds the same queue.

use reel_proto::{
    Any,
    chat::{
        ChatContentRedacted, ChatContextCompacted, ChatMessageEntity, ChatPromptDelivered,
        ChatPromptDropped, ChatPromptQueued, QueuedPromptEntity,
    },
};

use super::{KIND_MESSAGE, TimelineProjection, UiEvents};
use crate::vocabulary::{MessageStatus, QueuedPromptKind, QueuedPromptStatus};

/// Entity kind of prompts queued while a run went.
const KIND_QUEUED_PROMPT: &str = "ChatQueuedPrompt";
/// Entity kind of compaction markers.
const KIND_COMPACTION: &str = "ChatCompaction";
/// Entity kind of redaction markers.
const KIND_REDACTION: &str = "ChatRedaction";

/// A prompt waiting in the queue.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuedPrompt {
    pub message_id: String,
    /// `steer` or `follow_up`.
    pub kind: String,
    pub prompt: String,
    /// The request that sent it.
    pub request_id: String,
}

impl QueuedPrompt {
    pub fn is(&self, kind: QueuedPromptKind) -> bool {
        self.kind == kind.as_str()
    }
}

impl TimelineProjection {
    /// The prompts queued and neither delivered nor dropped, oldest first.
    pub fn queued_prompts(&self) -> &[QueuedPrompt] {
        &self.queue
    }

    pub(super) fn queued(&mut self, q: &ChatPromptQueued, ordinal: u64, out: &mut UiEvents) {
        self.queue.push(QueuedPrompt {
            message_id: q.message_id.clone(),
            kind: q.kind.clone(),
            prompt: q.prompt.clone(),
            request_id: q.request_id.clone(),
        });
        let entity = QueuedPromptEntity {
            message_id: q.message_id.clone(),
            kind: q.kind.clone(),
            prompt: q.prompt.clone(),
            request_id: q.request_id.clone(),
            status: QueuedPromptStatus::Queued.into(),
            reason: String::new(),
        };
        self.insert(KIND_QUEUED_PROMPT, &q.message_id, ordinal, entity.into());
        out.push_owned(Any::from(q.clone()));
    }

    pub(super) fn delivered(&mut self, d: &ChatPromptDelivered, ordinal: u64, out: &mut UiEvents) {
        self.queue.retain(|q| q.message_id != d.message_id);
        self.set_queued_status(&d.message_id, ordinal, QueuedPromptStatus::Delivered, "");
        if d.kind == QueuedPromptKind::Steer.as_str() {
            let message = ChatMessageEntity {
                message_id: d.user_message_id.clone(),
                role: "user".into(),
                prompt: d.prompt.clone(),
                text: d.prompt.clone(),
                status: MessageStatus::Accepted.into(),
                r#final: true,
                correlation: d.correlation.clone(),
                ..Default::default()
            };
            self.insert(KIND_MESSAGE, &d.user_message_id, ordinal, message.into());
        }
        out.push_owned(Any::from(d.clone()));
    }

    pub(super) fn dropped(&mut self, d: &ChatPromptDropped, ordinal: u64, out: &mut UiEvents) {
        self.queue.retain(|q| q.message_id != d.message_id);
        self.set_queued_status(
            &d.message_id,
            ordinal,
            QueuedPromptStatus::Dropped,
            &d.reason,
        );
        out.push_owned(Any::from(d.clone()));
    }

    pub(super) fn compacted(&mut self, c: &ChatContextCompacted, ordinal: u64, out: &mut UiEvents) {
        self.insert(
            KIND_COMPACTION,
            &c.message_id,
            ordinal,
            Any::from(c.clone()),
        );
        out.push_owned(Any::from(c.clone()));
    }

    pub(super) fn redacted(&mut self, r: &ChatContentRedacted, ordinal: u64, out: &mut UiEvents) {
        self.insert(KIND_REDACTION, &r.message_id, ordinal, Any::from(r.clone()));
        out.push_owned(Any::from(r.clone()));
    }

    fn set_queued_status(
        &mut self,
        id: &str,
        ordinal: u64,
        status: QueuedPromptStatus,
        reason: &str,
    ) {
        if let Some(Any::QueuedPromptEntity(entity)) = self.entity_mut(id, ordinal) {
            entity.status = status.into();
            entity.reason = reason.to_owned();
        }
    }
}
