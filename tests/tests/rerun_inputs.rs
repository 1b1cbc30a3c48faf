//! `reel rerun` feeds every input of the recording back where it came: steers, follow-ups, a
//! client tool's answers, a person's decisions, a cancel and a compaction asked for between
//! runs. A decision the recording lacks is a divergence; one nobody made is refused.

use reel_tests::{
    rerun_checks::{command, reel, rerun_of, runs_of},
    write_file,
};
use serde_json::Value;

/// Every kind of input is fed back where it came: a steer and a follow-up sent while the model
/// streamed, a client tool's answer, a person's decision on a call, a cancel of the
/// follow-up's run, and a compaction asked for before the last run. The re-run's events are the original's but for ids, times and ordinals,
/// and the tool that waited for the decision ran again.
#[test]
fn every_kind_of_input_is_fed_back_where_it_came() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let count = dir.path().join("count");
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"Let me ask. \"\n    - sleep_ms: 600\n    - tool_call: {id: c1, name: pick, arguments: {q: city}}\n  - - tool_call: {id: c2, name: send, arguments: {to: team}}\n  - - echo_context\n  - - text: \"Then \"\n    - sleep_ms: 30000\n    - text: \"nothing.\"\n  - - text: \"Bye.\"\n",
    );
    let cmd = write_file(
        dir.path(),
        "inputs.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\ncontext: {{keep_recent_turns: 1}}\nprovider:\n  script: {script}\ntools:\n  - name: pick\n    description: Asks the user.\n    executor: client\n  - name: send\n    description: Sends a mail.\n    approval: ask\n    executor:\n      command: [sh, -c, 'echo sent >> {}; echo sent']\n",
            count.display()
        ),
    );
    let mut client = reel_tests::approval_fixture::stored_rpc(&cmd, &db, "inputs", false);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Pick a city and mail the team."}}"#);
    client.wait_for("the first words", |f| f.ui_name() == Some("ChatTextPatch"));
    client.send(r#"{"requestId":"st","steer":{"prompt":"Say hello too."}}"#);
    client.send(r#"{"requestId":"f1","followUp":{"prompt":"And then?"}}"#);
    client.wait_for("the client's call", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    client.send(r#"{"requestId":"t1","toolResult":{"toolCallId":"c1","result":"Oslo"}}"#);
    client.wait_for("the question", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    client.send(r#"{"requestId":"a1","approve":{"callId":"c2","decision":"allow_once"}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    client.wait_for("the follow-up's words", |f| {
        f.ui_name() == Some("ChatTextPatch")
    });
    client.send(r#"{"requestId":"x","cancel":{}}"#);
    assert_eq!(client.done_of("f1"), "stopped");
    client.send(r#"{"requestId":"c","compact":{"instructions":"Keep the city."}}"#);
    assert_eq!(client.done_of("c"), "ok");
    client.send(r#"{"requestId":"s2","submit":{"prompt":"Bye."}}"#);
    assert_eq!(client.done_of("s2"), "ok");
    drop(client.finish());
    assert_eq!(reel_tests::approval_fixture::runs(&count), 1);

    let (status, out, stderr) = reel(&[
        "rerun",
        "inputs",
        "--command",
        &cmd,
        "--session-id",
        "again",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert_eq!(out, "equal: again re-ran 3 turns of inputs the same way\n");
    assert_eq!(
        reel_tests::approval_fixture::runs(&count),
        2,
        "the tool ran again"
    );

    let mut timeline = reel_tests::TimelineDb::open(&db);
    let original = runs_of(&timeline.events("inputs"));
    let rerun = runs_of(&timeline.events("again"));
    let names = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for kind in [
        "ChatPromptQueued",
        "ChatPromptDelivered",
        "ChatToolApprovalDecided",
        "ChatRunStopped",
        "ChatContextCompacted",
    ] {
        assert!(names(&original).iter().any(|n| n == kind), "{kind}");
    }
    assert_eq!(names(&rerun), names(&original));
    assert_eq!(rerun, original, "the same events but for ids and times");
}

/// A command that now asks a person before its tool runs: the re-run waits for a decision the
/// recording does not have, which is a divergence of kind `input` (the run is stopped).
#[test]
fn a_decision_the_recording_does_not_have_is_a_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let original = command(dir.path(), "a.yaml", "Be brief.", "noted", "");
    let (status, _, stderr) = reel(&[
        "run-command",
        &original,
        "--session-id",
        "plain",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&original).unwrap();
    let asking = write_file(
        dir.path(),
        "ask.yaml",
        &text.replace("    executor:", "    approval: ask\n    executor:"),
    );
    let (status, out, stderr) = rerun_of("plain", &asking, &db);
    assert_eq!(status, Some(3), "{out}{stderr}");
    assert!(out.starts_with("diverged at turn 1: input\n"), "{out}");
    assert!(
        out.contains("now: the re-run waited for a decision on call c1"),
        "{out}"
    );
}

/// A decision nobody made (here it expired) is not an input to feed back: the re-run is
/// refused, naming the event and how to re-run what comes before it.
#[test]
fn a_decision_nobody_made_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (cmd, _) =
        reel_tests::approval_fixture::send_command(dir.path(), "    approval_timeout: 1s\n");
    let mut client = reel_tests::approval_fixture::stored_rpc(&cmd, &db, "expired", false);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Mail the team."}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    drop(client.finish());
    let (status, _, stderr) = rerun_of("expired", &cmd, &db);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("is a decision nobody made (it expired, or nobody was left to decide)"),
        "{stderr}"
    );
    assert!(stderr.contains("--until"), "{stderr}");
}

/// A follow-up queued while a run went on is the prompt of the run it started: fed as such.
#[test]
fn a_follow_up_queued_during_a_run_is_fed_as_the_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"first \"\n    - sleep_ms: 400\n    - text: \"answer\"\n  - - text: \"second answer\"\n",
    );
    let cmd = write_file(
        dir.path(),
        "f.yaml",
        &format!("name: t\ndescription: t\nprompt: unused\nprovider:\n  script: {script}\n"),
    );
    let mut client = reel_tests::approval_fixture::stored_rpc(&cmd, &db, "queued", false);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"One."}}"#);
    client.send(r#"{"requestId":"f1","followUp":{"prompt":"Two."}}"#);
    client.wait_for("the follow-up queued", |f| {
        f.ui_name() == Some("ChatPromptQueued")
    });
    assert_eq!(client.done_of("f1"), "ok");
    drop(client.finish());
    let (status, out, stderr) = rerun_of("queued", &cmd, &db);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert!(
        out.contains("re-ran 2 turns of queued the same way"),
        "{out}"
    );
}
