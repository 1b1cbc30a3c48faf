//! Session ids: the one given on the command line is fixed, empty or unusable ids are refused
//! (and documented), and a resumed stdin session opens with its whole timeline.

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{RpcClient, run};

#[test]
fn a_session_id_given_on_the_command_line_is_never_renamed_by_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut client = RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "server",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    client.send(r#"{"requestId":"a","sessionId":"client","submit":{"prompt":"hi"}}"#);
    assert_eq!(client.done_of("a"), "failed");
    client.send(r#"{"requestId":"b","sessionId":"server","submit":{"prompt":"hi"}}"#);
    assert_eq!(client.done_of("b"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    let mismatch = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) if f.line.request_id == "a" => Some(e.code.clone()),
        _ => None,
    });
    assert_eq!(mismatch.as_deref(), Some("session_mismatch"));
    assert!(
        frames.iter().all(|f| f.line.session_id == "server"),
        "every frame says server"
    );
    let listed = run(&["sessions", "--json", "--timeline-db", db.to_str().unwrap()]);
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions[0]["session_id"], "server");
    assert_eq!(sessions.as_array().unwrap().len(), 1);
}

#[test]
fn empty_and_unusable_session_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    for id in ["", "   ", "a b", "-x", "new\nline", &"x".repeat(129)] {
        let flag = format!("--session-id={id}");
        let output = run(&[
            "run-command",
            "examples/echo.yaml",
            &flag,
            "--timeline-db",
            db,
        ]);
        assert_eq!(output.status.code(), Some(1), "{id:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("session id"), "{id:?}: {stderr}");
    }
    assert!(!std::path::Path::new(db).exists(), "nothing was stored");
    // Over stdin RPC, a request's session id is checked the same way (and not echoed whole).
    let mut client =
        RpcClient::start(&["run-command", "examples/echo.yaml", "--rpc", "--stdin-rpc"]);
    let long = "s".repeat(10_000);
    client.send(&format!(
        r#"{{"requestId":"r","sessionId":"{long}","snapshot":{{}}}}"#
    ));
    assert_eq!(client.done_of("r"), "failed");
    let (_, frames, _) = client.finish();
    let error = frames
        .iter()
        .find_map(|f| match f.frame() {
            Frame::Error(e) => Some(e.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(error.code, "invalid_session_id");
    assert!(error.message.len() < 300);
    assert!(
        frames.iter().all(|f| f.text.len() < 2_000),
        "the long id is not stamped on frames"
    );
}

#[test]
fn a_resumed_stdin_session_opens_with_its_whole_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let first = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--session-id",
        "w",
        "--timeline-db",
        db,
    ]);
    assert!(first.status.success());
    let mut client = RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "w",
        "--resume",
        "--timeline-db",
        db,
    ]);
    let snapshot = client.wait_for("the first snapshot", |f| f.json.get("snapshot").is_some());
    assert_eq!(snapshot.line.request_id, "", "before any request");
    let entities = snapshot.json["snapshot"]["entities"]
        .as_array()
        .unwrap()
        .len();
    assert!(
        entities >= 4,
        "the first run's messages and tool call: {entities}"
    );
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert!(matches!(frames[0].frame(), Frame::Hello(_)));
    assert!(
        frames[1].json.get("snapshot").is_some(),
        "hello, then the snapshot"
    );
}
