//! Tools in stdin-RPC sessions and at the loop's edges: a `client` tool answered by the client
//! (and one it never answers), the iteration limit, a cancel that must kill a running command
//! tool and everything it started, and a crash while a tool runs, resumed.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use reel_tests::{FrameLine, RpcClient, assert_request_scoped, parse_frames, reel, write_file};
use serde_json::Value;

/// A command with `tools` (YAML list items) whose scripted model plays `script`.
fn command(dir: &Path, script: &str, tools: &str) -> String {
    let script = write_file(dir, "script.yaml", script);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"What now?\"\nprovider:\n  script: {script}\ntools:\n{tools}"
        ),
    )
}

const ASK_USER: &str = "  - name: ask_user\n    description: Asks the person at the client.\n    parameters: {type: object, properties: {question: {type: string}}}\n    executor: client\n";

/// A model that asks the client, then shows what it was given.
const ASK_THEN_ECHO: &str = "turns:\n  - - tool_call: {id: call_ask, name: ask_user, arguments: {question: \"Which city?\"}}\n  - - echo_context\n";

fn payload_of<'a>(frames: &'a [FrameLine], rid: &str, name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid && f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

fn error_code(frames: &[FrameLine], rid: &str) -> Option<String> {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid)
        .find_map(|f| f.json.get("error"))
        .map(|e| e["code"].as_str().unwrap().to_owned())
}

#[test]
fn a_stdin_rpc_client_answers_a_client_tool_and_the_run_continues_with_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path(), ASK_THEN_ECHO, ASK_USER);
    let mut client = RpcClient::start(&["run-command", &cmd, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Plan my trip."}}"#);
    let waiting = client.wait_for("the client tool call", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    let started = &waiting.json["uiEvent"]["payload"];
    assert_eq!(started["status"], "awaiting_client");
    assert_eq!(started["toolCallId"], "call_ask");
    assert_eq!(started["toolName"], "ask_user");
    let input: Value = serde_json::from_str(started["input"].as_str().unwrap()).unwrap();
    assert_eq!(input["question"], "Which city?");

    // A result for a call nobody waits for is refused; the run is not disturbed.
    client.send(r#"{"requestId":"t0","toolResult":{"toolCallId":"call_nope","result":"x"}}"#);
    assert_eq!(client.done_of("t0"), "failed");
    assert_eq!(
        error_code(&client.frames, "t0").as_deref(),
        Some("unknown_tool_call")
    );
    // While the run waits, a snapshot is answered at once.
    client.send(r#"{"requestId":"p1","snapshot":{}}"#);
    assert_eq!(client.done_of("p1"), "ok");
    let call = client.snapshot_entity("p1", "ChatToolCall");
    assert_eq!(call["payload"]["status"], "awaiting_client");

    client.send(r#"{"requestId":"t1","toolResult":{"toolCallId":"call_ask","result":"Oslo"}}"#);
    assert_eq!(client.done_of("t1"), "ok");
    assert_eq!(client.done_of("s1"), "ok");
    // Answered once: a second answer is refused.
    client.send(r#"{"requestId":"t2","tool_result":{"tool_call_id":"call_ask","result":"Rome"}}"#);
    assert_eq!(client.done_of("t2"), "failed");

    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_request_scoped(&frames);
    let result = payload_of(&frames, "s1", "ChatToolResultReady");
    assert_eq!(result.len(), 1);
    assert_eq!(result[0]["result"], "Oslo");
    assert_ne!(result[0]["isError"], true);
    let finished = payload_of(&frames, "s1", "ChatToolCallFinished");
    assert_eq!(finished[0]["status"], "completed");
    // The model's second call saw the question and the client's answer.
    let text: String = payload_of(&frames, "s1", "ChatTextSegmentFinished")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(
        text.contains("assistant calls ask_user({\"question\":\"Which city?\"})"),
        "{text}"
    );
    assert!(text.contains("tool: Oslo"), "{text}");
}

#[test]
fn a_client_that_never_answers_gets_an_error_result_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let tools = format!("{ASK_USER}    timeout_ms: 300\n");
    let cmd = command(dir.path(), ASK_THEN_ECHO, &tools);
    let mut client = RpcClient::start(&["run-command", &cmd, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Plan my trip."}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    let (_, frames, _) = client.finish();
    let result = payload_of(&frames, "s1", "ChatToolResultReady");
    assert_eq!(result[0]["isError"], true);
    assert!(
        result[0]["result"]
            .as_str()
            .unwrap()
            .contains("did not answer within 300 ms")
    );
    assert_eq!(
        payload_of(&frames, "s1", "ChatToolCallFinished")[0]["status"],
        "failed"
    );
}

#[test]
fn a_client_that_closes_its_input_while_a_tool_waits_gets_an_error_result_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let tools = format!("{ASK_USER}    timeout_ms: 600000\n");
    let cmd = command(dir.path(), ASK_THEN_ECHO, &tools);
    let mut client = RpcClient::start(&["run-command", &cmd, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Plan my trip."}}"#);
    client.wait_for("the client tool call", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    client.close_stdin();
    // Within the client's hang guard, long before the tool's ten-minute timeout.
    assert_eq!(client.done_of("s1"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    let result = payload_of(&frames, "s1", "ChatToolResultReady");
    assert!(
        result[0]["result"]
            .as_str()
            .unwrap()
            .contains("left before answering")
    );
}

#[test]
fn a_client_tool_without_a_client_is_an_error_result_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path(), ASK_THEN_ECHO, ASK_USER);
    let output = reel(&["run-command", &cmd, "--rpc"]).output().unwrap();
    assert!(output.status.success());
    let frames = parse_frames(&output.stdout);
    let result = payload_of(&frames, "", "ChatToolResultReady");
    assert_eq!(result[0]["isError"], true);
    assert!(result[0]["result"].as_str().unwrap().contains("has none"));
}

#[test]
fn the_iteration_limit_ends_the_run_with_a_warning_and_answers_the_last_calls() {
    let dir = tempfile::tempdir().unwrap();
    let call =
        |n: u32| format!("  - - tool_call: {{id: call_{n}, name: echo, arguments: {{n: {n}}}}}\n");
    let script = format!("turns:\n{}{}{}", call(1), call(2), call(3));
    let tools = "  - name: echo\n    description: Echoes its arguments.\n    executor:\n      command: [cat]\n";
    let cmd = command(dir.path(), &script, tools);
    let output = reel(&["run-command", &cmd, "--rpc", "--max-iterations", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("after 2 model calls"), "{stderr}");
    let frames = parse_frames(&output.stdout);
    assert_eq!(payload_of(&frames, "", "ChatProviderCallStarted").len(), 2);
    let results = payload_of(&frames, "", "ChatToolResultReady");
    assert_eq!(results.len(), 2);
    // The first call ran (cat echoed its arguments); the second was answered "not run".
    assert_eq!(results[0]["result"], "{\"n\":1}\n");
    assert_eq!(results[1]["isError"], true);
    assert!(
        results[1]["result"]
            .as_str()
            .unwrap()
            .contains("limit of 2")
    );
    let finished = payload_of(&frames, "", "ChatToolCallFinished");
    assert_eq!(finished[1]["status"], "skipped");
    let run = payload_of(&frames, "", "ChatRunFinished");
    assert_eq!(run[0]["status"], "max_iterations_reached");
    let error = frames.iter().find_map(|f| f.json.get("error")).unwrap();
    assert_eq!(error["code"], "max_iterations_reached");
    assert_ne!(error["terminal"], true);
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
}

/// A tool that starts a long sleep in the background, writes its pid and waits for it.
fn slow_tool(dir: &Path) -> (String, std::path::PathBuf) {
    let pidfile = dir.join("sleep.pid");
    let tools = format!(
        "  - name: slow\n    description: Takes its time.\n    executor:\n      command: [sh, -c, \"sleep 30 & echo $! > {}; wait\"]\n",
        pidfile.display()
    );
    (tools, pidfile)
}

fn wait_for_pid(pidfile: &Path) -> u32 {
    let started = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the tool never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cancel_while_a_command_tool_runs_kills_it_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let (tools, pidfile) = slow_tool(dir.path());
    let script = "turns:\n  - - tool_call: {id: call_slow, name: slow}\n  - - text: never\n";
    let cmd = command(dir.path(), script, &tools);
    let mut client = RpcClient::start(&["run-command", &cmd, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Go."}}"#);
    client.wait_for("the tool's start", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    let sleeper = wait_for_pid(&pidfile);
    assert!(!reel_tests::process_gone(sleeper));
    client.send(r#"{"requestId":"c1","cancel":{}}"#);
    assert_eq!(client.done_of("s1"), "stopped");
    let started = Instant::now();
    while !reel_tests::process_gone(sleeper) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the tool's child outlived the cancel"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, frames, _) = client.finish();
    assert!(status.success());
    let finished = payload_of(&frames, "s1", "ChatToolCallFinished");
    assert_eq!(finished[0]["status"], "cancelled");
    let result = payload_of(&frames, "s1", "ChatToolResultReady");
    assert_eq!(result[0]["isError"], true);
    assert!(payload_of(&frames, "s1", "ChatRunStopped").len() == 1);
    assert!(payload_of(&frames, "s1", "ChatProviderCallStarted").len() == 1);
}

#[test]
fn a_crash_while_a_tool_runs_is_closed_on_resume_and_the_model_sees_a_whole_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let (tools, pidfile) = slow_tool(dir.path());
    let script = "turns:\n  - - tool_call: {id: call_slow, name: slow}\n  - - echo_context\n";
    let cmd = command(dir.path(), script, &tools);
    let db = dir.path().join("timeline.db");
    let db = db.to_str().unwrap();
    let mut client = RpcClient::start(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "crashy",
        "--timeline-db",
        db,
    ]);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Go."}}"#);
    client.wait_for("the tool's start", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    let sleeper = wait_for_pid(&pidfile);
    // Let the timeline sink commit what the client has seen, then kill reel outright.
    std::thread::sleep(Duration::from_millis(300));
    std::process::Command::new("kill")
        .args(["-9", &client.pid().to_string()])
        .status()
        .unwrap();
    drop(client);
    // reel's tool guard saw its pipe close and killed the tool's process group: nothing of the
    // tool outlives reel, not even the child it started.
    let started = Instant::now();
    while !reel_tests::process_gone(sleeper) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the tool's child outlived a reel killed with kill -9"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let resumed = reel(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "crashy",
        "--resume",
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    let frames = parse_frames(&resumed.stdout);
    let result = payload_of(&frames, "", "ChatToolResultReady");
    assert_eq!(result[0]["toolCallId"], "call_slow");
    assert_eq!(result[0]["isError"], true);
    assert!(
        result[0]["result"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );
    assert_eq!(
        payload_of(&frames, "", "ChatToolCallFinished")[0]["status"],
        "interrupted"
    );
    // The new run's model call got the old call and its (error) result, in order.
    let text: String = payload_of(&frames, "", "ChatTextSegmentFinished")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    let call = text.find("assistant calls slow({})").expect(&text);
    let answer = text.find("tool: interrupted").expect(&text);
    let prompt = text.rfind("user: What now?").expect(&text);
    assert!(call < answer && answer < prompt, "{text}");
}
