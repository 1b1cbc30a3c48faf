//! The model context projection: the conversation the next model call sees.
//!
//! Like the timeline, it is a pure fold over the log, so a resumed or replayed session gives the
//! model exactly what the live session would have. Reasoning is shown to users and sent back to
//! models only where the provider signed it (Anthropic's extended thinking, whose API wants the
//! signed blocks back in a tool loop); unsigned reasoning is dropped from the context when its
//! model call ends. Text that streamed before a run was stopped or failed stays in the
//! conversation, because the user saw it.

use std::{collections::HashMap, sync::Arc};

use reel_proto::Any;

use crate::{log::LogEntry, projection::Projection};

/// Who said a [`ContextMessage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextRole {
    User,
    Assistant,
    Tool,
}

/// A tool call the model made, as the next model call must see it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContextToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// A reasoning block of an assistant message that goes back to the provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContextReasoning {
    pub text: String,
    /// The provider's signature of `text`.
    #[serde(default)]
    pub signature: String,
    /// A block the provider sent encrypted (it has no text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub redacted_data: String,
}

impl ContextReasoning {
    /// Whether the block goes back to the provider (it was signed, or came encrypted).
    pub fn is_kept(&self) -> bool {
        !self.signature.is_empty() || !self.redacted_data.is_empty()
    }
}

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContextMessage {
    pub role: ContextRole,
    pub text: String,
    /// For assistant messages: signed reasoning, in the order it came, before the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ContextReasoning>,
    /// For assistant messages: the tool calls the model made.
    pub tool_calls: Vec<ContextToolCall>,
    /// For tool messages: the call this is the result of.
    pub tool_call_id: String,
    /// For tool messages: the tool failed (`text` says why).
    #[serde(default)]
    pub is_error: bool,
}

impl ContextMessage {
    fn new(role: ContextRole, text: String) -> Self {
        Self {
            role,
            text,
            reasoning: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            is_error: false,
        }
    }
}

/// A conversation: its messages, oldest first, in a persistent vector. Cloning one is O(1) and
/// shares everything; changing a clone copies only the path to what changed.
pub type Conversation = imbl::Vector<Arc<ContextMessage>>;

/// Folds the log into the conversation.
///
/// Every model request carries the whole conversation, so a request must not cost the
/// session's age: the conversation is a persistent vector of shared messages, and a request
/// takes it in O(1) (a plain `Vec` of `Arc`s cost a reference count per message per call,
/// which made a long session's turns slower and slower). A message is changed in place only
/// while no request holds it (the newest assistant message, as it streams); otherwise the
/// change copies that message and the vector's path to it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ModelContextProjection {
    messages: Conversation,
    /// Text segment message id -> index of its assistant message (for the call in progress).
    segments: HashMap<String, usize>,
    /// Reasoning segment message id -> its assistant message and reasoning block (for the call
    /// in progress).
    #[serde(default)]
    reasoning_segments: HashMap<String, (usize, usize)>,
    /// The assistant message of the model call in progress, if it has one yet.
    current_assistant: Option<usize>,
    /// Model calls started in the session so far.
    #[serde(default)]
    calls: u64,
}

impl ModelContextProjection {
    pub fn new() -> Self {
        Self::default()
    }

    /// The conversation so far, oldest first.
    pub fn messages(&self) -> &Conversation {
        &self.messages
    }

    /// How many model calls the session has started.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// A projection that starts from a stored conversation (a turn), as if its log had been
    /// folded: resuming from a turns database, which keeps no log.
    pub fn from_turn(messages: Vec<Arc<ContextMessage>>, calls: u64) -> Self {
        Self {
            messages: messages.into_iter().collect(),
            calls,
            ..Self::default()
        }
    }
}

impl Projection for ModelContextProjection {
    type Output = ();

    fn apply(&mut self, entry: &LogEntry) {
        match &entry.event {
            Any::ChatUserMessageAccepted(m) => {
                self.messages.push_back(Arc::new(ContextMessage::new(
                    ContextRole::User,
                    m.text.clone(),
                )));
                self.current_assistant = None;
            }
            Any::ChatProviderCallStarted(_) => {
                self.current_assistant = None;
                self.calls += 1;
            }
            Any::ChatProviderCallFinished(_) => self.end_call(),
            Any::ChatReasoningSegmentStarted(s) => {
                let at = self.assistant_message();
                let reasoning = &mut Arc::make_mut(&mut self.messages[at]).reasoning;
                reasoning.push(ContextReasoning::default());
                self.reasoning_segments
                    .insert(s.message_id.clone(), (at, reasoning.len() - 1));
            }
            Any::ChatReasoningDelta(d) => {
                if let Some(block) = self.reasoning_block(&d.message_id) {
                    block.text.push_str(&d.text);
                }
            }
            Any::ChatReasoningSignature(signed) if !signed.redacted_data.is_empty() => {
                let at = self.assistant_message();
                Arc::make_mut(&mut self.messages[at])
                    .reasoning
                    .push(ContextReasoning {
                        redacted_data: signed.redacted_data.clone(),
                        ..ContextReasoning::default()
                    });
            }
            Any::ChatReasoningSignature(signed) => {
                if let Some(block) = self.reasoning_block(&signed.message_id) {
                    block.signature.clone_from(&signed.signature);
                }
            }
            Any::ChatTextSegmentStarted(s) => {
                let at = self.assistant_message();
                self.segments.insert(s.message_id.clone(), at);
            }
            Any::ChatTextDelta(d) => {
                let at = match self.segments.get(&d.message_id) {
                    Some(&at) if at < self.messages.len() => at,
                    _ => {
                        let at = self.assistant_message();
                        self.segments.insert(d.message_id.clone(), at);
                        at
                    }
                };
                Arc::make_mut(&mut self.messages[at]).text.push_str(&d.text);
            }
            Any::ChatToolCallRequested(t) => {
                let at = self.assistant_message();
                Arc::make_mut(&mut self.messages[at])
                    .tool_calls
                    .push(ContextToolCall {
                        id: t.tool_call_id.clone(),
                        name: t.tool_name.clone(),
                        arguments: t.input.clone(),
                    });
            }
            Any::ChatToolResultReady(r) => {
                let mut message = ContextMessage::new(ContextRole::Tool, r.result.clone());
                message.tool_call_id.clone_from(&r.tool_call_id);
                message.is_error = r.is_error;
                self.messages.push_back(Arc::new(message));
                self.current_assistant = None;
            }
            _ => {}
        }
    }
}

impl ModelContextProjection {
    /// The reasoning block of the segment `message_id` of the call in progress.
    fn reasoning_block(&mut self, message_id: &str) -> Option<&mut ContextReasoning> {
        let &(at, block) = self.reasoning_segments.get(message_id)?;
        Arc::make_mut(self.messages.get_mut(at)?)
            .reasoning
            .get_mut(block)
    }

    /// A model call ended: its segments are closed, reasoning that is not sent back is dropped,
    /// and an assistant message left with nothing in it is removed.
    fn end_call(&mut self) {
        self.segments.clear();
        self.reasoning_segments.clear();
        let Some(at) = self.current_assistant else {
            return;
        };
        if let Some(message) = self.messages.get_mut(at) {
            if message.reasoning.iter().any(|r| !r.is_kept()) {
                Arc::make_mut(message)
                    .reasoning
                    .retain(ContextReasoning::is_kept);
            }
            let empty = message.text.is_empty()
                && message.tool_calls.is_empty()
                && message.reasoning.is_empty();
            if empty && at + 1 == self.messages.len() {
                self.messages.pop_back();
                self.current_assistant = None;
            }
        }
    }

    /// The assistant message of the current model call, created on first use.
    fn assistant_message(&mut self) -> usize {
        if let Some(at) = self.current_assistant {
            return at;
        }
        self.messages.push_back(Arc::new(ContextMessage::new(
            ContextRole::Assistant,
            String::new(),
        )));
        let at = self.messages.len() - 1;
        self.current_assistant = Some(at);
        at
    }
}
