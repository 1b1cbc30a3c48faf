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

/// A debug-file capture of the weather example, as lines.
fn capture_lines(dir: &std::path::Path) -> Vec<String> {
    let capture = dir.join("capture.jsonl");
    let made = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--debug-events-jsonl",
        capture.to_str().unwrap(),
    ]);
    assert!(made.status.success());
    std::fs::read_to_string(&capture)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `reel replay` of `lines` into `db`: exit code and stderr.
fn replay(dir: &std::path::Path, lines: &[String], db: &std::path::Path) -> (Option<i32>, String) {
    let capture = dir.join("edited.jsonl");
    std::fs::write(&capture, lines.join("\n") + "\n").unwrap();
    let output = run(&[
        "replay",
        capture.to_str().unwrap(),
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn is_backend_event(line: &str) -> bool {
    line.contains("\"backendEvent\"")
}

#[test]
fn a_replay_that_cannot_start_leaves_no_session_and_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let lines = capture_lines(dir.path());
    // Drop the first backend events: the capture now starts at ordinal 3.
    let mut dropped = 0;
    let cut: Vec<String> = lines
        .into_iter()
        .filter(|line| {
            let drop = is_backend_event(line) && dropped < 2;
            dropped += usize::from(drop);
            !drop
        })
        .collect();
    let fresh = dir.path().join("fresh.db");
    let (code, stderr) = replay(dir.path(), &cut, &fresh);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("starts at ordinal 3"), "{stderr}");
    assert!(!fresh.exists(), "no database was made for it");

    // Into a database that holds other sessions: refused, and no empty session row appears.
    let db = dir.path().join("t.db");
    let other = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "other",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert!(other.status.success());
    let (code, _) = replay(dir.path(), &cut, &db);
    assert_eq!(code, Some(1));
    let listed = run(&["sessions", "--json", "--timeline-db", db.to_str().unwrap()]);
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
}

#[test]
fn a_broken_capture_is_refused_with_what_is_wrong_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let lines = capture_lines(dir.path());
    let db = dir.path().join("t.db");
    let first_event = lines.iter().position(|l| is_backend_event(l)).unwrap();

    // An event written twice.
    let mut twice = lines.clone();
    twice.insert(first_event + 1, lines[first_event].clone());
    let (code, stderr) = replay(dir.path(), &twice, &db);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("appears twice"), "{stderr}");
    assert!(!stderr.contains("gap"), "{stderr}");

    // A payload type this reel does not know.
    let mut unknown = lines.clone();
    unknown[first_event] = unknown[first_event].replace(
        "reel.chat.v1.ChatUserMessageAccepted",
        "reel.chat.v1.ChatFromTheFuture",
    );
    let (code, stderr) = replay(dir.path(), &unknown, &db);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("type this reel does not know") && stderr.contains("ChatFromTheFuture"),
        "{stderr}"
    );

    // A version out of range.
    let mut version = lines.clone();
    version[first_event] =
        version[first_event].replacen("\"version\":1", "\"version\":99999999999", 1);
    let (code, stderr) = replay(dir.path(), &version, &db);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("not a protocol version") && !stderr.contains("untagged"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing was written for a refused capture");

    // Something that is not a file of lines at all.
    let output = run(&["replay", "/dev/zero", "--timeline-db", db.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("regular file"));
}
