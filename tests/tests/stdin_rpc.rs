//! The stdin RPC protocol, driven through the real binary with scripted stdin and timing.

use std::{path::Path, process::Stdio};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{FrameLine, RpcClient, assert_request_scoped, write_file};

/// A command whose scripted model plays `script`, served over stdin.
fn serve(dir: &Path, script: &str) -> RpcClient {
    let script = write_file(dir, "script.yaml", script);
    let command = write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: unused\nprovider:\n  script: {script}\n"
        ),
    );
    RpcClient::start(&["run-command", &command, "--rpc", "--stdin-rpc"])
}

/// A turn that streams "first ", pauses `ms`, then streams "second".
fn slow_turn(ms: u64) -> String {
    format!("  - - text: \"first \"\n    - sleep_ms: {ms}\n    - text: \"second\"\n")
}

fn is_patch_of(rid: &str) -> impl Fn(&FrameLine) -> bool + '_ {
    move |f| f.line.request_id == rid && f.ui_name() == Some("ChatTextPatch")
}

fn error_of(frames: &[FrameLine], rid: &str) -> Option<(String, String, bool)> {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid)
        .find_map(|f| match f.frame() {
            Frame::Error(e) => Some((e.code.clone(), e.message.clone(), e.terminal)),
            _ => None,
        })
}

fn final_text(frames: &[FrameLine], rid: &str) -> String {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid && f.ui_name() == Some("ChatTextSegmentFinished"))
        .map(|f| {
            f.json["uiEvent"]["payload"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_three_turn_conversation_gives_each_turn_the_whole_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(
        dir.path(),
        "turns:\n  - - text: \"Hi there.\"\n  - - text: \"Sure.\"\n  - - echo_context\n",
    );
    let hello = client.wait_for("hello", |f| matches!(f.frame(), Frame::Hello(_)));
    match hello.frame() {
        Frame::Hello(h) => {
            for capability in [
                "stdin-rpc",
                "single-session",
                "multi-turn",
                "cancel",
                "client-tools",
                "steer",
                "follow-up",
                "compact",
            ] {
                assert!(
                    h.capabilities.iter().any(|c| c == capability),
                    "{capability}"
                );
            }
        }
        _ => unreachable!(),
    }
    client.send(r#"{"version":1,"sessionId":"talk","requestId":"t1","submit":{"prompt":"hello"}}"#);
    assert_eq!(client.done_of("t1"), "ok");
    client.send(r#"{"requestId":"t2","submit":{"prompt":"again"}}"#);
    assert_eq!(client.done_of("t2"), "ok");
    client.send(r#"{"sessionId":"talk","requestId":"t3","submit":{"prompt":"what did we say?"}}"#);
    assert_eq!(client.done_of("t3"), "ok");
    client.send(r#"{"requestId":"all","snapshot":{}}"#);
    assert_eq!(client.done_of("all"), "ok");
    client.send(r#"{"requestId":"bye","shutdown":{}}"#);
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    // A submit's closing snapshot holds what that submit created or changed; a snapshot request
    // holds the whole timeline.
    let entity_texts = |rid: &str| -> Vec<String> {
        let snapshot = frames
            .iter()
            .rev()
            .find(|f| f.line.request_id == rid && f.json.get("snapshot").is_some())
            .unwrap();
        snapshot.json["snapshot"]["entities"]
            .as_array()
            .map(|entities| {
                entities
                    .iter()
                    .map(|e| e["payload"]["text"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(entity_texts("t2"), ["again", "Sure."]);
    assert_eq!(entity_texts("all").len(), 6);
    assert_eq!(
        &entity_texts("all")[..4],
        ["hello", "Hi there.", "again", "Sure."]
    );
    assert_eq!(
        final_text(&frames, "t3"),
        "system: Be brief.\nuser: hello\nassistant: Hi there.\nuser: again\nassistant: Sure.\nuser: what did we say?"
    );
    // The bound session id stamps every frame after the first request.
    assert!(frames[1..].iter().all(|f| f.line.session_id == "talk"));
    assert_eq!(frames.last().unwrap().done_status(), Some("shutdown"));
    // Ordinals keep counting across turns: the log is one log.
    let ordinals: Vec<u64> = frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::UiEvent(ui) => Some(ui.ordinal),
            _ => None,
        })
        .collect();
    assert!(ordinals.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(ordinals.first(), Some(&1));
}

#[test]
fn a_submit_while_one_runs_is_busy_and_the_running_one_is_not_disturbed() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(300)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"one"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    client.send(r#"{"requestId":"r2","submit":{"prompt":"two"}}"#);
    assert_eq!(client.done_of("r2"), "failed");
    assert_eq!(client.done_of("r1"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    assert_eq!(error_of(&frames, "r2").unwrap().0, "session_busy");
    assert_eq!(final_text(&frames, "r1"), "first second");
    assert_eq!(
        frames.iter().filter(|f| f.line.request_id == "r2").count(),
        2,
        "busy: error and done only"
    );
}

#[test]
fn another_session_id_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), "turns: []\n");
    client.send(r#"{"sessionId":"mine","requestId":"s1","snapshot":{}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    client.send(r#"{"sessionId":"yours","requestId":"s2","snapshot":{}}"#);
    assert_eq!(client.done_of("s2"), "failed");
    client.send(r#"{"requestId":"s3","snapshot":{}}"#);
    assert_eq!(client.done_of("s3"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let (code, message, terminal) = error_of(&frames, "s2").unwrap();
    assert_eq!((code.as_str(), terminal), ("session_mismatch", false));
    assert!(
        message.contains("mine") && message.contains("yours"),
        "{message}"
    );
}

#[test]
fn cancel_while_streaming_stops_the_submit_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(30_000)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    client.send(r#"{"requestId":"c1","cancel":{}}"#);
    assert_eq!(client.done_of("c1"), "ok");
    assert_eq!(client.done_of("r1"), "stopped");
    // Nothing is running now: another cancel has nothing to act on.
    client.send(r#"{"requestId":"c2","cancel":{}}"#);
    assert_eq!(client.done_of("c2"), "failed");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    assert_eq!(error_of(&frames, "c2").unwrap().0, "no_active_request");
    // The cancel's own frames are only its done; the stop belongs to the submit.
    assert_eq!(
        frames.iter().filter(|f| f.line.request_id == "c1").count(),
        1
    );
    let r1: Vec<&str> = frames
        .iter()
        .filter(|f| f.line.request_id == "r1")
        .filter_map(FrameLine::ui_name)
        .collect();
    assert_eq!(r1.last(), Some(&"ChatRunStopped"));
    assert_eq!(final_text(&frames, "r1"), "first ");
}

#[test]
fn a_snapshot_while_streaming_answers_at_once_and_a_cancel_after_it_is_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(30_000)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    client.send(r#"{"requestId":"snap","snapshot":{}}"#);
    client.send(r#"{"requestId":"stop","cancel":{}}"#);
    assert_eq!(client.done_of("snap"), "ok");
    assert_eq!(client.done_of("r1"), "stopped");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let snapshot = frames
        .iter()
        .find(|f| f.line.request_id == "snap" && f.json.get("snapshot").is_some())
        .unwrap();
    let entities = snapshot.json["snapshot"]["entities"].as_array().unwrap();
    let assistant = entities
        .iter()
        .find(|e| e["payload"]["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["payload"]["text"], "first ");
    assert_eq!(
        assistant["payload"]["streaming"], true,
        "taken while the reply was streaming"
    );
    let position = |rid: &str| {
        frames
            .iter()
            .position(|f| f.line.request_id == rid && f.done_status().is_some())
            .unwrap()
    };
    assert!(position("snap") < position("stop") && position("stop") < position("r1"));
}

#[test]
fn shutdown_while_streaming_waits_for_the_submit() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(300)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    client.send(r#"{"requestId":"down","shutdown":{}}"#);
    client.send(r#"{"requestId":"late","snapshot":{}}"#);
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    assert_eq!(final_text(&frames, "r1"), "first second");
    let last = frames.last().unwrap();
    assert_eq!(
        (last.line.request_id.as_str(), last.done_status()),
        ("down", Some("shutdown"))
    );
    assert!(
        frames.iter().all(|f| f.line.request_id != "late"),
        "nothing is read after shutdown"
    );
}

#[test]
fn end_of_input_while_streaming_finishes_the_submit() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(300)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    client.close_stdin();
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    assert_eq!(final_text(&frames, "r1"), "first second");
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
}

#[test]
fn a_request_without_an_id_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), "turns: []\n");
    client.send(r#"{"snapshot":{}}"#);
    let done = client.wait_for("a done", |f| f.done_status().is_some());
    assert!(!done.line.request_id.is_empty());
    let (_, frames, _) = client.finish();
    assert_request_scoped(&frames);
}

#[test]
fn a_signal_stops_the_running_submit_and_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = serve(dir.path(), &format!("turns:\n{}", slow_turn(30_000)));
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("r1's first patch", is_patch_of("r1"));
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &client.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(client.done_of("r1"), "stopped");
    let (status, frames, _) = client.finish();
    assert_eq!(status.code(), Some(143));
    assert_request_scoped(&frames);
}

#[test]
fn an_unreadable_stdin_is_a_terminal_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(dir.path(), "script.yaml", "turns: []\n");
    let command = write_file(
        dir.path(),
        "c.yaml",
        &format!("name: t\ndescription: t\nprompt: p\nprovider:\n  script: {script}\n"),
    );
    // A directory opens but cannot be read.
    let stdin = Stdio::from(std::fs::File::open(dir.path()).unwrap());
    let client =
        RpcClient::start_with_stdin(&["run-command", &command, "--rpc", "--stdin-rpc"], stdin);
    let (status, frames, stderr) = client.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) => Some(e.clone()),
        _ => None,
    });
    let error = error.expect("an error frame");
    assert_eq!(
        (error.code.as_str(), error.terminal),
        ("stdin_read_failed", true)
    );
}

#[test]
fn stdin_rpc_needs_frames_on_stdout() {
    let output = reel_tests::run(&["run-command", "examples/echo.yaml", "--stdin-rpc"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--rpc"));
    assert!(output.stdout.is_empty());
}
