//! Reading a Messages API stream: content blocks opened by `content_block_start`, grown by
//! `content_block_delta` and closed by `content_block_stop` (`text`, `thinking` with its
//! signature, `redacted_thinking`, `tool_use` with its input in `input_json_delta` pieces), the
//! model and usage from `message_start` and `message_delta`, `ping`s, and `error` events.

use eventsource_stream::Event;
use reel_proto::chat::UsageInfo;
use serde::Deserialize;
use serde_json::Value;

use reel_engine::{ProviderError, ProviderEvent};

use crate::http_stream::{Dialect, Pending, error_text};

/// Reads Messages API events.
#[derive(Default)]
pub(super) struct Blocks {
    /// Open content blocks by index: a tool use's id, name and input so far; `None` for text
    /// and thinking blocks.
    tool_uses: Vec<Option<(String, String, String)>>,
    usage: UsageInfo,
    stop_reason: Option<String>,
}

impl Dialect for Blocks {
    fn on_event(&mut self, event: &Event, out: &mut Pending) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return false;
        }
        let message: StreamEvent = match serde_json::from_str(data) {
            Ok(message) => message,
            Err(error) => {
                out.push_back(Err(ProviderError::Upstream(format!(
                    "an unreadable event from the server: {error}"
                ))));
                return true;
            }
        };
        match message {
            StreamEvent::MessageStart { message } => {
                if let Some(model) = message.model.filter(|m| !m.is_empty()) {
                    out.push_back(Ok(ProviderEvent::ResponseModel(model)));
                }
                if let Some(usage) = message.usage {
                    self.count(&usage, out);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, content_block, out),
            StreamEvent::ContentBlockDelta { index, delta } => self.delta(index, delta, out),
            StreamEvent::ContentBlockStop { index } => self.stop_block(index, out),
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.count(&usage, out);
                }
            }
            StreamEvent::MessageStop => {
                for index in 0..self.tool_uses.len() {
                    self.stop_block(index, out);
                }
                let stop_reason = self.stop_reason.take().unwrap_or_else(|| "end_turn".into());
                out.push_back(Ok(ProviderEvent::Finished { stop_reason }));
                return true;
            }
            StreamEvent::Error { error } => {
                out.push_back(Err(ProviderError::Upstream(error_text(&error))));
                return true;
            }
            StreamEvent::Ping | StreamEvent::Unknown => {}
        }
        false
    }
}

impl Blocks {
    fn start_block(&mut self, index: usize, block: Block, out: &mut Pending) {
        while self.tool_uses.len() <= index {
            self.tool_uses.push(None);
        }
        match block {
            Block::ToolUse { id, name } => {
                out.push_back(Ok(ProviderEvent::ToolCallStarted {
                    id: id.clone(),
                    name: name.clone(),
                }));
                self.tool_uses[index] = Some((id, name, String::new()));
            }
            Block::Text { text } if !text.is_empty() => {
                out.push_back(Ok(ProviderEvent::TextDelta(text)));
            }
            Block::Thinking { thinking } if !thinking.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningDelta(thinking)));
            }
            Block::RedactedThinking { data } => {
                out.push_back(Ok(ProviderEvent::RedactedReasoning(data)));
            }
            _ => {}
        }
    }

    fn delta(&mut self, index: usize, delta: Delta, out: &mut Pending) {
        match delta {
            Delta::TextDelta { text } if !text.is_empty() => {
                out.push_back(Ok(ProviderEvent::TextDelta(text)));
            }
            Delta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningDelta(thinking)));
            }
            Delta::SignatureDelta { signature } if !signature.is_empty() => {
                out.push_back(Ok(ProviderEvent::ReasoningSignature(signature)));
            }
            Delta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                if let Some(Some((id, _, input))) = self.tool_uses.get_mut(index) {
                    input.push_str(&partial_json);
                    out.push_back(Ok(ProviderEvent::ToolArgumentsDelta {
                        id: id.clone(),
                        delta: partial_json,
                    }));
                }
            }
            _ => {}
        }
    }

    /// A tool use is complete when its block stops.
    fn stop_block(&mut self, index: usize, out: &mut Pending) {
        if let Some((id, name, input)) = self.tool_uses.get_mut(index).and_then(Option::take) {
            let arguments = if input.is_empty() {
                "{}".to_owned()
            } else {
                input
            };
            out.push_back(Ok(ProviderEvent::ToolCallReady {
                id,
                name,
                arguments,
            }));
        }
    }

    /// Folds a usage report in: `message_start` has the input counts, `message_delta` the
    /// output count so far; each report updates what it names. Anthropic counts cache reads
    /// and writes beside `input_tokens` (not inside it, as OpenAI's `cached_tokens`), so they
    /// stay in their own fields and are priced and summed once.
    fn count(&mut self, usage: &Usage, out: &mut Pending) {
        if let Some(n) = usage.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.usage.cache_read_input_tokens = n;
        }
        out.push_back(Ok(ProviderEvent::Usage(self.usage)));
    }
}

/// One event of the stream, read leniently: unknown event and block types are skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<Usage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    #[serde(other)]
    Other,
}

// The variants are the API's own type tags (`text_delta`, ...), which all end in "delta".
#[allow(clippy::enum_variant_names)]
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(events: &[&str]) -> Vec<Result<ProviderEvent, ProviderError>> {
        let mut blocks = Blocks::default();
        let mut out = Pending::new();
        for data in events {
            let event = Event {
                event: String::new(),
                data: (*data).to_owned(),
                id: String::new(),
                retry: None,
            };
            blocks.on_event(&event, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn cache_reads_are_counted_once_beside_the_input() {
        let events = parse(&[
            r#"{"type":"message_start","message":{"model":"claude-x-2026","usage":{"input_tokens":29,"cache_read_input_tokens":30,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(
            events[0],
            Ok(ProviderEvent::ResponseModel("claude-x-2026".into()))
        );
        let usage = events
            .iter()
            .rev()
            .find_map(|e| match e {
                Ok(ProviderEvent::Usage(usage)) => Some(*usage),
                _ => None,
            })
            .unwrap();
        assert_eq!(usage.input_tokens, 29);
        assert_eq!(usage.cache_read_input_tokens, 30);
        assert_eq!(usage.cache_creation_input_tokens, 5);
        assert_eq!(
            usage.cached_tokens, 0,
            "cache reads are not also OpenAI-style cached tokens"
        );
        assert_eq!(usage.output_tokens, 12);
        assert_eq!(reel_engine::input_tokens(&usage), 64);
        assert_eq!(reel_engine::cached_tokens(&usage), 30);
    }

    #[test]
    fn thinking_signatures_and_encrypted_blocks_are_kept() {
        let events = parse(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig-1"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"enc-2"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
        ]);
        assert_eq!(
            events,
            vec![
                Ok(ProviderEvent::ReasoningDelta("Let me see.".into())),
                Ok(ProviderEvent::ReasoningSignature("sig-1".into())),
                Ok(ProviderEvent::RedactedReasoning("enc-2".into())),
            ]
        );
    }
}
