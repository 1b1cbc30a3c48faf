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

use reel_proto::chat::ChatContextCompacted;

use crate::{
    compaction::estimate,
    log::LogEntry,
    projection::Projection,
    usage::input_tokens,
    vocabulary::{CallPurpose, QueuedPromptKind},
};

/// How a compaction's summary opens, in the user message that carries it.
pub const SUMMARY_PREAMBLE: &str = "Summary of the conversation before this point:\n\n";

/// The user message that stands for the messages a compaction replaced.
pub fn summary_message(summary: &str, first_ordinal: u64) -> ContextMessage {
    ContextMessage::new(ContextRole::User, format!("{SUMMARY_PREAMBLE}{summary}")).at(first_ordinal)
}

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
    /// The log ordinal that made this message (for a compaction's summary: the first ordinal
    /// it covers). Compaction replaces messages by ordinal range.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ordinal: u64,
    /// Whether a turn (a run's prompt) starts here; a steer or a summary starts none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starts_turn: bool,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl ContextMessage {
    /// A message with only a role and text.
    pub fn new(role: ContextRole, text: String) -> Self {
        Self {
            role,
            text,
            reasoning: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            is_error: false,
            ordinal: 0,
            starts_turn: false,
        }
    }

    /// The message, made by the log event `ordinal`.
    pub fn at(mut self, ordinal: u64) -> Self {
        self.ordinal = ordinal;
        self
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
    /// Model calls started in the session so far (replies; summarization calls are not
    /// counted, so a script's turns stay the conversation's).
    #[serde(default)]
    calls: u64,
    /// Whether the call in progress is a summarization call (its text is not the
    /// conversation's).
    #[serde(default)]
    summarizing: bool,
    /// What the provider said the last reply call's input and output came to, and how many
    /// messages the conversation had then: the start of the next call's estimate.
    #[serde(default)]
    reported: Option<(u64, usize)>,
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

    /// An estimate of the input tokens of a request carrying the conversation (see
    /// [`crate::compaction`]).
    pub fn estimated_tokens(&self, system_prompt: Option<&str>) -> u64 {
        match self.reported {
            Some((tokens, len)) if len <= self.messages.len() => {
                tokens + estimate::messages(self.messages.iter().skip(len))
            }
            _ => {
                estimate::text(system_prompt.unwrap_or_default())
                    + estimate::messages(self.messages.iter())
            }
        }
    }

    /// A projection that starts from a stored conversation (a turn whose last event was
    /// `last_ordinal`), as if its log had been folded: resuming from a turns database, which
    /// keeps no log. Messages an older reel stored without their ordinal take the turn's, so a
    /// compaction never cuts away what it should keep.
    pub fn from_turn(messages: Vec<Arc<ContextMessage>>, calls: u64, last_ordinal: u64) -> Self {
        let messages = messages
            .into_iter()
            .map(|mut message| {
                if message.ordinal == 0 {
                    Arc::make_mut(&mut message).ordinal = last_ordinal;
                }
                message
            })
            .collect();
        Self {
            messages,
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
                let mut message =
                    ContextMessage::new(ContextRole::User, m.text.clone()).at(entry.ordinal);
                message.starts_turn = true;
                self.messages.push_back(Arc::new(message));
                self.current_assistant = None;
            }
            Any::ChatPromptDelivered(d) if d.kind == QueuedPromptKind::Steer.as_str() => {
                let message =
                    ContextMessage::new(ContextRole::User, d.prompt.clone()).at(entry.ordinal);
                self.messages.push_back(Arc::new(message));
                self.current_assistant = None;
            }
            Any::ChatProviderCallStarted(call) => {
                self.summarizing = call.purpose == CallPurpose::Summary.as_str();
                if !self.summarizing {
                    self.current_assistant = None;
                    self.calls += 1;
                }
            }
            Any::ChatProviderCallFinished(_) if self.summarizing => self.summarizing = false,
            Any::ChatProviderCallFinished(f) => {
                self.end_call();
                if let Some(usage) = &f.usage {
                    let tokens = input_tokens(usage) + u64::from(usage.output_tokens);
                    if tokens > 0 {
                        self.reported = Some((tokens, self.messages.len()));
                    }
                }
            }
            Any::ChatContextCompacted(c) => self.compact(c),
            Any::ChatReasoningSegmentStarted(s) => {
                let at = self.assistant_message(entry.ordinal);
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
                let at = self.assistant_message(entry.ordinal);
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
                let at = self.assistant_message(entry.ordinal);
                self.segments.insert(s.message_id.clone(), at);
            }
            Any::ChatTextDelta(d) => {
                let at = match self.segments.get(&d.message_id) {
                    Some(&at) if at < self.messages.len() => at,
                    _ => {
                        let at = self.assistant_message(entry.ordinal);
                        self.segments.insert(d.message_id.clone(), at);
                        at
                    }
                };
                Arc::make_mut(&mut self.messages[at]).text.push_str(&d.text);
            }
            Any::ChatToolCallRequested(t) => {
                let at = self.assistant_message(entry.ordinal);
                Arc::make_mut(&mut self.messages[at])
                    .tool_calls
                    .push(ContextToolCall {
                        id: t.tool_call_id.clone(),
                        name: t.tool_name.clone(),
                        arguments: t.input.clone(),
                    });
            }
            Any::ChatToolResultReady(r) => {
                let mut message =
                    ContextMessage::new(ContextRole::Tool, r.result.clone()).at(entry.ordinal);
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
    /// Replaces the messages from ordinals up to `last_ordinal` by the summary.
    fn compact(&mut self, compacted: &ChatContextCompacted) {
        let kept_from = self
            .messages
            .iter()
            .position(|m| m.ordinal > compacted.last_ordinal)
            .unwrap_or(self.messages.len());
        let kept = self.messages.split_off(kept_from);
        let summary = summary_message(&compacted.summary, compacted.first_ordinal.max(1));
        self.messages = kept;
        self.messages.push_front(Arc::new(summary));
        self.segments.clear();
        self.reasoning_segments.clear();
        self.current_assistant = None;
        self.reported = None;
    }

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
    fn assistant_message(&mut self, ordinal: u64) -> usize {
        if let Some(at) = self.current_assistant {
            return at;
        }
        self.messages.push_back(Arc::new(
            ContextMessage::new(ContextRole::Assistant, String::new()).at(ordinal),
        ));
        let at = self.messages.len() - 1;
        self.current_assistant = Some(at);
        at
    }
}
