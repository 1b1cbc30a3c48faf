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

use std::io::Write;

use reel_proto::chat::ModelRequestFingerprint;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    context::{ContextMessage, ContextReasoning, ContextRole, ContextToolCall},
    provider::ModelRequest,
    tools::ToolChoice,
};

/// The fingerprint of `request`.
pub fn fingerprint(request: &ModelRequest) -> ModelRequestFingerprint {
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
        messages: digest(&MessagesSent(&request.messages)),
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
    let sum = hasher.0.finalize();
    sum[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A hasher fed as a writer.
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

/// The conversation as a provider is sent it (see [`MessageSent`]).
struct MessagesSent<'a>(&'a crate::context::Conversation);

impl Serialize for MessagesSent<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|message| MessageSent::of(message)))
    }
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
}
