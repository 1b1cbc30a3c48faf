//! A run that waits for a person outlives its process. The session's store keeps the question
//! (`ChatToolApprovalRequested` without a decision); the process ends (`kill -9`, SIGTERM, the
//! end of input) and the run is not interrupted: the next process to open the session shows
//! the pending call in its snapshot, refuses a new submit, and an `approve` continues the same
//! run (same run id) under the approve's request id, the tool running exactly once. In
//! `reel serve` the store's inbox lists the waiting sessions across restarts and evictions.

use std::path::{Path, PathBuf};

use reel_tests::{FrameLine, RpcClient, served::Served, write_file};
use serde_json::Value;

/// A command whose model calls `send` (approval: ask; each run appends a line to `count`),
/// then shows the conversation it was given. `extra` goes into the tool's definition.
fn command(dir: &Path, extra: &str) -> (String, PathBuf) {
    let count = dir.join("count");
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {to: team}}\n  - - echo_context\n",
    );
    let cmd = write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\ntools:\n  - name: send\n    description: Sends a mail.\n    approval: ask\n{extra}    executor:\n      command: [sh, -c, 'echo sent >> {}; echo sent']\n",
            count.display()
        ),
    );
    (cmd, count)
}

fn runs(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// A stdin-RPC process of session `mail` kept in `db` (`resume`: the stored one).
fn start(cmd: &str, db: &Path, resume: bool) -> RpcClient {
    let db = db.to_str().unwrap();
    let mut args = vec![
        "run-command",
        cmd,
        "--rpc",
        "--stdin-rpc",
        "--timeline-db",
        db,
        "--session-id",
        "mail",
    ];
    if resume {
        args.push("--resume");
    }
    RpcClient::start(&args)
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
fn a_waiting_run_outlives_sigterm_and_its_submit_is_done_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let mut client = start(&cmd, &db, false);
    let run_id = submit_and_wait_for_the_question(&mut client, &count);
    let term = std::process::Command::new("kill")
        .args(["-TERM", &client.pid().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(client.done_of("s1"), "waiting");
    let (_, frames, _) = client.finish();
    assert!(
        ui(&frames, "ChatRunFailed").is_empty() && ui(&frames, "ChatRunStopped").is_empty(),
        "a signal does not end a waiting run"
    );
    assert!(ui(&frames, "ChatToolApprovalDecided").is_empty());
    resume_and_allow(&cmd, &db, &count, &run_id);
}

/// The end of input with a store: the run waits in it (done `waiting`, exit 0); a reject in
/// the next process reaches the model with the person's words.
#[test]
fn at_the_end_of_input_a_stored_run_waits_and_a_reject_goes_on_later() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let mut client = start(&cmd, &db, false);
    submit_and_wait_for_the_question(&mut client, &count);
    client.close_stdin();
    assert_eq!(client.done_of("s1"), "waiting");
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");

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
    let mut client = start(&cmd, &db, false);
    submit_and_wait_for_the_question(&mut client, &count);
    client.close_stdin();
    assert_eq!(client.done_of("s1"), "waiting");
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
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
/// exits 3; `--approve CALL_ID --decision ...` on the resumed session continues it.
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
    assert!(stderr.contains("--approve CALL_ID"), "{stderr}");
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

    let allow = [
        &resumed[..],
        &["--approve", "c1", "--decision", "allow_once"],
    ]
    .concat();
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

/// The inbox of a server: the ids of the sessions `GET /v1/sessions?waiting=true` lists, and
/// the first one's pending calls.
async fn inbox(served: &Served) -> (Vec<String>, Value) {
    let (status, body) = served.get("/v1/sessions?waiting=true").await;
    assert_eq!(status, 200, "{body}");
    let sessions = body["sessions"].as_array().unwrap();
    let ids = sessions
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    let pending = sessions
        .first()
        .map_or(Value::Null, |s| s["pending"].clone());
    (ids, pending)
}

/// The inbox, once it lists a session (the store commits a moment after the frames go out).
async fn inbox_once_filled(served: &Served) -> (Vec<String>, Value) {
    for _ in 0..100 {
        let (ids, pending) = inbox(served).await;
        if !ids.is_empty() {
            return (ids, pending);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the inbox stayed empty for 5 s");
}

/// `reel serve`: a run waits; the server stops (SIGTERM), the submit's stream ends with done
/// `waiting`; a new server lists the session in its inbox, an HTTP `approve` continues the
/// run, and a subscriber that comes back with its last event id sees the rest with no gap.
#[tokio::test]
async fn a_served_run_waits_across_a_restart_and_the_inbox_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let served = Served::start(&cmd, &db, &[], &[]);
    served.create("mail").await;
    // A session that waits for nobody.
    served.create("quiet").await;
    let mut events = served.events("mail", None).await;
    let submit = served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    let mut last_id = String::new();
    loop {
        let frame = events.next().await.expect("the question arrives");
        last_id.clone_from(&frame.id);
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            break;
        }
    }
    // The store commits the question a moment after subscribers see it.
    let (ids, pending) = inbox_once_filled(&served).await;
    assert_eq!(ids, ["mail"], "only the waiting session is in the inbox");
    assert_eq!(pending[0]["call_id"], "c1");
    assert_eq!(pending[0]["tool_name"], "send");
    assert_eq!(pending[0]["arguments"], r#"{"to":"team"}"#);
    assert!(pending[0]["asked_at_ms"].as_u64().unwrap() > 1_700_000_000_000);

    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let ended = events.until_done(&submit).await;
    assert_eq!(ended.last().unwrap().frame.done_status(), Some("waiting"));
    drop(served);

    let served = Served::start(&cmd, &db, &[], &[]);
    let (ids, _) = inbox(&served).await;
    assert_eq!(
        ids,
        ["mail"],
        "the inbox is the store's: it survives the restart"
    );
    let mut events = served.events("mail", Some(&last_id)).await;
    let approve = served
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    let rest = events.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1, "allowed once, run once");
    // No gap: the first event after the cursor is the next one, and they go in order.
    let ordinal = |id: &str| id.split('.').next()?.parse::<u64>().ok();
    let ordinals: Vec<u64> = rest.iter().filter_map(|f| ordinal(&f.id)).collect();
    let first = ordinal(&last_id).unwrap();
    assert_eq!(
        ordinals.first(),
        Some(&(first + 1)),
        "{ordinals:?} after {first}"
    );
    assert!(ordinals.windows(2).all(|w| w[0] <= w[1]), "{ordinals:?}");
    assert!(
        rest.iter()
            .any(|f| f.frame.ui_name() == Some("ChatRunFinished")),
        "the run ends on the new server"
    );
    let (ids, _) = inbox(&served).await;
    assert!(ids.is_empty(), "decided: the inbox is empty ({ids:?})");
}

/// A waiting session is idle like any other: it unloads after `--idle-timeout`, and a
/// decision posted later loads it and continues its run.
#[tokio::test]
async fn a_waiting_session_unloads_when_idle_and_a_later_decision_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    let served = Served::start(
        &cmd,
        &db,
        &["--idle-timeout", "200ms"],
        &[("REEL_LOG", "info,reel_engine=debug")],
    );
    served.create("mail").await;
    let mut events = served.events("mail", None).await;
    served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    loop {
        let frame = events.next().await.expect("the question arrives");
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            break;
        }
    }
    drop(events);
    served.wait_for_log("session mail unloaded").await;
    assert_eq!(runs(&count), 0);
    let mut events = served.events("mail", None).await;
    let approve = served
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    let rest = events.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1);
}

/// Waits on `events` for the question; the SSE id of its frame.
async fn question_on(events: &mut reel_tests::served::Events) -> String {
    loop {
        let frame = events.next().await.expect("the question arrives");
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            return frame.id;
        }
    }
}

/// Two nodes on PostgreSQL: either node's inbox is the database's; an approve posted to the
/// node that does not hold the session is forwarded to the one that does; and a run waiting on
/// a node that is killed goes on where the decision is posted, once the lock is free.
#[tokio::test]
async fn on_postgresql_a_decision_posted_to_any_node_continues_the_run() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path(), "");
    // Two runs, each with a call that asks.
    write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {to: team}}\n  - - text: sent\n  - - tool_call: {id: c2, name: send, arguments: {to: all}}\n  - - text: sent again\n",
    );
    let mut a = Served::start_node(&cmd, &schema.dsn, reel_tests::free_port());
    let b = Served::start_node(&cmd, &schema.dsn, reel_tests::free_port());
    a.create("mail").await;
    let mut on_a = a.events("mail", None).await;
    let submit = a
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    question_on(&mut on_a).await;
    let (ids, pending) = inbox_once_filled(&b).await;
    assert_eq!(ids, ["mail"]);
    assert_eq!(pending[0]["call_id"], "c1");
    let approve = b
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    // A holds the run: the approve gets its own done, and the submit goes on to its end.
    let rest = on_a.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    let rest = on_a.until_done(&submit).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1, "allowed once on the other node, run once");

    // A second run waits on A, and A is killed: B continues it.
    let mut on_a = a.events("mail", None).await;
    a.request("mail", r#"{"submit":{"prompt":"Again."}}"#).await;
    question_on(&mut on_a).await;
    inbox_once_filled(&b).await;
    a.kill();
    let started = std::time::Instant::now();
    loop {
        let (status, answer) = b
            .post(
                "/v1/sessions/mail/requests",
                r#"{"requestId":"later","approve":{"callId":"c2","decision":"allow_once"}}"#,
            )
            .await;
        if status == 202 {
            break;
        }
        // Until PostgreSQL has seen A's connection close, B forwards to A and A is gone.
        assert!(matches!(status, 409 | 502), "{status} {answer}");
        assert!(started.elapsed().as_secs() < 30, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for _ in 0..100 {
        if runs(&count) == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(runs(&count), 2, "the killed node's waiting run ran on B");
    let (ids, _) = inbox(&b).await;
    assert!(ids.is_empty(), "{ids:?}");
}
