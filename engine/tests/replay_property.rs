//! Replaying a log gives exactly the snapshots and ui events the live run gave.
//!
//! Two properties:
//! * for arbitrary event sequences (including orders no session would write), folding event by
//!   event and replaying any prefix from scratch agree at every ordinal;
//! * for random scripts played through a real [`Session`] (ids, batching, fan-out and all), the
//!   log the sinks received, encoded to protobuf JSON and decoded again, replays to the ui events
//!   and the final snapshot the sinks saw live.

use std::sync::Arc;

use proptest::prelude::*;
use reel_engine::{
    Fanout, LogEntry, MemorySink, ModelContextProjection, ModelSettings, OutputKind, Projection,
    RunRequest, Session, TimelineProjection,
};
use reel_proto::{
    Any,
    chat::*,
    json,
    rpc::{BackendEventFrame, SnapshotFrame, UiEventFrame},
};
use reel_providers::{Script, ScriptToolCall, ScriptUsage, ScriptedProvider, Step};
use tokio_util::sync::CancellationToken;

fn id() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["m1", "m2", "m3", "t1"]).prop_map(String::from)
}

fn text() -> impl Strategy<Value = String> {
    "[a-zé\u{2028}\u{1F600} ]{0,6}"
}

fn event() -> impl Strategy<Value = Any> {
    prop_oneof![
        (id(), text()).prop_map(|(message_id, text)| ChatUserMessageAccepted {
            message_id,
            role: "user".into(),
            text,
            ..Default::default()
        }
        .into()),
        Just(ChatRunStarted::default().into()),
        Just(ChatProviderCallStarted::default().into()),
        id().prop_map(|message_id| ChatTextSegmentStarted {
            message_id,
            role: "assistant".into(),
            ..Default::default()
        }
        .into()),
        id().prop_map(|message_id| ChatReasoningSegmentStarted {
            message_id,
            role: "thinking".into(),
            ..Default::default()
        }
        .into()),
        (id(), text()).prop_map(|(message_id, text)| ChatTextDelta { message_id, text }.into()),
        (id(), text())
            .prop_map(|(message_id, text)| ChatReasoningDelta { message_id, text }.into()),
        (id(), id()).prop_map(|(message_id, tool_call_id)| ChatToolCallStarted {
            message_id,
            tool_call_id,
            tool_name: "f".into(),
            ..Default::default()
        }
        .into()),
        (id(), text()).prop_map(|(message_id, arguments)| ChatToolArgumentsDelta {
            message_id,
            arguments
        }
        .into()),
        (id(), id(), text()).prop_map(|(message_id, tool_call_id, input)| ChatToolCallRequested {
            message_id,
            tool_call_id,
            input,
            ..Default::default()
        }
        .into()),
        id().prop_map(|message_id| ChatToolExecutionStarted {
            message_id,
            ..Default::default()
        }
        .into()),
        (id(), id(), text()).prop_map(|(message_id, tool_call_id, result)| ChatToolResultReady {
            message_id,
            tool_call_id,
            result,
            ..Default::default()
        }
        .into()),
        id().prop_map(|message_id| ChatToolCallFinished {
            message_id,
            ..Default::default()
        }
        .into()),
        Just(ChatProviderCallMetadataUpdated::default().into()),
        Just(
            ChatProviderCallFinished {
                stop_reason: "stop".into(),
                ..Default::default()
            }
            .into()
        ),
        Just(ChatRunFinished::default().into()),
        Just(ChatRunStopped::default().into()),
        id().prop_map(|message_id| ChatRunFailed {
            message_id,
            error: "x".into(),
            ..Default::default()
        }
        .into()),
    ]
}

/// The log as the sinks carried it: through canonical JSON and back.
fn through_json(entries: &[LogEntry]) -> Vec<LogEntry> {
    entries
        .iter()
        .map(|entry| {
            let text = json::to_string(&entry.backend_frame()).unwrap();
            let frame: BackendEventFrame = serde_json::from_str(&text).unwrap();
            LogEntry {
                ordinal: frame.ordinal,
                recorded_at_ms: 0,
                event: frame.payload.unwrap(),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if std::env::var_os("CI").is_some() { 256 } else { 512 }))]

    #[test]
    fn every_prefix_replays_to_the_live_snapshot(events in prop::collection::vec(event(), 0..60)) {
        let entries: Vec<LogEntry> = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| LogEntry { ordinal: i as u64 + 1, recorded_at_ms: 0, event })
            .collect();
        let mut live = TimelineProjection::new();
        let mut live_ui = Vec::new();
        // A reader that keeps only the entities folds without making ui events.
        let mut folded = TimelineProjection::new();
        let decoded = through_json(&entries);
        for (k, entry) in entries.iter().enumerate() {
            live_ui.extend(live.apply(entry));
            folded.fold(entry);
            let replayed = TimelineProjection::replay(&decoded[..=k]);
            prop_assert_eq!(replayed.snapshot(), live.snapshot());
            prop_assert_eq!(folded.snapshot(), live.snapshot());
            for entity in &live.snapshot().entities {
                prop_assert!(entity.created_ordinal <= entity.last_event_ordinal);
                prop_assert!(entity.last_event_ordinal <= entry.ordinal);
            }
        }
        let mut replay = TimelineProjection::new();
        let replay_ui: Vec<UiEventFrame> = decoded.iter().flat_map(|e| replay.apply(e)).collect();
        prop_assert_eq!(replay_ui, live_ui);
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => text().prop_map(Step::Text),
        2 => text().prop_map(Step::Reasoning),
        1 => Just(Step::SleepMs(0)),
        1 => (1u32..50, 1u32..50).prop_map(|(i, o)| Step::Usage(ScriptUsage { input_tokens: i, output_tokens: o, cached_tokens: 0 })),
        1 => ("[a-z]{1,4}", "[a-z]{0,30}").prop_map(|(id, q)| Step::ToolCall(ScriptToolCall {
            id,
            name: "lookup".into(),
            arguments: serde_json::json!({ "q": q }),
        })),
    ]
}

fn turn() -> impl Strategy<Value = Vec<Step>> {
    (
        prop::collection::vec(step(), 0..12),
        prop::option::weighted(0.2, "[a-z ]{1,10}"),
    )
        .prop_map(|(mut steps, error)| {
            if let Some(message) = error {
                steps.push(Step::Error(message));
            }
            steps
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_live_session_replays_to_what_its_sinks_saw(turns in prop::collection::vec(turn(), 1..4)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let runs = turns.len();
        let provider = ScriptedProvider::new(Script { turns, summary: None });
        let memory = MemorySink::new();
        let context = runtime.block_on(async {
            let mut fanout = Fanout::new();
            fanout.attach(Box::new(memory.clone()));
            let mut session = Session::new("s", fanout);
            let rid: Arc<str> = Arc::from("r");
            for run in 0..runs {
                let request = RunRequest {
                    request_id: Arc::clone(&rid),
                    prompt: format!("prompt {run}"),
                    system_prompt: None,
                    settings: ModelSettings::default(),
                    provider: &provider,
                    tools: &reel_engine::NO_TOOLS,
                    tool_client: false,
                    approver: None,
                    budgets: Default::default(),
                    context_policy: Default::default(),
                };
                session.run(request, &CancellationToken::new()).await;
            }
            session.emit_snapshot(&rid).await;
            let context = session.context().messages().clone();
            assert!(session.close().await.is_empty());
            context
        });
        let outputs = memory.outputs();
        let mut log = Vec::new();
        let mut live_ui = Vec::new();
        let mut live_snapshot: Option<SnapshotFrame> = None;
        for output in &outputs {
            match &output.kind {
                OutputKind::Event(committed) => {
                    log.push((*committed.entry).clone());
                    live_ui.extend(committed.ui_events.iter().cloned());
                }
                OutputKind::Snapshot(snapshot) => live_snapshot = Some((**snapshot).clone()),
                _ => {}
            }
        }
        for (i, entry) in log.iter().enumerate() {
            prop_assert_eq!(entry.ordinal, i as u64 + 1, "ordinals are gap-free and in order");
        }
        let decoded = through_json(&log);
        let mut replay = TimelineProjection::new();
        let replay_ui: Vec<UiEventFrame> = decoded.iter().flat_map(|e| replay.apply(e)).collect();
        prop_assert_eq!(replay_ui, live_ui);
        prop_assert_eq!(Some(replay.snapshot()), live_snapshot);
        let replayed_context = ModelContextProjection::replay(&decoded);
        prop_assert_eq!(replayed_context.messages(), &context);
    }
}
