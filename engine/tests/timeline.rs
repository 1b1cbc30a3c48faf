//! Given a log, when it is projected, then the timeline and ui events are these.

use reel_engine::{ContextRole, LogEntry, ModelContextProjection, Projection, TimelineProjection};
use reel_proto::{
    Any,
    chat::{
        ChatProviderCallFinished, ChatProviderCallStarted, ChatReasoningDelta,
        ChatReasoningSegmentStarted, ChatRunFailed, ChatRunStopped, ChatStreamPatchMode,
        ChatTextDelta, ChatTextSegmentStarted, ChatToolArgumentsDelta, ChatToolCallFinished,
        ChatToolCallRequested, ChatToolCallStarted, ChatToolExecutionStarted, ChatToolResultReady,
        ChatUserMessageAccepted,
    },
};

fn log(events: Vec<Any>) -> Vec<LogEntry> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| LogEntry {
            ordinal: i as u64 + 1,
            recorded_at_ms: 0,
            event,
        })
        .collect()
}

fn user(text: &str) -> Any {
    ChatUserMessageAccepted {
        message_id: format!("u-{text}"),
        role: "user".into(),
        text: text.into(),
        ..Default::default()
    }
    .into()
}

fn text_start(id: &str) -> Any {
    ChatTextSegmentStarted {
        message_id: id.into(),
        role: "assistant".into(),
        ..Default::default()
    }
    .into()
}

fn text(id: &str, t: &str) -> Any {
    ChatTextDelta {
        message_id: id.into(),
        text: t.into(),
    }
    .into()
}

fn ui_names(projection: &mut TimelineProjection, entries: &[LogEntry]) -> Vec<(u64, String)> {
    entries
        .iter()
        .flat_map(|e| projection.apply(e))
        .map(|ui| (ui.ordinal, ui.name))
        .collect()
}

#[test]
fn deltas_become_append_patches_with_offsets_in_chars() {
    let entries = log(vec![
        user("hi"),
        text_start("a"),
        text("a", "héllo "),
        text("a", "wörld"),
    ]);
    let mut projection = TimelineProjection::new();
    let mut patches = Vec::new();
    for entry in &entries {
        for ui in projection.apply(entry) {
            if let Some(Any::ChatTextPatch(p)) = ui.payload {
                patches.push((p.sequence, p.offset, p.text, p.mode));
            }
        }
    }
    let append = ChatStreamPatchMode::Append as i32;
    assert_eq!(
        patches,
        vec![
            (1, 0, "héllo ".into(), append),
            (2, 6, "wörld".into(), append)
        ]
    );
    let snapshot = projection.snapshot();
    assert_eq!(snapshot.snapshot_ordinal, 4);
    let assistant = &snapshot.entities[1];
    assert_eq!(
        (assistant.created_ordinal, assistant.last_event_ordinal),
        (2, 4)
    );
    match assistant.payload.as_ref().unwrap() {
        Any::ChatMessageEntity(m) => {
            assert_eq!(m.text, "héllo wörld");
            assert!(m.streaming);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_call_that_finishes_finishes_its_segments_with_the_whole_text_once() {
    let entries = log(vec![
        ChatProviderCallStarted::default().into(),
        ChatReasoningSegmentStarted {
            message_id: "r".into(),
            role: "thinking".into(),
            ..Default::default()
        }
        .into(),
        ChatReasoningDelta {
            message_id: "r".into(),
            text: "hmm".into(),
        }
        .into(),
        text_start("a"),
        text("a", "yes"),
        ChatProviderCallFinished {
            stop_reason: "stop".into(),
            ..Default::default()
        }
        .into(),
    ]);
    let mut projection = TimelineProjection::new();
    let names = ui_names(&mut projection, &entries);
    assert_eq!(
        names,
        vec![
            (1, "ChatProviderCallStarted".into()),
            (2, "ChatReasoningSegmentStarted".into()),
            (3, "ChatReasoningPatch".into()),
            (4, "ChatReasoningSegmentFinished".into()),
            (4, "ChatTextSegmentStarted".into()),
            (5, "ChatTextPatch".into()),
            (6, "ChatTextSegmentFinished".into()),
            (6, "ChatProviderCallFinished".into()),
        ]
    );
}

#[test]
fn a_failed_run_adds_an_error_entity_and_fails_open_segments() {
    let entries = log(vec![
        user("q"),
        text_start("a"),
        text("a", "partial"),
        ChatRunFailed {
            message_id: "err".into(),
            error: "boom".into(),
            ..Default::default()
        }
        .into(),
    ]);
    let projection = TimelineProjection::replay(&entries);
    let snapshot = projection.snapshot();
    let roles: Vec<(String, String, String)> = snapshot
        .entities
        .iter()
        .map(|e| match e.payload.as_ref().unwrap() {
            Any::ChatMessageEntity(m) => (m.role.clone(), m.status.clone(), m.text.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            ("user".into(), String::new(), "q".into()),
            ("assistant".into(), "failed".into(), "partial".into()),
            ("error".into(), "failed".into(), "boom".into()),
        ]
    );
}

#[test]
fn a_stopped_run_keeps_what_streamed() {
    let entries = log(vec![
        user("q"),
        text_start("a"),
        text("a", "so far"),
        ChatRunStopped::default().into(),
    ]);
    let projection = TimelineProjection::replay(&entries);
    match projection.snapshot().entities[1].payload.as_ref().unwrap() {
        Any::ChatMessageEntity(m) => {
            assert_eq!((m.status.as_str(), m.text.as_str()), ("stopped", "so far"))
        }
        other => panic!("{other:?}"),
    }
    let context = ModelContextProjection::replay(&entries);
    assert_eq!(context.messages()[1].text, "so far");
}

#[test]
fn the_tool_lifecycle_projects_to_a_call_and_a_result() {
    let entries = log(vec![
        user("weather?"),
        ChatProviderCallStarted::default().into(),
        ChatToolCallStarted {
            message_id: "c1".into(),
            tool_call_id: "t1".into(),
            tool_name: "w".into(),
            ..Default::default()
        }
        .into(),
        ChatToolArgumentsDelta {
            message_id: "c1".into(),
            arguments: r#"{"city":"#.into(),
        }
        .into(),
        ChatToolArgumentsDelta {
            message_id: "c1".into(),
            arguments: r#""Oslo"}"#.into(),
        }
        .into(),
        ChatToolCallRequested {
            message_id: "c1".into(),
            tool_call_id: "t1".into(),
            tool_name: "w".into(),
            input: r#"{"city":"Oslo"}"#.into(),
            ..Default::default()
        }
        .into(),
        ChatProviderCallFinished {
            stop_reason: "tool_calls".into(),
            ..Default::default()
        }
        .into(),
        ChatToolExecutionStarted {
            message_id: "c1".into(),
            tool_call_id: "t1".into(),
            ..Default::default()
        }
        .into(),
        ChatToolResultReady {
            message_id: "r1".into(),
            tool_call_id: "t1".into(),
            tool_name: "w".into(),
            result: "sunny".into(),
            status: "success".into(),
            ..Default::default()
        }
        .into(),
        ChatToolCallFinished {
            message_id: "c1".into(),
            tool_call_id: "t1".into(),
            ..Default::default()
        }
        .into(),
    ]);
    let mut projection = TimelineProjection::new();
    let mut argument_patches = Vec::new();
    for entry in &entries {
        for ui in projection.apply(entry) {
            if let Some(Any::ChatToolArgumentsPatch(p)) = ui.payload {
                argument_patches.push((p.offset, p.arguments, p.tool_name));
            }
        }
    }
    assert_eq!(
        argument_patches,
        vec![
            (0, r#"{"city":"#.into(), "w".into()),
            (8, r#""Oslo"}"#.into(), "w".into())
        ]
    );
    let snapshot = projection.snapshot();
    let kinds: Vec<&str> = snapshot.entities.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["ChatMessage", "ChatToolCall", "ChatToolResult"]);
    match snapshot.entities[1].payload.as_ref().unwrap() {
        Any::ToolCallEntity(c) => {
            assert_eq!(
                (c.status.as_str(), c.input.as_str()),
                ("completed", r#"{"city":"Oslo"}"#)
            );
            assert_eq!(
                (
                    snapshot.entities[1].created_ordinal,
                    snapshot.entities[1].last_event_ordinal
                ),
                (3, 10)
            );
        }
        other => panic!("{other:?}"),
    }
    let context = ModelContextProjection::replay(&entries);
    let roles: Vec<ContextRole> = context.messages().iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![ContextRole::User, ContextRole::Assistant, ContextRole::Tool]
    );
    assert_eq!(
        context.messages()[1].tool_calls[0].arguments,
        r#"{"city":"Oslo"}"#
    );
    assert_eq!(context.messages()[2].tool_call_id, "t1");
}

#[test]
fn deltas_without_a_start_still_reach_the_timeline() {
    let entries = log(vec![text("orphan", "kept")]);
    let mut projection = TimelineProjection::new();
    let names = ui_names(&mut projection, &entries);
    assert_eq!(
        names,
        vec![
            (1, "ChatTextSegmentStarted".into()),
            (1, "ChatTextPatch".into())
        ]
    );
    match projection.snapshot().entities[0].payload.as_ref().unwrap() {
        Any::ChatMessageEntity(m) => assert_eq!(m.text, "kept"),
        other => panic!("{other:?}"),
    }
}

/// What `snapshot_since` must say: every entity changed after the ordinal, in timeline order.
fn changed_after(projection: &TimelineProjection, ordinal: u64) -> Vec<(String, u64)> {
    projection
        .snapshot()
        .entities
        .into_iter()
        .filter(|e| e.last_event_ordinal > ordinal)
        .map(|e| (e.id, e.last_event_ordinal))
        .collect()
}

fn ids(frame: reel_proto::rpc::SnapshotFrame) -> Vec<(String, u64)> {
    frame
        .entities
        .into_iter()
        .map(|e| (e.id, e.last_event_ordinal))
        .collect()
}

#[test]
fn the_entities_changed_since_an_ordinal_are_found_live_and_after_a_snapshot_is_read() {
    // Old entities change late (a segment that goes on streaming after newer ones started).
    let entries = log(vec![
        user("one"),
        text_start("a1"),
        text("a1", "x"),
        user("two"),
        text_start("a2"),
        text("a1", "y"),
        text("a2", "z"),
        user("three"),
        text("a1", "w"),
    ]);
    let mut live = TimelineProjection::new();
    for (n, entry) in entries.iter().enumerate() {
        live.apply(entry);
        for since in 0..=entry.ordinal {
            assert_eq!(
                ids(live.snapshot_since(since)),
                changed_after(&live, since),
                "after {} events, since {since}",
                n + 1
            );
        }
    }
    // A projection read back from a snapshot answers the same, before and after its next event.
    let mut read: TimelineProjection =
        serde_json::from_str(&serde_json::to_string(&live).unwrap()).unwrap();
    for since in 0..=9 {
        assert_eq!(ids(read.snapshot_since(since)), changed_after(&live, since));
    }
    let next = LogEntry {
        ordinal: 10,
        recorded_at_ms: 0,
        event: text("a2", "!"),
    };
    read.apply(&next);
    live.apply(&next);
    for since in 0..=10 {
        assert_eq!(ids(read.snapshot_since(since)), changed_after(&live, since));
    }
    assert!(!ids(read.snapshot_since(9)).is_empty());
}

#[test]
fn a_store_takes_the_settled_entities_it_materializes_and_copies_open_ones() {
    let entries = log(vec![
        user("one"),
        ChatProviderCallStarted::default().into(),
        text_start("a"),
        text("a", "long reply"),
        ChatProviderCallFinished {
            stop_reason: "stop".into(),
            ..Default::default()
        }
        .into(),
    ]);
    // While the call streams, nothing is settled: the store gets copies, memory keeps all.
    let mut open = TimelineProjection::new();
    for entry in &entries[..4] {
        open.apply(entry);
    }
    let expected = ids(open.snapshot_since(1));
    assert_eq!(ids(open.take_since(1)), expected);
    assert!(!open.is_partial());
    assert_eq!(ids(open.snapshot()), ids(open.snapshot_since(0)));

    // Once it finished, the changed entities move out, and memory holds none of them.
    let mut settled = TimelineProjection::new();
    for entry in &entries {
        settled.apply(entry);
    }
    let expected = ids(settled.snapshot_since(1));
    let taken = settled.take_since(1);
    assert_eq!(ids(taken.clone()), expected);
    let reply = taken
        .entities
        .iter()
        .find(|e| e.id == "a")
        .expect("the reply");
    assert!(matches!(&reply.payload, Some(Any::ChatMessageEntity(m)) if m.text == "long reply"));
    assert!(settled.is_partial());
    assert!(settled.snapshot().entities.is_empty());
}
