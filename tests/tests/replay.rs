//! Replay equals the live run, for the real binary: for random scripts, the backend events
//! (the log) that `reel` streamed replay to exactly the ui events and the final snapshot it
//! streamed live.

use proptest::prelude::*;
use reel_engine::{LogEntry, Projection, TimelineProjection};
use reel_proto::rpc::{SnapshotFrame, UiEventFrame, rpc_line::Frame};
use reel_tests::{assert_stream_shape, parse_frames, run, scripted_command};

/// One script step as YAML (JSON strings are valid YAML double-quoted scalars).
fn step() -> impl Strategy<Value = String> {
    let text = "[a-zé😀 ,.]{0,8}".prop_map(|t| serde_json::to_string(&t).unwrap());
    prop_oneof![
        4 => text.clone().prop_map(|t| format!("{{text: {t}}}")),
        2 => text.clone().prop_map(|t| format!("{{reasoning: {t}}}")),
        1 => (0u8..3).prop_map(|ms| format!("{{sleep_ms: {ms}}}")),
        1 => (1u32..99, 1u32..99).prop_map(|(i, o)| format!("{{usage: {{input_tokens: {i}, output_tokens: {o}}}}}")),
        1 => ("[a-z]{1,5}", text).prop_map(|(id, q)| format!("{{tool_call: {{id: {id}, name: lookup, arguments: {{q: {q}}}}}}}")),
    ]
}

fn script() -> impl Strategy<Value = (String, bool)> {
    (
        prop::collection::vec(step(), 0..25),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(steps, fails)| {
            let mut yaml = String::from("turns:\n  -\n");
            for step in steps {
                yaml.push_str(&format!("    - {step}\n"));
            }
            if fails {
                yaml.push_str("    - {error: \"scripted failure\"}\n");
            } else {
                yaml.push_str("    - {text: \"\"}\n");
            }
            // The model call after a tool round (the tool `lookup` is not declared: each call
            // gets an error result, and the model is asked again).
            yaml.push_str("  -\n    - {text: \"after the tools\"}\n");
            (yaml, fails)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_binary_s_log_replays_to_its_live_stream((yaml, fails) in script()) {
        let dir = tempfile::tempdir().unwrap();
        let command = scripted_command(dir.path(), &yaml);
        let output = run(&["run-command", &command, "--rpc", "--include-backend-events"]);
        prop_assert_eq!(output.status.success(), !fails, "{}", String::from_utf8_lossy(&output.stderr));
        let frames = parse_frames(&output.stdout);
        assert_stream_shape(&frames);

        let mut log = Vec::new();
        let mut live_ui: Vec<UiEventFrame> = Vec::new();
        let mut live_snapshot: Option<SnapshotFrame> = None;
        for frame in &frames {
            match frame.frame() {
                Frame::BackendEvent(b) => log.push(LogEntry {
                    ordinal: b.ordinal,
                    recorded_at_ms: 0,
                    event: b.payload.clone().unwrap(),
                }),
                Frame::UiEvent(ui) => live_ui.push(ui.clone()),
                Frame::Snapshot(s) => live_snapshot = Some(s.clone()),
                _ => {}
            }
        }
        let mut replay = TimelineProjection::new();
        let replay_ui: Vec<UiEventFrame> = log.iter().flat_map(|e| replay.apply(e)).collect();
        prop_assert_eq!(replay_ui, live_ui);
        prop_assert_eq!(Some(replay.snapshot()), live_snapshot);
    }
}
