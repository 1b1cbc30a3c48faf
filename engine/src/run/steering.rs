//! Steering and follow-ups: prompts a client sends while a run goes.
//!
//! Both are queued on the log (`ChatPromptQueued`) when they come, and the timeline keeps the
//! queue, so a replay or a resume finds it as it was. A steer is delivered into its run at the
//! run's next model call (`ChatPromptDelivered`, where the model context gains the user
//! message); a follow-up starts its own run when the running one ends. A queued prompt that
//! will never reach the model is dropped (`ChatPromptDropped`) with the reason.

use std::sync::Arc;

use reel_proto::chat::{ChatPromptDelivered, ChatPromptDropped, ChatPromptQueued, CorrelationInfo};

use super::ActiveRun;
use crate::{
    id::new_id,
    session::Session,
    timeline::QueuedPrompt,
    vocabulary::{DropReason, QueuedPromptKind},
};

impl Session {
    /// Queues `prompt` as a `kind` sent by request `request_id` while the run `correlation`
    /// goes. Returns its id.
    pub async fn queue_prompt(
        &mut self,
        request_id: &Arc<str>,
        kind: QueuedPromptKind,
        prompt: String,
        correlation: &CorrelationInfo,
    ) -> String {
        let message_id = new_id();
        let queued = ChatPromptQueued {
            message_id: message_id.clone(),
            kind: kind.into(),
            prompt,
            request_id: request_id.to_string(),
            correlation: Some(correlation.clone()),
        };
        self.append(request_id, queued).await;
        message_id
    }

    /// The oldest follow-up still queued.
    pub fn next_follow_up(&self) -> Option<QueuedPrompt> {
        self.timeline()
            .queued_prompts()
            .iter()
            .find(|q| q.is(QueuedPromptKind::FollowUp))
            .cloned()
    }

    /// Records that the follow-up `queued` starts now (its run follows, under its request id).
    pub async fn deliver_follow_up(&mut self, queued: &QueuedPrompt) {
        let rid: Arc<str> = Arc::from(queued.request_id.as_str());
        let delivered = ChatPromptDelivered {
            message_id: queued.message_id.clone(),
            kind: queued.kind.clone(),
            prompt: queued.prompt.clone(),
            user_message_id: String::new(),
            correlation: None,
        };
        self.append(&rid, delivered).await;
    }

    /// Drops the queued prompts of `kind` (every kind: `None`) for `reason`, and returns them:
    /// each follow-up's request is owed a done. A follow-up's drop is stamped with the request
    /// that sent it (its done follows); a steer's request has had its done, so its drop is
    /// stamped with `request_id`, the request whose handling drops it.
    pub async fn drop_queued(
        &mut self,
        request_id: &Arc<str>,
        kind: Option<QueuedPromptKind>,
        reason: DropReason,
    ) -> Vec<QueuedPrompt> {
        let dropped: Vec<QueuedPrompt> = self
            .timeline()
            .queued_prompts()
            .iter()
            .filter(|q| kind.is_none_or(|kind| q.is(kind)))
            .cloned()
            .collect();
        for queued in &dropped {
            let event = ChatPromptDropped {
                message_id: queued.message_id.clone(),
                kind: queued.kind.clone(),
                reason: reason.into(),
            };
            let rid: Arc<str> = if queued.is(QueuedPromptKind::FollowUp) {
                Arc::from(queued.request_id.as_str())
            } else {
                Arc::clone(request_id)
            };
            self.append(&rid, event).await;
        }
        dropped
    }

    /// Whether a steer waits for the next model call.
    pub(super) fn has_undelivered_steer(&self) -> bool {
        self.timeline()
            .queued_prompts()
            .iter()
            .any(|q| q.is(QueuedPromptKind::Steer))
    }

    /// Delivers every queued steer into `run`, before its next model call.
    pub(super) async fn deliver_steers(&mut self, run: &ActiveRun<'_>) {
        let steers: Vec<QueuedPrompt> = self
            .timeline()
            .queued_prompts()
            .iter()
            .filter(|q| q.is(QueuedPromptKind::Steer))
            .cloned()
            .collect();
        for steer in steers {
            let delivered = ChatPromptDelivered {
                message_id: steer.message_id,
                kind: steer.kind,
                prompt: steer.prompt,
                user_message_id: new_id(),
                correlation: Some(run.correlation.clone()),
            };
            self.append(&run.request_id, delivered).await;
        }
    }
}
