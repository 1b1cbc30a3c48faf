//! Steering and follow-ups over stdin RPC, through the real binary: a steer reaches the model
//! between tool phases or on one more call, follow-ups run in order with their own frames and
//! done, `cancel` with `clearQueue` empties the queue, shutdown drops it and end of input runs
//! it, and a queue left by a killed process is marked dropped on resume.

use std::path::Path;

use reel_tests::{FrameLine, RpcClient, assert_request_scoped, write_file};

fn serve(dir: &Path, script: &str, extra: &[&str]) -> RpcClient {
    let script = write_file(dir, "script.yaml", script);
    let command = write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: unused\nprovider:\n  script: {script}\ntools:\n  - name: ask\n    executor: client\n"
        ),
    );
    let mut args = vec!["run-command", &command, "--rpc", "--stdin-rpc"];
    args.extend(extra);
    RpcClient::start(&args)
}

fn text_of(frames: &[FrameLine], rid: &str) -> String {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid && f.ui_name() == Some("ChatTextSegmentFinished"))
        .map(|f| {
            f.json["uiEvent"]["payload"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("|")
}

fn names_of<'a>(frames: &'a [FrameLine], rid: &str) -> Vec<&'a str> {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid)
        .filter_map(FrameLine::ui_name)
        .collect()
}

/// Submits `r1` ("go") and waits until its reply has begun.
fn submit_and_wait_for_text(client: &mut RpcClient) {
    client.send(r#"{"requestId":"r1","submit":{"prompt":"go"}}"#);
    client.wait_for("the first text", |f| f.ui_name() == Some("ChatTextPatch"));
}

/// Each request's done, in the order they came.
fn dones_in_order(frames: &[FrameLine]) -> Vec<(&str, &str)> {
    frames
        .iter()
        .filter_map(|f| Some((f.line.request_id.as_str(), f.done_status()?)))
        .collect()
}

#[test]
fn a_steer_during_a_tool_phase_reaches_the_second_model_call() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        "turns:\n  - - tool_call: {id: q1, name: ask, arguments: {}}\n  - - echo_context\n";
    let mut client = serve(dir.path(), script, &[]);
    client.send(r#"{"requestId":"r1","submit":{"prompt":"start"}}"#);
    client.wait_for("the client tool call", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    client.send(r#"{"requestId":"s1","steer":{"prompt":"use metric units"}}"#);
    assert_eq!(client.done_of("s1"), "ok", "a steer is accepted at once");
    client.send(r#"{"requestId":"t1","toolResult":{"toolCallId":"q1","result":"42"}}"#);
    assert_eq!(client.done_of("r1"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    // The second call saw the tool result, then the steer.
    let seen = text_of(&frames, "r1");
    assert!(seen.ends_with("tool: 42\nuser: use metric units"), "{seen}");
    // The log says when it was accepted and where it was delivered.
    assert_eq!(names_of(&frames, "s1"), ["ChatPromptQueued"]);
    let r1 = names_of(&frames, "r1");
    let delivered = r1.iter().position(|n| *n == "ChatPromptDelivered").unwrap();
    let second_call = r1
        .iter()
        .rposition(|n| *n == "ChatProviderCallStarted")
        .unwrap();
    assert_eq!(
        delivered + 1,
        second_call,
        "delivered right before the call that saw it"
    );
}

#[test]
fn a_steer_while_the_model_finishes_gets_one_more_call() {
    let dir = tempfile::tempdir().unwrap();
    let script = "turns:\n  - - text: \"first \"\n    - sleep_ms: 1500\n    - text: answer\n  - - echo_context\n";
    let mut client = serve(dir.path(), script, &[]);
    submit_and_wait_for_text(&mut client);
    client.send(r#"{"requestId":"s1","steer":{"prompt":"shorter please"}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    assert_eq!(client.done_of("r1"), "ok");
    // A steer with nothing running has nowhere to go.
    client.send(r#"{"requestId":"s2","steer":{"prompt":"late"}}"#);
    assert_eq!(client.done_of("s2"), "failed");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    let calls = names_of(&frames, "r1")
        .iter()
        .filter(|n| **n == "ChatProviderCallStarted")
        .count();
    assert_eq!(calls, 2, "one more call carried the steer");
    let seen = text_of(&frames, "r1");
    assert!(
        seen.ends_with("assistant: first answer\nuser: shorter please"),
        "{seen}"
    );
}

#[test]
fn follow_ups_piped_at_once_run_in_order_each_with_its_own_done() {
    let dir = tempfile::tempdir().unwrap();
    // Each reply takes a moment, so the later lines arrive while the first one runs.
    let script = "turns:\n  - - sleep_ms: 300\n    - echo_context\n";
    let mut client = serve(dir.path(), script, &[]);
    client.send(r#"{"requestId":"a","followUp":{"prompt":"one"}}"#);
    client.send(r#"{"requestId":"b","followUp":{"prompt":"two"}}"#);
    client.send(r#"{"requestId":"c","followUp":{"prompt":"three"}}"#);
    // End of input: the queue still runs.
    client.close_stdin();
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let dones = dones_in_order(&frames);
    assert_eq!(dones, [("a", "ok"), ("b", "ok"), ("c", "ok")]);
    // With nothing running, a follow-up is a submit; the others waited in the queue.
    assert_eq!(names_of(&frames, "a")[0], "ChatUserMessageAccepted");
    for rid in ["b", "c"] {
        assert_eq!(
            names_of(&frames, rid)[..3],
            [
                "ChatPromptQueued",
                "ChatPromptDelivered",
                "ChatUserMessageAccepted"
            ],
            "{rid}"
        );
    }
    let seen = text_of(&frames, "c");
    assert!(
        seen.starts_with("user: one\n")
            && seen.contains("\nuser: two\n")
            && seen.ends_with("\nuser: three"),
        "{seen}"
    );
}

#[test]
fn cancel_with_clear_queue_stops_the_run_and_every_queued_follow_up() {
    let dir = tempfile::tempdir().unwrap();
    let script = "turns:\n  - - text: slow\n    - sleep_ms: 30000\n";
    let mut client = serve(dir.path(), script, &[]);
    submit_and_wait_for_text(&mut client);
    client.send(r#"{"requestId":"f1","followUp":{"prompt":"next"}}"#);
    client.send(r#"{"requestId":"f2","followUp":{"prompt":"after"}}"#);
    client.send(r#"{"requestId":"snap","snapshot":{}}"#);
    assert_eq!(client.done_of("snap"), "ok");
    client.send(r#"{"requestId":"c","cancel":{"clearQueue":true}}"#);
    assert_eq!(client.done_of("f1"), "stopped");
    assert_eq!(client.done_of("f2"), "stopped");
    assert_eq!(client.done_of("c"), "ok");
    assert_eq!(client.done_of("r1"), "stopped");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    // The snapshot showed the queue.
    let snapshot = frames
        .iter()
        .find(|f| f.line.request_id == "snap" && f.json.get("snapshot").is_some())
        .unwrap();
    let queued: Vec<&str> = snapshot.json["snapshot"]["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ChatQueuedPrompt")
        .map(|e| e["payload"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(queued, ["queued", "queued"]);
    let dropped = frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatPromptDropped"))
        .count();
    assert_eq!(dropped, 2);
    assert!(
        names_of(&frames, "f1")
            .iter()
            .all(|n| *n != "ChatRunStarted"),
        "never ran"
    );
}

#[test]
fn shutdown_with_a_queue_drops_it_and_a_plain_submit_while_busy_is_still_busy() {
    let dir = tempfile::tempdir().unwrap();
    let script = "turns:\n  - - text: \"a \"\n    - sleep_ms: 800\n    - text: b\n";
    let mut client = serve(dir.path(), script, &[]);
    submit_and_wait_for_text(&mut client);
    client.send(r#"{"requestId":"busy","submit":{"prompt":"also"}}"#);
    assert_eq!(client.done_of("busy"), "failed");
    client.send(r#"{"requestId":"f1","followUp":{"prompt":"later"}}"#);
    client.send(r#"{"requestId":"down","shutdown":{}}"#);
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let dones = dones_in_order(&frames);
    assert_eq!(
        dones,
        [
            ("busy", "failed"),
            ("f1", "stopped"),
            ("r1", "ok"),
            ("down", "shutdown")
        ]
    );
    assert_eq!(text_of(&frames, "r1"), "a b", "the running submit finished");
}

#[test]
fn a_queue_left_by_a_killed_process_is_marked_dropped_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db").display().to_string();
    let script = "turns:\n  - - text: slow\n    - sleep_ms: 60000\n";
    let flags = ["--session-id", "q", "--timeline-db", db.as_str()];
    let mut client = serve(dir.path(), script, &flags);
    submit_and_wait_for_text(&mut client);
    client.send(r#"{"requestId":"f1","followUp":{"prompt":"never run"}}"#);
    client.wait_for("the follow-up queued", |f| {
        f.ui_name() == Some("ChatPromptQueued")
    });
    // Queued is on the log once the next frames after it are out; give the commit a moment.
    client.send(r#"{"requestId":"snap","snapshot":{}}"#);
    assert_eq!(client.done_of("snap"), "ok");
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::process::Command::new("kill")
        .args(["-9", &client.pid().to_string()])
        .status()
        .unwrap();
    drop(client);

    let mut resume_flags = flags.to_vec();
    resume_flags.push("--resume");
    let mut resumed = serve(dir.path(), script, &resume_flags);
    resumed.send(r#"{"requestId":"s","snapshot":{}}"#);
    assert_eq!(resumed.done_of("s"), "ok");
    let (status, frames, _) = resumed.finish();
    assert!(status.success());
    let dropped = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatPromptDropped"))
        .expect("the queued follow-up is dropped on resume");
    assert_eq!(dropped.json["uiEvent"]["payload"]["reason"], "interrupted");
    assert_eq!(
        dropped.line.request_id, "f1",
        "stamped with the request that sent it"
    );
    let f1_done = frames
        .iter()
        .find(|f| f.line.request_id == "f1" && f.done_status().is_some());
    assert_eq!(
        f1_done.and_then(FrameLine::done_status),
        Some("stopped"),
        "its request ends"
    );
    assert!(
        frames
            .iter()
            .all(|f| f.ui_name() != Some("ChatUserMessageAccepted")),
        "a follow-up is never run silently"
    );
}
