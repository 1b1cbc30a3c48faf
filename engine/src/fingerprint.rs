//! What a model call was sent, recorded on its `ChatProviderCallStarted`: a digest of each part
//! of the request (system prompt, messages, tools) and the parameters in clear. A re-run of a
//! recorded session compares the request it would send with the one that was sent, part by
//! part, without the log holding every request whole (a conversation resent at every call
//! would make a session's log quadratic).
//!
//! A digest is the first 16 bytes of the SHA-256 of the part as JSON, written into the hasher
//! as it is serialized (no copy of the conversation is made). Only what a provider is sent goes
//! in: a message's place in the log (its ordinal) and whether it starts a turn do not, so the
//! same conversation in another session digests the same.
//!
//! A session fingerprints its calls with a [`Fingerprinter`], which keeps the hasher after the
//! messages of its last call: the next call's conversation is the same messages and a few
//! more, so only those are hashed. Without it, every call hashed the whole history, and a
//! turn cost more the older the session was. A re-run's recorded provider keeps one too.

use std::{io::Write, sync::Arc};

use reel_proto::chat::ModelRequestFingerprint;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    context::{ContextMessage, ContextReasoning, ContextRole, ContextToolCall, Conversation},
    provider::ModelRequest,
    tools::ToolChoice,
};

/// The fingerprint of `request`.
pub fn fingerprint(request: &ModelRequest) -> ModelRequestFingerprint {
    Fingerprinter::default().fingerprint(request)
}

/// Fingerprints one session's model calls in turn: each call's conversation is digested on
/// from the last call's (see [`Fingerprinter::digest`]).
#[derive(Default)]
pub struct Fingerprinter {
    /// The conversation last digested, and the hasher after its messages (before the `]`).
    /// Holding the conversation keeps its messages' `Arc`s shared and alive, so that a message
    /// changed since is a new `Arc` (the projection's `make_mut` copies a shared one) at an
    /// address no hashed one can have, and never passes for the one hashed. Boxed: a session
    /// that has made no call holds a pointer.
    last: Option<Box<(Conversation, Hashing)>>,
}

impl Fingerprinter {
    /// The fingerprint of `request`, the same as [`fingerprint`]'s.
    pub fn fingerprint(&mut self, request: &ModelRequest) -> ModelRequestFingerprint {
        fingerprint_parts(request, self.digest(&request.messages))
    }

    /// The digest of `messages`: the conversation as a JSON array (`[`, the messages between
    /// commas, `]`), the bytes [`digest`] would hash, each message hashed once while the
    /// conversation only grows.
    fn digest(&mut self, messages: &Conversation) -> String {
        let (from, mut hasher) = match self.last.take().map(|last| *last) {
            Some((seen, hasher)) if starts_with(messages, &seen) => (seen.len(), hasher),
            _ => {
                let mut hasher = Hashing(Sha256::new());
                hasher.0.update(b"[");
                (0, hasher)
            }
        };
        for (at, message) in messages.iter().enumerate().skip(from) {
            if at > 0 {
                hasher.0.update(b",");
            }
            // Writing into a hasher cannot fail, and a message always serializes.
            let _ = serde_json::to_writer(&mut hasher, &MessageSent::of(message));
        }
        let mut closed = hasher.0.clone();
        closed.update(b"]");
        self.last = Some(Box::new((messages.clone(), hasher)));
        hex(closed)
    }
}

/// The fingerprint of `request` whose conversation digests to `messages`.
fn fingerprint_parts(request: &ModelRequest, messages: String) -> ModelRequestFingerprint {
    let settings = &request.settings;
    let parameters = serde_json::json!({
        "model": settings.model,
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "thinking_budget": settings.thinking_budget,
        "stop": settings.stop,
        "tool_call_prefill": settings.tool_call_prefill,
    });
    let tools: Vec<ToolSent<'_>> = request
        .tools
        .iter()
        .map(|tool| ToolSent {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        })
        .collect();
    let choice = match request.tool_choice {
        ToolChoice::Auto => "auto",
        ToolChoice::Required => "required",
    };
    ModelRequestFingerprint {
        system_prompt: digest(&request.system_prompt.as_deref().unwrap_or_default()),
        messages,
        message_count: u32::try_from(request.messages.len()).unwrap_or(u32::MAX),
        tools: digest(&(tools, choice)),
        tool_names: request.tools.iter().map(|t| t.name.clone()).collect(),
        parameters: parameters.to_string(),
    }
}

/// The first 16 bytes of the SHA-256 of `value` as JSON, in hex.
fn digest(value: &impl Serialize) -> String {
    let mut hasher = Hashing(Sha256::new());
    // Writing into a hasher cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(&mut hasher, value);
    hex(hasher.0)
}

fn hex(hasher: Sha256) -> String {
    let sum = hasher.finalize();
    sum[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether `messages` begins with the very messages of `seen`.
fn starts_with(messages: &Conversation, seen: &Conversation) -> bool {
    seen.len() <= messages.len()
        && seen
            .iter()
            .zip(messages.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b))
}

/// A hasher fed as a writer.
#[derive(Clone)]
struct Hashing(Sha256);

impl Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tool as a provider is told of it.
#[derive(Serialize)]
struct ToolSent<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

/// What of a message a provider is sent: not its ordinal, nor whether it starts a turn.
#[derive(Serialize)]
struct MessageSent<'a> {
    role: ContextRole,
    text: &'a str,
    reasoning: Vec<&'a ContextReasoning>,
    tool_calls: &'a [ContextToolCall],
    tool_call_id: &'a str,
    is_error: bool,
}

impl<'a> MessageSent<'a> {
    fn of(message: &'a ContextMessage) -> Self {
        Self {
            role: message.role,
            text: &message.text,
            // Unsigned reasoning is not sent back.
            reasoning: message.reasoning.iter().filter(|r| r.is_kept()).collect(),
            tool_calls: &message.tool_calls,
            tool_call_id: &message.tool_call_id,
            is_error: message.is_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{provider::ModelSettings, tools::ToolDefinition};

    /// The conversation as a provider is sent it (see [`MessageSent`]).
    struct MessagesSent<'a>(&'a Conversation);

    impl Serialize for MessagesSent<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(self.0.iter().map(|message| MessageSent::of(message)))
        }
    }

    fn request(text: &str, ordinal: u64) -> ModelRequest {
        let message = ContextMessage::new(ContextRole::User, text.to_owned()).at(ordinal);
        ModelRequest {
            system_prompt: Some("Be brief.".into()),
            messages: std::iter::once(Arc::new(message)).collect(),
            settings: ModelSettings {
                model: "m".into(),
                temperature: Some(0.2),
                ..Default::default()
            },
            tools: vec![ToolDefinition {
                name: "send".into(),
                description: "Sends.".into(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_same_request_elsewhere_in_a_log_has_the_same_fingerprint() {
        let here = fingerprint(&request("hi", 3));
        let there = fingerprint(&request("hi", 300));
        assert_eq!(here, there);
        assert_eq!(here.messages.len(), 32);
        assert_eq!(here.message_count, 1);
        assert_eq!(here.tool_names, ["send"]);
        assert!(
            here.parameters.contains("\"temperature\":0.2"),
            "{}",
            here.parameters
        );
    }

    #[test]
    fn each_part_that_changes_changes_its_digest_only() {
        let base = request("hi", 3);
        let original = fingerprint(&base);
        let other_text = fingerprint(&request("hello", 3));
        assert_ne!(original.messages, other_text.messages);
        assert_eq!(original.system_prompt, other_text.system_prompt);
        assert_eq!(original.tools, other_text.tools);
        let mut prompted = base.clone();
        prompted.system_prompt = Some("Be long.".into());
        let prompted = fingerprint(&prompted);
        assert_ne!(original.system_prompt, prompted.system_prompt);
        assert_eq!(original.messages, prompted.messages);
        let mut required = base.clone();
        required.tool_choice = ToolChoice::Required;
        assert_ne!(original.tools, fingerprint(&required).tools);
    }

    fn message(text: &str) -> Arc<ContextMessage> {
        Arc::new(ContextMessage::new(ContextRole::User, text.to_owned()))
    }

    #[test]
    fn a_conversation_digested_on_from_the_last_call_digests_as_it_does_whole() {
        let whole = |messages: &Conversation| digest(&MessagesSent(messages));
        let mut carried = Fingerprinter::default();
        let mut messages = Conversation::new();
        assert_eq!(carried.digest(&messages), whole(&messages));
        // Growing, a message and two at a time.
        for turn in 0..5 {
            messages.push_back(message(&format!("question {turn}")));
            assert_eq!(carried.digest(&messages), whole(&messages));
            messages.push_back(message(&format!("answer {turn}")));
            messages.push_back(message(&format!("more {turn}")));
            assert_eq!(carried.digest(&messages), whole(&messages));
        }
        // The same conversation again.
        assert_eq!(carried.digest(&messages), whole(&messages));
        // A message already hashed changed (redacted): its Arc is a new one.
        let mut changed = messages.clone();
        changed.set(3, message("[redacted]"));
        assert_ne!(whole(&changed), whole(&messages));
        assert_eq!(carried.digest(&changed), whole(&changed));
        // Made shorter (compacted), then empty.
        let kept = changed.clone().split_off(10);
        assert_eq!(carried.digest(&kept), whole(&kept));
        assert_eq!(
            carried.digest(&Conversation::new()),
            whole(&Conversation::new())
        );
        // And each call's whole fingerprint agrees with the one made from nothing.
        let base = request("hi", 3);
        assert_eq!(carried.fingerprint(&base), fingerprint(&base));
    }
}
