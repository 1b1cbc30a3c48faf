use reel_proto::chat::{
    ChatProviderCallFinished, ChatProviderCallStarted, ChatRunFinished, ChatRunStarted,
    ChatTextSegmentStarted, ChatToolApprovalDecided, ChatToolApprovalRequested,
    ChatToolArgumentsDelta, ChatToolCallFinished, ChatToolCallRequested, ChatToolCallStarted,
    ChatToolResultReady, ChatUserMessageAccepted, CorrelationInfo,
};

use super::*;
use crate::ContextRole;

fn delta(message_id: &str, text: &str) -> Any {
    reel_proto::chat::ChatTextDelta {
        message_id: message_id.into(),
        text: text.into(),
    }
    .into()
}

/// A run: the user asks for a phone number, a tool looks it up, the assistant says it.
fn log() -> Vec<LogEntry> {
    let events: Vec<Any> = vec![
        ChatUserMessageAccepted {
            message_id: "u1".into(),
            role: "user".into(),
            prompt: "call Ada at 555-0199".into(),
            text: "call Ada at 555-0199".into(),
            ..Default::default()
        }
        .into(),
        ChatRunStarted {
            message_id: "u1".into(),
            prompt: "call Ada at 555-0199".into(),
            correlation: Some(CorrelationInfo::default()),
            ..Default::default()
        }
        .into(),
        ChatProviderCallStarted::default().into(),
        ChatToolCallStarted {
            message_id: "c1".into(),
            tool_call_id: "call_1".into(),
            tool_name: "dial".into(),
            ..Default::default()
        }
        .into(),
        ChatToolArgumentsDelta {
            message_id: "c1".into(),
            arguments: "{\"number\":\"555-".into(),
        }
        .into(),
        ChatToolArgumentsDelta {
            message_id: "c1".into(),
            arguments: "0199\"}".into(),
        }
        .into(),
        ChatToolCallRequested {
            message_id: "c1".into(),
            tool_call_id: "call_1".into(),
            tool_name: "dial".into(),
            input: "{\"number\":\"555-0199\"}".into(),
            ..Default::default()
        }
        .into(),
        ChatToolApprovalRequested {
            tool_call_id: "call_1".into(),
            tool_name: "dial".into(),
            input: "{\"number\":\"555-0199\"}".into(),
            ..Default::default()
        }
        .into(),
        ChatToolResultReady {
            message_id: "r1".into(),
            tool_call_id: "call_1".into(),
            tool_name: "dial".into(),
            result: "ringing".into(),
            status: "success".into(),
            ..Default::default()
        }
        .into(),
        ChatTextSegmentStarted {
            message_id: "a1".into(),
            role: "assistant".into(),
            ..Default::default()
        }
        .into(),
        delta("a1", "Dialled 555-"),
        delta("a1", "0199 for you."),
        ChatToolApprovalDecided {
            tool_call_id: "call_1".into(),
            decision: "allowed".into(),
            ..Default::default()
        }
        .into(),
        ChatToolCallFinished {
            message_id: "c1".into(),
            ..Default::default()
        }
        .into(),
        ChatProviderCallFinished::default().into(),
        ChatRunFinished {
            message_id: "u1".into(),
            ..Default::default()
        }
        .into(),
    ];
    events
        .into_iter()
        .zip(1..)
        .map(|(event, ordinal)| LogEntry {
            ordinal,
            recorded_at_ms: 1000 + ordinal,
            event,
        })
        .collect()
}

/// Redacts `log` with `scope`: the rewritten entries and the state after the marker.
fn redact(scope: RedactionScope) -> Result<(Vec<LogEntry>, SessionState), RedactionError> {
    let log = log();
    let mut survey = Survey::new(scope);
    for entry in &log {
        survey.look(entry);
    }
    let mut eraser = survey.finish()?;
    let rewritten = log.iter().filter_map(|e| eraser.rewrite(e)).collect();
    let (_, state) = eraser.finish(log.len() as u64 + 1, 5000, "request 42");
    Ok((rewritten, state))
}

/// Every string of the state as JSON (entities, context, usage).
fn everything(state: &SessionState) -> String {
    serde_json::to_string(state).unwrap()
}

fn text_of(state: &SessionState, id: &str) -> String {
    let entity = state.timeline.snapshot().entities;
    let entity = entity.iter().find(|e| e.id == id).unwrap();
    match entity.payload.as_ref().unwrap() {
        Any::ChatMessageEntity(m) => m.text.clone(),
        Any::ToolCallEntity(c) => c.input.clone(),
        Any::ToolResultEntity(r) => r.result.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_match_erases_every_entity_it_is_in_even_across_deltas() {
    let pattern = |text: &str| text.contains("555-0199");
    let (rewritten, state) = redact(RedactionScope::Matching(Box::new(pattern))).unwrap();
    let all = everything(&state);
    assert!(!all.contains("555-0199"), "{all}");
    // The assistant's text only holds the number across two deltas; it is erased too.
    assert_eq!(text_of(&state, "a1"), TOMBSTONE);
    assert_eq!(text_of(&state, "u1"), TOMBSTONE);
    assert_eq!(text_of(&state, "c1"), TOMBSTONE);
    // The result did not hold it.
    assert_eq!(text_of(&state, "r1"), "ringing");
    // u1 (accepted, run started), c1 (two deltas, requested, approval), a1 (two deltas).
    assert_eq!(rewritten.len(), 8);
    let context = state.context.messages();
    assert_eq!(context[0].role, ContextRole::User);
    assert_eq!(context[0].text, TOMBSTONE);
    let marker = state.timeline.snapshot().entities.pop().unwrap();
    assert_eq!(marker.kind, "ChatRedaction");
    let Some(Any::ChatContentRedacted(record)) = marker.payload else {
        panic!("the marker is the redaction event");
    };
    assert_eq!(record.scope, "match");
    assert_eq!(record.entity_ids, ["u1", "c1", "a1"]);
    assert_eq!(record.events_rewritten, 8);
    assert_eq!(record.reason, "request 42");
}

#[test]
fn an_ordinal_range_erases_the_entities_its_events_carried() {
    // Ordinal 9 is the tool result; 10 the assistant's segment start (no content).
    let (rewritten, state) = redact(RedactionScope::Ordinals { first: 9, last: 10 }).unwrap();
    assert_eq!(rewritten.len(), 1);
    assert_eq!(text_of(&state, "r1"), TOMBSTONE);
    assert_eq!(text_of(&state, "a1"), "Dialled 555-0199 for you.");
    assert_eq!(text_of(&state, "u1"), "call Ada at 555-0199");
}

#[test]
fn one_entity_or_all_of_them() {
    let (_, state) = redact(RedactionScope::Entity("c1".into())).unwrap();
    assert_eq!(text_of(&state, "c1"), TOMBSTONE);
    assert_eq!(text_of(&state, "u1"), "call Ada at 555-0199");
    let (_, state) = redact(RedactionScope::All).unwrap();
    for id in ["u1", "c1", "r1", "a1"] {
        assert_eq!(text_of(&state, id), TOMBSTONE, "{id}");
    }
    assert!(!everything(&state).contains("555"));
}

#[test]
fn what_the_log_does_not_hold_is_refused() {
    let refused = |scope| redact(scope).map(drop).unwrap_err();
    let past = RedactionScope::Ordinals { first: 3, last: 99 };
    assert_eq!(
        refused(past),
        RedactionError::PastEnd {
            first: 3,
            last: 99,
            end: 16
        }
    );
    let backwards = RedactionScope::Ordinals { first: 5, last: 2 };
    assert!(matches!(
        refused(backwards),
        RedactionError::Backwards { .. }
    ));
    let zero = RedactionScope::Ordinals { first: 0, last: 2 };
    assert!(matches!(refused(zero), RedactionError::BeforeStart { .. }));
    let missing = RedactionScope::Entity("nope".into());
    assert_eq!(
        refused(missing),
        RedactionError::NoSuchEntity("nope".into())
    );
    // The log ends before the call is decided: it waits.
    let mut waiting = Survey::new(RedactionScope::Entity("c1".into()));
    for entry in &log()[..8] {
        waiting.look(entry);
    }
    assert_eq!(
        waiting.finish().map(drop).unwrap_err(),
        RedactionError::Waiting("c1".into())
    );
    let nothing = |_: &str| false;
    let mut survey = Survey::new(RedactionScope::Matching(Box::new(nothing)));
    for entry in &log() {
        survey.look(entry);
    }
    assert_eq!(survey.finish().unwrap().covered(), 0);
}
