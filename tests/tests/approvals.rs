//! `approval: ask` tools over stdin RPC and `reel serve`, where nobody can be asked directly: the call waits
//! (`ChatToolApprovalRequested`, the call `awaiting_approval`) for an `approve` request, and
//! runs once when allowed, or not at all, the model reading why. Bad decisions, unknown calls
//! and a second decision are refused with nothing appended; the end of input decides
//! `cancelled`.

use std::path::{Path, PathBuf};

use reel_proto::Any;
use reel_tests::{
    FrameLine, PageDriver, RpcClient, TimelineDb,
    approval_fixture::{runs, send_command},
    assert_request_scoped,
    served::Served,
    write_file,
};
use serde_json::Value;

/// The shared command (see [`send_command`]), with no extra settings.
fn command(dir: &Path) -> (String, PathBuf) {
    send_command(dir, "")
}

fn start(cmd: &str) -> RpcClient {
    RpcClient::start(&[
        "run-command",
        cmd,
        "--rpc",
        "--stdin-rpc",
        "--include-backend-events",
    ])
}

fn error_code(frames: &[FrameLine], rid: &str) -> Option<String> {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid)
        .find_map(|f| f.json.get("error"))
        .map(|e| e["code"].as_str().unwrap().to_owned())
}

fn logged(frames: &[FrameLine]) -> usize {
    frames
        .iter()
        .filter(|f| f.json.get("backendEvent").is_some())
        .count()
}

fn ui_payloads<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

/// Waits for the question; checks the call waits and has not run.
fn wait_for_question(client: &mut RpcClient, count: &Path) {
    let asked = client.wait_for("the approval request", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    let payload = &asked.json["uiEvent"]["payload"];
    assert_eq!(payload["toolCallId"], "c1");
    assert_eq!(payload["toolName"], "send");
    assert_eq!(
        payload["options"],
        serde_json::json!(["allow_once", "allow_always", "reject_once"])
    );
    assert_eq!(runs(count), 0, "nothing runs before the decision");
}

#[test]
fn a_call_waits_for_approve_and_runs_once_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let mut client = start(&cmd);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    wait_for_question(&mut client, &count);

    // While it waits: a snapshot shows the call awaiting approval.
    client.send(r#"{"requestId":"p1","snapshot":{}}"#);
    assert_eq!(client.done_of("p1"), "ok");
    let call = client.snapshot_entity("p1", "ChatToolCall");
    assert_eq!(call["payload"]["status"], "awaiting_approval");

    // Bad decisions and unknown calls are refused, and nothing is appended.
    let before = logged(&client.frames);
    client.send(r#"{"requestId":"a0","approve":{"callId":"c1","decision":"maybe"}}"#);
    assert_eq!(client.done_of("a0"), "failed");
    client.send(r#"{"requestId":"a1","approve":{"callId":"c9","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("a1"), "failed");
    assert_eq!(
        error_code(&client.frames, "a0").as_deref(),
        Some("invalid_decision")
    );
    assert_eq!(
        error_code(&client.frames, "a1").as_deref(),
        Some("unknown_tool_call")
    );
    assert_eq!(
        logged(&client.frames),
        before,
        "a refused request appends nothing"
    );
    assert_eq!(runs(&count), 0);

    client.send(r#"{"requestId":"a2","approve":{"callId":"c1","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("a2"), "ok");
    assert_eq!(client.done_of("s1"), "ok");
    assert_eq!(runs(&count), 1, "allowed once, run once");

    // Decided already, and then nothing running: refused.
    client.send(r#"{"requestId":"a3","approve":{"callId":"c1","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("a3"), "failed");
    assert_eq!(
        error_code(&client.frames, "a3").as_deref(),
        Some("no_active_request")
    );
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_request_scoped(&frames);
    assert_eq!(runs(&count), 1);
    let decided = ui_payloads(&frames, "ChatToolApprovalDecided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["decision"], "allowed");
    // The decision is part of the run: stamped with the submit's id.
    let decided_frame = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatToolApprovalDecided"))
        .unwrap();
    assert_eq!(decided_frame.line.request_id, "s1");
    let result = ui_payloads(&frames, "ChatToolResultReady");
    assert_eq!(result[0]["result"], "sent\n");
}

#[test]
fn a_rejected_call_is_not_run_and_the_model_reads_the_persons_words() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let mut client = start(&cmd);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    wait_for_question(&mut client, &count);
    client.send(
        r#"{"requestId":"a1","approve":{"callId":"c1","decision":"reject_once","message":"not on a Sunday"}}"#,
    );
    assert_eq!(client.done_of("a1"), "ok");
    assert_eq!(client.done_of("s1"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(runs(&count), 0, "a rejected call never runs");
    let decided = ui_payloads(&frames, "ChatToolApprovalDecided");
    assert_eq!(decided[0]["decision"], "rejected");
    // The model's next call carries the refusal and the person's words.
    let text: String = ui_payloads(&frames, "ChatTextSegmentFinished")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(
        text.contains("not run: the person declined this call of send: not on a Sunday"),
        "{text}"
    );
}

/// No call of a tool step runs while another call of it waits for a decision: `note` (no
/// approval) starts only once `send` is decided.
#[test]
fn the_other_calls_of_the_step_wait_for_the_decision_too() {
    let dir = tempfile::tempdir().unwrap();
    let noted = dir.path().join("noted");
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {}}\n    - tool_call: {id: c2, name: note, arguments: {}}\n  - - text: done\n",
    );
    let cmd = write_file(
        dir.path(),
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\ntools:\n  - name: send\n    description: Sends.\n    approval: ask\n    executor:\n      command: [sh, -c, 'echo sent']\n  - name: note\n    description: Notes.\n    executor:\n      command: [sh, -c, 'touch {}; echo noted']\n",
            noted.display()
        ),
    );
    let mut client = start(&cmd);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"go"}}"#);
    client.wait_for("the approval request", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    // The snapshot round trip gives a call that was free to run the time to do it.
    client.send(r#"{"requestId":"p1","snapshot":{}}"#);
    assert_eq!(client.done_of("p1"), "ok");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !noted.exists(),
        "a call of the step ran before the decision"
    );
    client.send(r#"{"requestId":"a1","approve":{"callId":"c1","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    assert!(noted.exists(), "once decided, the step's calls run");
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
}

/// A call nobody decides on within its tool's `approval_timeout` is decided `expired` and not
/// run; the model reads that nobody decided, and the run goes on.
#[test]
fn a_call_nobody_decides_on_in_time_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let text = std::fs::read_to_string(&cmd).unwrap();
    std::fs::write(
        &cmd,
        text.replace(
            "    approval: ask\n",
            "    approval: ask\n    approval_timeout: 1s\n",
        ),
    )
    .unwrap();
    let mut client = start(&cmd);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    wait_for_question(&mut client, &count);
    assert_eq!(client.done_of("s1"), "ok");
    // Too late: the call is no longer waiting.
    client.send(r#"{"requestId":"a1","approve":{"callId":"c1","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("a1"), "failed");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(runs(&count), 0, "an expired call never runs");
    let decided = ui_payloads(&frames, "ChatToolApprovalDecided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["decision"], "expired");
    let text: String = ui_payloads(&frames, "ChatTextSegmentFinished")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(
        text.contains("not run: nobody decided on this call of send within 1 s"),
        "{text}"
    );
}

/// A command file's `approval_timeout` must be a duration people write.
#[test]
fn an_approval_timeout_that_is_no_duration_is_refused_with_an_example() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = command(dir.path());
    let text = std::fs::read_to_string(&cmd).unwrap();
    std::fs::write(
        &cmd,
        text.replace(
            "    approval: ask\n",
            "    approval: ask\n    approval_timeout: soon\n",
        ),
    )
    .unwrap();
    let output = reel_tests::reel(&["run-command", &cmd]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"soon\" is not a duration"), "{stderr}");
    assert!(stderr.contains("24h"), "{stderr}");
}

/// Runs a one-shot `run-command` of `cmd` on a terminal (`script` gives it a pty) that
/// answers `typed`; its exit status and everything the terminal showed.
fn on_a_terminal(cmd: &str, typed: &str) -> (bool, String) {
    use std::io::Write;
    let line = format!("{} run-command {cmd}", reel_tests::reel_binary().display());
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typed.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    (output.status.success(), shown)
}

/// On a terminal, a one-shot run asks the person there; an answer that is no option asks
/// again; "o" runs the call once, "r" does not run it.
#[test]
fn a_one_shot_run_on_a_terminal_asks_the_person_there() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let (ok, shown) = on_a_terminal(&cmd, "x\no\n");
    assert!(ok, "{shown}");
    assert!(
        shown.contains("reel: send wants to run with {\"to\":\"team\"}"),
        "{shown}"
    );
    assert!(shown.contains("reel: answer o, a or r"), "{shown}");
    assert!(shown.contains("tool: sent"), "{shown}");
    assert_eq!(runs(&count), 1);
    let (ok, shown) = on_a_terminal(&cmd, "r\n");
    assert!(ok, "{shown}");
    assert!(
        shown.contains("not run: the person declined this call of send"),
        "{shown}"
    );
    assert_eq!(runs(&count), 1, "rejected: not run again");
}

/// A one-shot run without a terminal has nobody to ask: the call is not run, and the run does
/// not wait for ever.
#[test]
fn a_one_shot_run_does_not_wait_for_a_decision_nobody_can_send() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let output = reel_tests::reel(&["run-command", &cmd, "--rpc"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(runs(&count), 0);
    let frames = reel_tests::parse_frames(&output.stdout);
    let result = ui_payloads(&frames, "ChatToolResultReady");
    assert!(
        result[0]["result"]
            .as_str()
            .unwrap()
            .contains("nobody can be asked here"),
        "{result:?}"
    );
}

#[test]
fn the_end_of_input_decides_a_waiting_call_cancelled_and_it_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let mut client = start(&cmd);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    wait_for_question(&mut client, &count);
    client.close_stdin();
    assert_eq!(client.done_of("s1"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(runs(&count), 0);
    let decided = ui_payloads(&frames, "ChatToolApprovalDecided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["decision"], "cancelled");
    let result = ui_payloads(&frames, "ChatToolResultReady");
    assert!(
        result[0]["result"]
            .as_str()
            .unwrap()
            .contains("nobody was left to decide"),
        "{result:?}"
    );
}

/// `reel serve`: the question reaches a subscriber, and an HTTP `approve` lets the call run.
#[tokio::test]
async fn a_served_session_takes_its_decision_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let served = Served::start(&cmd, &dir.path().join("t.db"), &[], &[]);
    served.create("mail").await;
    let mut events = served.events("mail", None).await;
    let submit = served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    loop {
        let frame = events.next().await.expect("the question arrives");
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            break;
        }
    }
    assert_eq!(runs(&count), 0);
    let (status, body) = served
        .post(
            "/v1/sessions/mail/requests",
            r#"{"requestId":"bad","approve":{"callId":"c9","decision":"allow_once"}}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let refused = events.until_done("bad").await;
    assert_eq!(refused.last().unwrap().frame.done_status(), Some("failed"));
    let approve = served
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_always"}}"#,
        )
        .await;
    let frames = events.until_done(&submit).await;
    assert!(
        frames
            .iter()
            .any(|f| f.frame.line.request_id == approve && f.frame.done_status() == Some("ok")),
        "the approve's own done"
    );
    assert_eq!(runs(&count), 1);
}

/// The chat page: the waiting call's card offers the decisions, a keyboard-only "Allow once"
/// runs the tool (once), and a reload still shows the decision.
#[tokio::test]
async fn the_chat_page_decides_a_waiting_call_by_keyboard() {
    let Some(driver) = PageDriver::ready() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = command(dir.path());
    let db = dir.path().join("t.db");
    let served = Served::start(&cmd, &db, &[], &[]);
    served.create("idle").await;
    served.create("desk").await;
    let mut events = served.events("desk", None).await;
    served
        .request("desk", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    loop {
        let frame = events.next().await.expect("the question arrives");
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            break;
        }
    }
    // The inbox is the store's: the question is committed a moment after it is streamed.
    for _ in 0..100 {
        let (_, inbox) = served.get("/v1/sessions?waiting=true").await;
        if inbox["sessions"].as_array().is_some_and(|s| !s.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    let seen = driver
        .run("approval_card.py", &port, vec!["desk".into()])
        .await;
    assert_eq!(seen["inbox"], "desk", "{seen}");
    assert_eq!(seen["reloaded"], "Decision: allowed", "{seen}");
    assert_eq!(runs(&count), 1, "allowed once in the page, run once");
    let decided: Vec<String> = tokio::task::spawn_blocking(move || {
        TimelineDb::open(&db)
            .events("desk")
            .into_iter()
            .filter_map(|e| match e.event {
                Any::ChatToolApprovalDecided(d) => Some(d.decision),
                _ => None,
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(decided, ["allowed"]);
}
