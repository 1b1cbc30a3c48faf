//! The log's events as ACP `session/update` notifications: one pure mapping, used live while a
//! prompt runs and for the replay of `session/load`, so a loaded session shows exactly what its
//! prompts streamed.
//!
//! Text and reasoning deltas are message and thought chunks (with the message id, so a client
//! joins them); a tool call is announced when the model starts it and updated as its
//! arguments, execution, result and end come. Events an editor has no place for (provider
//! calls, segments, compaction) map to nothing.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, MessageId, SessionUpdate, ToolCall, ToolCallContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use reel_engine::{LogEntry, ToolCallStatus as ReelToolStatus};
use reel_proto::Any;

/// Whether the updates are for a prompt running now or for a replay of the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// The client shows the prompt it sent: the user's message is not echoed.
    Live,
    /// The client has nothing yet: the user's messages are part of the history.
    Replay,
}

/// The notifications `entry` becomes.
pub fn updates_of(entry: &LogEntry, moment: Moment) -> Vec<SessionUpdate> {
    match &entry.event {
        Any::ChatUserMessageAccepted(accepted) if moment == Moment::Replay => {
            let text = if accepted.text.is_empty() {
                &accepted.prompt
            } else {
                &accepted.text
            };
            vec![SessionUpdate::UserMessageChunk(chunk(
                text,
                &accepted.message_id,
            ))]
        }
        Any::ChatTextDelta(delta) => vec![SessionUpdate::AgentMessageChunk(chunk(
            &delta.text,
            &delta.message_id,
        ))],
        Any::ChatReasoningDelta(delta) => vec![SessionUpdate::AgentThoughtChunk(chunk(
            &delta.text,
            &delta.message_id,
        ))],
        Any::ChatToolCallStarted(started) => vec![SessionUpdate::ToolCall(
            ToolCall::new(started.tool_call_id.clone(), started.tool_name.clone())
                .kind(ToolKind::Other)
                .status(ToolCallStatus::Pending),
        )],
        Any::ChatToolCallRequested(requested) => vec![update(
            &requested.tool_call_id,
            ToolCallUpdateFields::new()
                .title(requested.tool_name.clone())
                .raw_input(arguments(&requested.input)),
        )],
        Any::ChatToolExecutionStarted(started) => {
            let status = match ReelToolStatus::parse(&started.status) {
                Some(ReelToolStatus::Executing) => ToolCallStatus::InProgress,
                _ => ToolCallStatus::Pending,
            };
            vec![update(
                &started.tool_call_id,
                ToolCallUpdateFields::new().status(status),
            )]
        }
        Any::ChatToolResultReady(ready) => vec![update(
            &ready.tool_call_id,
            ToolCallUpdateFields::new()
                .content(vec![ToolCallContent::from(ready.result.clone())])
                .raw_output(serde_json::json!({
                    "result": ready.result,
                    "isError": ready.is_error,
                })),
        )],
        Any::ChatToolCallFinished(finished) => {
            let status = match ReelToolStatus::parse(&finished.status) {
                Some(ReelToolStatus::Completed) => ToolCallStatus::Completed,
                _ => ToolCallStatus::Failed,
            };
            vec![update(
                &finished.tool_call_id,
                ToolCallUpdateFields::new().status(status),
            )]
        }
        _ => Vec::new(),
    }
}

fn chunk(text: &str, message_id: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.to_owned()))
        .message_id(MessageId::new(message_id.to_owned()))
}

fn update(tool_call_id: &str, fields: ToolCallUpdateFields) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(tool_call_id.to_owned(), fields))
}

/// A tool call's arguments as JSON; text that is not JSON stays a string.
pub fn arguments(input: &str) -> serde_json::Value {
    serde_json::from_str(input).unwrap_or_else(|_| serde_json::Value::String(input.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_proto::chat::{ChatTextDelta, ChatToolCallFinished, ChatUserMessageAccepted};

    fn entry(event: impl Into<Any>) -> LogEntry {
        LogEntry {
            ordinal: 1,
            recorded_at_ms: 0,
            event: event.into(),
        }
    }

    #[test]
    fn the_user_message_is_history_only() {
        let accepted = entry(ChatUserMessageAccepted {
            message_id: "u1".into(),
            text: "hello".into(),
            ..Default::default()
        });
        assert!(updates_of(&accepted, Moment::Live).is_empty());
        let replayed = updates_of(&accepted, Moment::Replay);
        let json = serde_json::to_value(&replayed[0]).unwrap();
        assert_eq!(json["sessionUpdate"], "user_message_chunk");
        assert_eq!(json["content"]["text"], "hello");
        assert_eq!(json["messageId"], "u1");
    }

    #[test]
    fn deltas_are_chunks_and_a_tool_end_is_its_status() {
        let delta = entry(ChatTextDelta {
            message_id: "m1".into(),
            text: "Hi".into(),
        });
        let json = serde_json::to_value(&updates_of(&delta, Moment::Live)[0]).unwrap();
        assert_eq!(json["sessionUpdate"], "agent_message_chunk");
        assert_eq!(json["content"]["text"], "Hi");
        for (status, expected) in [("completed", "completed"), ("cancelled", "failed")] {
            let finished = entry(ChatToolCallFinished {
                tool_call_id: "t1".into(),
                status: status.into(),
                ..Default::default()
            });
            let json = serde_json::to_value(&updates_of(&finished, Moment::Replay)[0]).unwrap();
            assert_eq!(json["sessionUpdate"], "tool_call_update");
            assert_eq!(json["toolCallId"], "t1");
            assert_eq!(json["status"], expected, "{status}");
        }
    }
}
