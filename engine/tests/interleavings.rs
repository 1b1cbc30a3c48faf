//! For random interleavings of submit, steer, follow-up, cancel (with and without clearing the
//! queue), compact and snapshot requests against a served session whose small context window
//! makes it compact on its own too, the log replays to exactly what the session showed live:
//! the ui events, and the model context. And every request gets exactly one done, its last
//! frame.

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use reel_engine::{
    ContextPolicy, Fanout, Incoming, LogEntry, MemorySink, ModelContextProjection, ModelSettings,
    OutputKind, Projection, ServeConfig, Session, TimelineProjection, serve,
};
use reel_proto::rpc::{
    CancelRequest, CompactRequest, FollowUpRequest, RpcRequestLine, SnapshotRequest, SteerRequest,
    SubmitPromptRequest, UiEventFrame, rpc_request_line::Request,
};
use reel_providers::{Script, ScriptToolCall, ScriptedProvider, Step};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
enum Op {
    Submit(String),
    FollowUp(String),
    Steer(String),
    Cancel {
        clear_queue: bool,
    },
    Compact,
    Snapshot,
    /// Let the session work this long (virtual time) before the next request.
    Pause(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let prompt = "[a-z]{1,8}( [a-z]{1,8}){0,6}";
    prop_oneof![
        3 => prompt.prop_map(Op::Submit),
        3 => prompt.prop_map(Op::FollowUp),
        2 => prompt.prop_map(Op::Steer),
        1 => any::<bool>().prop_map(|clear_queue| Op::Cancel { clear_queue }),
        1 => Just(Op::Compact),
        1 => Just(Op::Snapshot),
        3 => (0u64..40).prop_map(Op::Pause),
    ]
}

/// Replies that take time (so requests land mid-reply) and a tool round (so steers land
/// between tool phases).
fn script() -> Script {
    let slow_text = vec![
        Step::Text("part one ".into()),
        Step::SleepMs(10),
        Step::Text("part two".into()),
    ];
    let tool_round = vec![
        Step::SleepMs(5),
        Step::ToolCall(ScriptToolCall {
            id: "call".into(),
            name: "missing".into(),
            arguments: serde_json::json!({}),
        }),
    ];
    Script {
        turns: vec![slow_text, tool_round, vec![Step::EchoContext]],
        summary: None,
    }
}

fn request(n: usize, op: &Op) -> Option<RpcRequestLine> {
    let request = match op.clone() {
        Op::Submit(prompt) => Request::Submit(SubmitPromptRequest { prompt }),
        Op::FollowUp(prompt) => Request::FollowUp(FollowUpRequest { prompt }),
        Op::Steer(prompt) => Request::Steer(SteerRequest { prompt }),
        Op::Cancel { clear_queue } => Request::Cancel(CancelRequest { clear_queue }),
        Op::Compact => Request::Compact(CompactRequest::default()),
        Op::Snapshot => Request::Snapshot(SnapshotRequest {}),
        Op::Pause(_) => return None,
    };
    Some(RpcRequestLine {
        request_id: format!("q{n}"),
        request: Some(request),
        ..Default::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn live_equals_replay_for_any_interleaving(ops in prop::collection::vec(op(), 1..24)) {
        check(&ops)?;
    }
}

/// A conversation that does each thing once: the property's cases are random, this one is
/// known to steer between tool phases, queue follow-ups and compact.
#[test]
fn a_known_interleaving_steers_queues_and_compacts() {
    let prompt = |text: &str| text.to_owned();
    let ops = [
        Op::Submit(prompt("tell me about rivers and lakes")),
        Op::FollowUp(prompt("and about the sea")),
        Op::Pause(12),
        Op::Steer(prompt("mention fish")),
        Op::FollowUp(prompt("and mountains please")),
        Op::Pause(200),
        Op::Submit(prompt("one more question about deserts")),
        Op::Pause(200),
        Op::Compact,
        Op::Pause(50),
    ];
    let names = check(&ops).unwrap();
    for name in [
        "ChatPromptQueued",
        "ChatPromptDelivered",
        "ChatContextCompacted",
        "ChatToolResultReady",
    ] {
        assert!(names.iter().any(|n| n == name), "no {name} in {names:?}");
    }
}

/// Serves `ops` and checks the session against its replay; returns the ui event names.
fn check(ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    let ops = ops.to_vec();
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let provider = ScriptedProvider::new(script());
        let memory = MemorySink::new();
        let (context, sent) = runtime.block_on(async {
            let mut fanout = Fanout::new();
            fanout.attach(Box::new(memory.clone()));
            let session = Session::new("s", fanout);
            let (requests, incoming) = mpsc::channel(64);
            let config = ServeConfig {
                id_fixed: false,
                provider: &provider,
                system_prompt: Some("Be brief.".into()),
                settings: ModelSettings::default(),
                tools: &reel_engine::NO_TOOLS,
                approver: None,
                budgets: Default::default(),
                context_policy: ContextPolicy {
                    window_tokens: Some(400),
                    compact_at: 0.3,
                    keep_recent_turns: 1,
                    instructions: None,
                },
                idle: Default::default(),
            };
            let feeder = async move {
                let mut sent = Vec::new();
                for (n, op) in ops.iter().enumerate() {
                    match request(n, op) {
                        Some(line) => {
                            sent.push(line.request_id.clone());
                            requests
                                .send(Incoming::Request(Box::new(line)))
                                .await
                                .unwrap();
                            tokio::task::yield_now().await;
                        }
                        None => {
                            if let Op::Pause(ms) = op {
                                tokio::time::sleep(Duration::from_millis(*ms)).await;
                            }
                        }
                    }
                }
                sent
            };
            let served = serve(session, config, incoming, CancellationToken::new());
            let ((session, _end), sent) = tokio::join!(served, feeder);
            let context = session.context().messages().clone();
            assert!(session.close().await.is_empty());
            (context, sent)
        });
        let outputs = memory.outputs();
        let mut log: Vec<LogEntry> = Vec::new();
        let mut live_ui: Vec<UiEventFrame> = Vec::new();
        let mut dones: HashMap<String, usize> = HashMap::new();
        let mut last_frame: HashMap<String, bool> = HashMap::new();
        for output in &outputs {
            let rid = output.request_id.to_string();
            match &output.kind {
                OutputKind::Event(committed) => {
                    log.push((*committed.entry).clone());
                    live_ui.extend(committed.ui_events.iter().cloned());
                }
                OutputKind::Done(_) => *dones.entry(rid.clone()).or_default() += 1,
                _ => {}
            }
            last_frame.insert(rid, matches!(output.kind, OutputKind::Done(_)));
        }
        for rid in &sent {
            prop_assert_eq!(dones.get(rid).copied(), Some(1), "one done for {}", rid);
            prop_assert_eq!(
                last_frame.get(rid).copied(),
                Some(true),
                "done is {}'s last frame",
                rid
            );
        }
        for (i, entry) in log.iter().enumerate() {
            prop_assert_eq!(entry.ordinal, i as u64 + 1, "gap-free");
        }
        let mut timeline = TimelineProjection::new();
        let replay_ui: Vec<UiEventFrame> = log.iter().flat_map(|e| timeline.apply(e)).collect();
        prop_assert_eq!(&replay_ui, &live_ui);
        let replayed = ModelContextProjection::replay(&log);
        prop_assert_eq!(replayed.messages(), &context);
        prop_assert!(
            timeline.queued_prompts().is_empty(),
            "the queue ran or was dropped"
        );
        Ok(live_ui.into_iter().map(|ui| ui.name).collect())
    }
}
