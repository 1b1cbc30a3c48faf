//! A run that waits for a person outlives its process. The session's store keeps the question
//! (`ChatToolApprovalRequested` without a decision); the process ends (`kill -9`, SIGTERM, the
//! end of input) and the run is not interrupted: the next process to open the session shows
//! the pending call in its snapshot, refuses a new submit, and an `approve` continues the same
//! run (same run id) under the approve's request id, the tool running exactly once. (The same
//! in `reel serve`: `served_approvals.rs`.)

use std::path::{Path, PathBuf};

use reel_tests::{
    FrameLine, RpcClient,
    approval_fixture::{runs, send_command, stored_rpc},
};
use serde_json::Value;

fn command(dir: &Path, extra: &str) -> (String, PathBuf) {
    send_command(dir, extra)
}

fn start(cmd: &str, db: &Path, resume: bool) -> RpcClient {
    stored_rpc(cmd, db, "mail", resume)
}

fn ui<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a FrameLine> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .collect()
}

fn payload(frame: &FrameLine) -> &Value {
    &frame.json["uiEvent"]["payload"]
}

/// Submits the prompt and waits for the question; the run's id.
fn submit_and_wait_for_the_question(client: &mut RpcClient, count: &Path) -> String {
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    let started = client.wait_for("the run's start", |f| f.ui_name() == Some("ChatRunStarted"));
    let run_id = payload(&started)["correlation"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    client.wait_for("the approval request", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    assert_eq!(runs(count), 0, "nothing runs before the decision");
    run_id
}

/// Submits, waits for the question and closes the input: the submit is done `waiting`, the
/// process exits 0, and the run waits in the store.
fn leave_waiting(cmd: &str, db: &Path, count: &Path) {
    let mut client = start(cmd, db, false);
    submit_and_wait_for_the_question(&mut client, count);
    client.close_stdin();
    assert_eq!(client.done_of("s1"), "waiting");
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
}

/// The ChatToolCall entity of the first snapshot a resumed process writes.
fn resumed_call(client: &mut RpcClient) -> Value {
    let snapshot = client.wait_for("the resumed snapshot", |f| f.json.get("snapshot").is_some());
    let entities = snapshot.json["snapshot"]["entities"].as_array().unwrap();
    entities
        .iter()
        .find(|e| e["kind"] == "ChatToolCall")
        .expect("the pending call is in the snapshot")["payload"]
        .clone()
}

/// What a resumed process does with a waiting run: shows the call, refuses a submit, and
/// continues the same run when allowed; the tool runs once and the log verifies.
fn resume_and_allow(cmd: &str, db: &Path, count: &Path, run_id: &str) {
    let mut client = start(cmd, db, true);
    let call = resumed_call(&mut client);
    assert_eq!(call["status"], "awaiting_approval", "{call}");
    assert_eq!(call["toolName"], "send");
    assert_eq!(call["input"], r#"{"to":"team"}"#);
    let asked: u64 = call["approvalRequestedAtMs"]
        .as_str()
        .expect("when it was asked")
        .parse()
        .unwrap();
    assert!(asked > 1_700_000_000_000, "{call}");

    client.send(r#"{"requestId":"s2","submit":{"prompt":"Something else."}}"#);
    assert_eq!(client.done_of("s2"), "failed");
    let busy = client.frames_of("s2")[0].json["error"]["code"].clone();
    assert_eq!(busy, "session_busy");
    assert_eq!(runs(count), 0);

    client.send(r#"{"requestId":"a1","approve":{"callId":"c1","decision":"allow_once"}}"#);
    // The approve carries the rest of the run: its done is the run's end.
    assert_eq!(client.done_of("a1"), "ok");
    assert_eq!(runs(count), 1, "allowed once, run once");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    let finished = ui(&frames, "ChatRunFinished");
    assert_eq!(finished.len(), 1, "the run ends once");
    assert_eq!(finished[0].line.request_id, "a1");
    assert_eq!(payload(finished[0])["correlation"]["runId"], run_id);
    assert!(
        ui(&frames, "ChatRunStarted").is_empty(),
        "no new run is started"
    );
    let result = ui(&frames, "ChatToolResultReady");
    assert_eq!(payload(result[0])["result"], "sent\n");
    assert_eq!(runs(count), 1);

    let verified = reel_tests::run(&["verify", "mail", "--timeline-db", db.to_str().unwrap()]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn a_waiting_run_outlives_kill_9_and_goes_on_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let mut client = start(&cmd, &db, false);
    let run_id = submit_and_wait_for_the_question(&mut client, &count);
    // The question is stored before the frame that says it is out (done waits for nothing
    // here): give the store its moment, as a person reading the question would.
    client.send(r#"{"requestId":"p1","snapshot":{}}"#);
    assert_eq!(client.done_of("p1"), "ok");
    let killed = std::process::Command::new("kill")
        .args(["-9", &client.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(client);
    resume_and_allow(&cmd, &db, &count, &run_id);
}

#[test]
fn a_waiting_run_outlives_sigterm_sigint_and_sighup_and_its_submit_is_done_waiting() {
    for (signal, status) in [("-TERM", 143), ("-INT", 130), ("-HUP", 129)] {
        let dir = tempfile::tempdir().unwrap();
        let (cmd, count) = command(dir.path(), "");
        let db = dir.path().join("t.db");
        let mut client = start(&cmd, &db, false);
        let run_id = submit_and_wait_for_the_question(&mut client, &count);
        let sent = std::process::Command::new("kill")
            .args([signal, &client.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        assert_eq!(client.done_of("s1"), "waiting", "{signal}");
        let (exit, frames, _) = client.finish();
        assert_eq!(exit.code(), Some(status), "{signal}");
        assert!(
            ui(&frames, "ChatRunFailed").is_empty() && ui(&frames, "ChatRunStopped").is_empty(),
            "{signal} does not end a waiting run"
        );
        assert!(ui(&frames, "ChatToolApprovalDecided").is_empty());
        resume_and_allow(&cmd, &db, &count, &run_id);
    }
}

/// The end of input with a store: the run waits in it (done `waiting`, exit 0); a reject in
/// the next process reaches the model with the person's words.
#[test]
fn at_the_end_of_input_a_stored_run_waits_and_a_reject_goes_on_later() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    leave_waiting(&cmd, &db, &count);

    let mut client = start(&cmd, &db, true);
    assert_eq!(resumed_call(&mut client)["status"], "awaiting_approval");
    client.send(
        r#"{"requestId":"a1","approve":{"callId":"c1","decision":"reject_once","message":"not today"}}"#,
    );
    assert_eq!(client.done_of("a1"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(runs(&count), 0, "a rejected call never runs");
    let text: String = ui(&frames, "ChatTextSegmentFinished")
        .iter()
        .map(|f| payload(f)["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        text.contains("not run: the person declined this call of send: not today"),
        "{text}"
    );
}

/// An `approval_timeout` that passed while no process held the session is decided `expired`
/// when the session is opened again; the model reads that nobody decided.
#[test]
fn an_approval_timeout_that_passed_meanwhile_expires_when_the_session_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "    approval_timeout: 1s\n");
    let db = dir.path().join("t.db");
    leave_waiting(&cmd, &db, &count);
    std::thread::sleep(std::time::Duration::from_millis(1200));

    let mut client = start(&cmd, &db, true);
    let finished = client.wait_for("the run's end", |f| f.ui_name() == Some("ChatRunFinished"));
    assert_eq!(finished.line.request_id, "", "no request continued it");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(runs(&count), 0, "an expired call never runs");
    let decided = ui(&frames, "ChatToolApprovalDecided");
    assert_eq!(payload(decided[0])["decision"], "expired");
}

/// `run-command` without a terminal or stdin RPC: the run waits in the store and the process
/// exits 3; `reel approve FILE SESSION CALL_ID --decision ...` (`run-command --resume --approve
/// CALL_ID`) continues it.
#[test]
fn a_one_shot_run_without_a_terminal_exits_3_and_approve_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let base = [
        "run-command",
        &cmd,
        "--rpc",
        "--timeline-db",
        db,
        "--session-id",
        "mail",
    ];
    let output = reel_tests::run(&base);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("c1 (send {\"to\":\"team\"})"), "{stderr}");
    assert!(
        stderr.contains(&format!("reel approve {cmd} mail CALL_ID --decision")),
        "{stderr}"
    );
    let frames = reel_tests::parse_frames(&output.stdout);
    assert_eq!(frames.last().unwrap().done_status(), Some("waiting"));
    assert_eq!(runs(&count), 0);

    // A new prompt is refused while the run waits, and so is a decision on another call.
    let resumed = [&base[..], &["--resume"]].concat();
    let output = reel_tests::run(&resumed);
    assert_eq!(output.status.code(), Some(3));
    let frames = reel_tests::parse_frames(&output.stdout);
    assert!(
        frames
            .iter()
            .any(|f| f.json["error"]["code"] == "session_busy")
    );
    let wrong = [
        &resumed[..],
        &["--approve", "c9", "--decision", "allow_once"],
    ]
    .concat();
    let output = reel_tests::run(&wrong);
    assert_eq!(output.status.code(), Some(1));
    let frames = reel_tests::parse_frames(&output.stdout);
    assert!(
        frames
            .iter()
            .any(|f| f.json["error"]["code"] == "unknown_tool_call")
    );
    assert_eq!(runs(&count), 0);

    // `reel approve` is the short way to say the same.
    let allow = [
        "approve",
        &cmd,
        "mail",
        "c1",
        "--decision",
        "allow_once",
        "--rpc",
        "--timeline-db",
        db,
    ];
    let output = reel_tests::run(&allow);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(runs(&count), 1, "allowed once, run once");
    let frames = reel_tests::parse_frames(&output.stdout);
    assert_eq!(ui(&frames, "ChatRunFinished").len(), 1);
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));

    // Nothing waits any more.
    let output = reel_tests::run(&allow);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(runs(&count), 1);
}
