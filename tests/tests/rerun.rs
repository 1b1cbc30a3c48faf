//! `reel rerun SESSION --command FILE`: a stored session re-run against its recording. Its
//! prompts are fed again, each model call is answered with the recorded output (no network, no
//! key) once the request matches the recorded one, and the tools run again. The first
//! divergence stops it (exit 3) and names where and what: a tool result, or a part of a model
//! request. A re-run that goes the same way is a session `reel diff` finds equal.

use std::path::Path;

use reel_tests::write_file;
use serde_json::Value;

/// A command whose model says a word, calls `note`, then shows the conversation; `system` is
/// its system prompt, the tool prints `answer`, `more` adds tools.
fn command(dir: &Path, name: &str, system: &str, answer: &str, more: &str) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - text: \"Let me note it. \"\n    - tool_call: {id: c1, name: note, arguments: {what: milk}}\n  - - echo_context\n",
    );
    write_file(
        dir,
        name,
        &format!(
            "name: t\ndescription: t\nprompt: Note the milk.\nsystem_prompt: {system}\nprovider:\n  script: {script}\ntools:\n  - name: note\n    description: Notes.\n    executor:\n      command: [sh, -c, 'echo {answer}']\n{more}"
        ),
    )
}

fn reel(args: &[&str]) -> (Option<i32>, String, String) {
    let output = reel_tests::run(args);
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `reel rerun SESSION --command CMD` on the database `db`.
fn rerun_of(session: &str, cmd: &str, db: &Path) -> (Option<i32>, String, String) {
    reel(&[
        "rerun",
        session,
        "--command",
        cmd,
        "--timeline-db",
        db.to_str().unwrap(),
    ])
}

#[test]
fn a_recorded_session_reruns_the_same_and_a_change_is_named_where_it_diverges() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let original = command(dir.path(), "a.yaml", "Be brief.", "noted", "");
    let (status, _, stderr) = reel(&[
        "run-command",
        &original,
        "--session-id",
        "orig",
        "--timeline-db",
        db,
    ]);
    assert_eq!(status, Some(0), "{stderr}");

    // Nothing changed: the same way, and a session diff finds equal.
    let rerun = |cmd: &str, extra: &[&str]| {
        let mut args = vec!["rerun", "orig", "--command", cmd, "--timeline-db", db];
        args.extend(extra);
        reel(&args)
    };
    let (status, out, stderr) = rerun(&original, &["--session-id", "again"]);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert_eq!(out, "equal: again re-ran 1 turns of orig the same way\n");
    let (status, out, _) = reel(&["diff", "orig", "again", "--timeline-db", db]);
    assert_eq!(status, Some(0), "{out}");

    // The tool answers otherwise: the tool result diverges, both values shown.
    let filed = command(dir.path(), "b.yaml", "Be brief.", "filed", "");
    let (status, out, _) = rerun(&filed, &[]);
    assert_eq!(status, Some(3), "{out}");
    assert!(
        out.starts_with("diverged at turn 1: tool result 1\n"),
        "{out}"
    );
    assert!(out.contains("recorded: note: noted"), "{out}");
    assert!(out.contains("now: note: filed"), "{out}");
    // ... unless the tools answer with the recorded results.
    let (status, out, _) = rerun(&filed, &["--tools", "recorded"]);
    assert_eq!(status, Some(0), "{out}");

    // Another system prompt: the first model call's request diverges.
    let long = command(dir.path(), "c.yaml", "Be long.", "noted", "");
    let (status, out, _) = rerun(&long, &["--format", "json"]);
    assert_eq!(status, Some(3), "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["equal"], false);
    assert_eq!(report["divergences"][0]["kind"], "request");
    assert_eq!(report["divergences"][0]["part"], "system prompt");
    let first_call = report["divergences"][0]["original"][0].as_u64().unwrap();
    assert!(first_call > 0, "{report}");

    // One more tool offered: the request's tools, by name.
    let more = "  - name: file\n    description: Files.\n    executor:\n      command: [sh, -c, 'echo filed']\n";
    let tooled = command(dir.path(), "d.yaml", "Be brief.", "noted", more);
    let (status, out, _) = rerun(&tooled, &[]);
    assert_eq!(status, Some(3), "{out}");
    assert!(out.contains("request (tools offered)"), "{out}");
    assert!(out.contains("recorded: [note]"), "{out}");
    assert!(out.contains("now: [note, file]"), "{out}");

    // A session that is not there: an error, not a divergence.
    let (status, _, stderr) = reel(&[
        "rerun",
        "nobody",
        "--command",
        &original,
        "--timeline-db",
        db,
    ]);
    assert_eq!(status, Some(1));
    assert!(stderr.contains("no session \"nobody\""), "{stderr}");
}

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

/// Recorded against an OpenAI-compatible server on 127.0.0.1 (a 429 retried, a tool call
/// streamed in pieces, usage; then a turn the server fails with a 400), the server gone: the
/// re-run needs no network and no key, and its events are the original's but for ids and
/// times.
#[test]
fn a_session_recorded_against_a_model_server_reruns_without_it() {
    use reel_tests::sse_server::{Reply, SseServer, delta_event, done_event, quick, usage_event};
    use serde_json::json;

    let call = |id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut function = json!({"arguments": arguments});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": 0, "type": "function", "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        delta_event(json!({"tool_calls": [call]}), None)
    };
    let server = SseServer::start(vec![
        Reply::Status {
            status: 429,
            body: json!({"error": {"message": "slow down"}}).to_string(),
        },
        quick(vec![
            delta_event(json!({"content": "Let me look. "}), None),
            call(Some("call_w"), Some("weather"), ""),
            call(None, None, "{\"city\":"),
            call(None, None, "\"Oslo\"}"),
            delta_event(json!({}), Some("tool_calls")),
            usage_event(20, 9),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "It is sunny in Oslo."}), Some("stop")),
            usage_event(35, 6),
            done_event(),
        ]),
        Reply::Status {
            status: 400,
            body:
                json!({"error": {"message": "context too long", "type": "invalid_request_error"}})
                    .to_string(),
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let cmd = write_file(
        dir.path(),
        "weather.yaml",
        &format!(
            "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: What is the weather in Oslo?\nprovider:\n  name: openai\n  model: test-model\n  base_url: {}\ntools:\n  - name: weather\n    description: The weather in a city.\n    executor:\n      command: [sh, -c, 'echo sunny']\n",
            server.base_url()
        ),
    );
    let db_arg = db.to_str().unwrap();
    for (resume, expected) in [(false, 0), (true, 1)] {
        let mut args = vec![
            "run-command",
            &cmd,
            "--session-id",
            "rec",
            "--timeline-db",
            db_arg,
        ];
        if resume {
            args.push("--resume");
        }
        let (status, _, stderr) = reel(&args);
        assert_eq!(status, Some(expected), "{stderr}");
    }
    assert_eq!(server.received().len(), 4);
    let address = server.base_url();
    let address = address
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    drop(server);
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "the model server is gone"
    );

    let (status, out, stderr) = reel(&[
        "rerun",
        "rec",
        "--command",
        &cmd,
        "--session-id",
        "replayed",
        "--timeline-db",
        db_arg,
    ]);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert_eq!(out, "equal: replayed re-ran 2 turns of rec the same way\n");
    let mut timeline = reel_tests::TimelineDb::open(&db);
    let original = runs_of(&timeline.events("rec"));
    let names: Vec<&str> = original
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for kind in [
        "ChatProviderCallRetrying",
        "ChatToolArgumentsDelta",
        "ChatRunFailed",
    ] {
        assert!(names.contains(&kind), "{kind} in {names:?}");
    }
    assert_eq!(runs_of(&timeline.events("replayed")), original);
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

/// The events of a session's runs (from its first user message to its last run's end), each
/// as `{name, payload}` with what differs between two sessions left out: ids, times,
/// ordinals and durations.
fn runs_of(events: &[reel_engine::LogEntry]) -> Vec<Value> {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|key, _| {
                    !(key.ends_with("Id") || key.ends_with("Ms") || key.ends_with("Ordinal"))
                });
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let first = events
        .iter()
        .position(|e| e.name() == "ChatUserMessageAccepted")
        .unwrap();
    let last = events
        .iter()
        .rposition(|e| {
            matches!(
                e.name(),
                "ChatRunFinished" | "ChatRunStopped" | "ChatRunFailed"
            )
        })
        .unwrap();
    events[first..=last]
        .iter()
        .map(|e| {
            let mut payload = serde_json::to_value(&e.event).unwrap();
            strip(&mut payload);
            serde_json::json!({"name": e.name(), "payload": payload})
        })
        .collect()
}

/// `reel test`: a database of recorded sessions as a regression suite, with JUnit XML.
#[test]
fn reel_test_reruns_every_session_and_writes_junit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let noted = command(dir.path(), "a.yaml", "Be brief.", "noted", "");
    let filed = command(dir.path(), "b.yaml", "Be brief.", "filed", "");
    for (cmd, id) in [(&noted, "good"), (&filed, "bad")] {
        let (status, _, stderr) =
            reel(&["run-command", cmd, "--session-id", id, "--timeline-db", db]);
        assert_eq!(status, Some(0), "{stderr}");
    }
    let junit = dir.path().join("junit.xml");
    let (status, out, stderr) = reel(&[
        "test",
        "--all",
        "--command",
        &noted,
        "--junit",
        junit.to_str().unwrap(),
        "--timeline-db",
        db,
    ]);
    assert_eq!(status, Some(1), "{out}{stderr}");
    assert!(out.contains("FAIL bad: turn 1: tool result 1"), "{out}");
    assert!(out.contains("PASS good\n"), "{out}");
    assert!(out.ends_with("2 sessions: 1 passed, 1 failed\n"), "{out}");

    // The XML parses, with one failure naming the divergence.
    let checked = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as ET\n\
             suite = ET.parse(sys.argv[1]).getroot().find('testsuite')\n\
             failures = [c for c in suite if c.find('failure') is not None]\n\
             print(suite.get('tests'), len(failures), failures[0].get('name'), failures[0].find('failure').get('message'))",
            junit.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(seen.starts_with("2 1 bad turn 1: tool result 1"), "{seen}");

    // The passing re-run is gone again; the diverging one is kept, for reel diff.
    let (_, listed, _) = reel(&["sessions", "--json", "--timeline-db", db]);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.iter().any(|id| id.starts_with("bad.test-")), "{ids:?}");
}

/// `--model live`: the command's model answers again (here another script): an evaluation,
/// not a check. It runs to the end and reports every turn's differences, the same ones
/// `reel diff` lists for the two sessions.
#[test]
fn a_live_rerun_runs_to_the_end_and_reports_every_difference() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let original = command(dir.path(), "a.yaml", "Be brief.", "noted", "");
    for resume in [false, true] {
        let mut args = vec![
            "run-command",
            &original,
            "--session-id",
            "orig",
            "--timeline-db",
            db,
        ];
        if resume {
            args.push("--resume");
        }
        let (status, _, stderr) = reel(&args);
        assert_eq!(status, Some(0), "{stderr}");
    }
    // Another model: it answers every call in other words.
    let other = tempfile::tempdir().unwrap();
    let live = write_file(
        other.path(),
        "script.yaml",
        "turns:\n  - - text: \"Noting. \"\n    - tool_call: {id: c1, name: note, arguments: {what: milk}}\n  - - text: \"Done.\"\n  - - text: \"Noting again. \"\n    - tool_call: {id: c2, name: note, arguments: {what: milk}}\n  - - text: \"Done again.\"\n",
    );
    let text = std::fs::read_to_string(&original).unwrap();
    let script_line = text.lines().find(|l| l.contains("script:")).unwrap();
    let live_command = write_file(
        other.path(),
        "live.yaml",
        &text.replace(script_line, &format!("  script: {live}")),
    );
    let (status, out, stderr) = reel(&[
        "rerun",
        "orig",
        "--command",
        &live_command,
        "--model",
        "live",
        "--session-id",
        "evaluated",
        "--format",
        "json",
        "--timeline-db",
        db,
    ]);
    assert_eq!(status, Some(3), "{out}{stderr}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["turns"], 2, "it ran to the end");
    let found: Vec<(u64, String)> = report["divergences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["turn"].as_u64().unwrap(),
                d["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(found.contains(&(1, "text".into())), "{found:?}");
    assert!(found.contains(&(2, "text".into())), "{found:?}");

    let (status, diffed, _) = reel(&[
        "diff",
        "orig",
        "evaluated",
        "--format",
        "json",
        "--timeline-db",
        db,
    ]);
    assert_eq!(status, Some(1));
    let diffed: Value = serde_json::from_str(&diffed).unwrap();
    let listed: Vec<(u64, String)> = diffed["differing"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|turn| {
            let n = turn["turn"].as_u64().unwrap();
            turn["differences"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |d| (n, d["field"].as_str().unwrap().to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(listed, found, "reel diff lists the same differences");
}

/// A session whose context was compacted in a run re-runs the same: the compaction happens
/// again where the context policy says, its summary answered as recorded.
#[test]
fn a_session_with_a_compaction_reruns_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let words = "tell me about the weather in the mountains this weekend and whether I should bring a coat ".repeat(2);
    let cmd = write_file(
        dir.path(),
        "c.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: {words}\ncontext: {{window_tokens: 400, compact_at: 0.5, keep_recent_turns: 1}}\n"
        ),
    );
    for resume in [false, true, true, true] {
        let mut args = vec![
            "run-command",
            &cmd,
            "--session-id",
            "long",
            "--timeline-db",
            db,
        ];
        if resume {
            args.push("--resume");
        }
        let (status, _, stderr) = reel(&args);
        assert_eq!(status, Some(0), "{stderr}");
    }
    let compacted = reel_tests::TimelineDb::open(std::path::Path::new(db))
        .events("long")
        .iter()
        .filter(|e| matches!(e.event, reel_proto::Any::ChatContextCompacted(_)))
        .count();
    assert!(compacted > 0, "the window forced a compaction");
    let (status, out, stderr) = reel(&["rerun", "long", "--command", &cmd, "--timeline-db", db]);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert!(out.contains("re-ran 4 turns of long the same way"), "{out}");
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

/// A session recorded before the log said what each model call was sent: a capture
/// (`--debug-events-jsonl`) written by reel at bc2a7d4, the commit before
/// `ChatProviderCallStarted.request`, with the command it ran (tests/fixtures/pre-fingerprint).
/// Rebuilt with `reel replay`, it re-runs, each call answered as recorded, and the report says
/// how many requests were not compared; a tool that answers otherwise is still found.
#[test]
fn a_session_recorded_before_request_fingerprints_reruns_and_says_what_was_not_compared() {
    let fixture = reel_tests::repo_root().join("tests/fixtures/pre-fingerprint");
    let capture = fixture.join("capture.jsonl");
    let captured = std::fs::read_to_string(&capture).unwrap();
    assert!(captured.contains("ChatProviderCallStarted"));
    assert!(
        !captured.contains("\"request\":"),
        "the capture predates request fingerprints"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (status, _, stderr) = reel(&[
        "replay",
        capture.to_str().unwrap(),
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let command = fixture.join("command.yaml");
    let (status, out, stderr) = rerun_of("old", command.to_str().unwrap(), &db);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert!(
        out.starts_with("not compared: the requests of 2 model calls"),
        "{out}"
    );
    assert!(
        out.ends_with("re-ran 1 turns of old the same way\n"),
        "{out}"
    );

    let text = std::fs::read_to_string(&command).unwrap();
    let filed = write_file(
        dir.path(),
        "filed.yaml",
        &text
            .replace("echo noted", "echo filed")
            .replace("script.yaml", fixture.join("script.yaml").to_str().unwrap()),
    );
    let (status, out, _) = reel(&[
        "rerun",
        "old",
        "--command",
        &filed,
        "--format",
        "json",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(3), "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["divergences"][0]["kind"], "tool result 1");
    assert_eq!(report["requests_not_compared"], 2, "{report}");
}
