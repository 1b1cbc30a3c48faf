//! `reel acp` driven by a real editor-side client: the official ACP TypeScript SDK
//! (tests/node/acp_client.mjs) over stdio, against the real binary and a real SQLite file.

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
};

use reel_proto::Any;
use reel_tests::{
    TimelineDb,
    acp_client::{
        acp_session, chunk_text, python_acp_session, step_results, update_kinds, updates,
    },
    reel_binary,
};
use serde_json::{Value, json};

/// The model's turns: a call of the tool, the answer, then a long reply (to be cancelled).
const SCRIPT: &str = r#"turns:
  - - text: "Let me check."
    - tool_call: {id: call_1, name: where_am_i, arguments: {detail: full}}
  - - text: "You are in the project."
  - - repeat: {times: 500, steps: [{text: "tick "}, {sleep_ms: 20}]}
"#;

/// Two tool loops, one after the other.
const TWICE: &str = r#"turns:
  - - tool_call: {id: call_1, name: where_am_i, arguments: {}}
  - - text: "First."
  - - tool_call: {id: call_2, name: where_am_i, arguments: {}}
  - - text: "Second."
"#;

/// A folder with the command file (its tool asks for approval and prints where it runs), the
/// database, and the project folder an editor opens.
fn fixture(script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.yaml"), script).unwrap();
    std::fs::create_dir(dir.path().join("project")).unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        format!(
            r#"name: agent
description: an editor's agent
prompt: unused
provider:
  script: {}
tools:
  - name: where_am_i
    description: Says where it runs.
    executor:
      command: [sh, -c, "cat > /dev/null; echo ran in $(pwd)"]
    approval: ask
"#,
            dir.path().join("script.yaml").display()
        ),
    )
    .unwrap();
    dir
}

fn args(dir: &Path) -> Vec<String> {
    vec![
        dir.join("agent.yaml").display().to_string(),
        "--timeline-db".into(),
        dir.join("t.db").display().to_string(),
    ]
}

fn run(scenario: Value, dir: &Path) -> Option<Value> {
    let args = args(dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = acp_session(&scenario, &args)?;
    assert_eq!(report["exit"]["code"], 0, "reel acp exits 0: {report}");
    Some(report)
}

fn events(dir: &Path, session_id: &str) -> Vec<Any> {
    let mut db = TimelineDb::open(&dir.join("t.db"));
    db.events(session_id).into_iter().map(|e| e.event).collect()
}

#[test]
fn an_editor_prompts_approves_cancels_and_loads_the_session_after_a_restart() {
    let dir = fixture(SCRIPT);
    let project = dir.path().join("project");
    let cwd = project.display().to_string();
    let Some(first) = run(
        json!({"permission": "allow_once", "steps": [
            {"do": "new", "cwd": cwd},
            {"do": "prompt", "text": "where?"},
            {"do": "prompt_and_cancel", "text": "and now?", "afterChunks": 5},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&first);
    let id = results[0]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        results[1]["result"]["stopReason"], "end_turn",
        "{results:?}"
    );
    assert_eq!(
        results[2]["result"]["stopReason"], "cancelled",
        "{results:?}"
    );

    // The tool asked first, with reel's three options, and ran in the editor's folder.
    let permissions = first["permissions"].as_array().unwrap();
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    let asked = &permissions[0]["request"];
    assert_eq!(asked["toolCall"]["toolCallId"], "call_1");
    let kinds: Vec<&str> = asked["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    let ran = format!("ran in {}", project.canonicalize().unwrap().display());
    let result_shown = updates(&first).iter().any(|u| {
        u["update"]["toolCallId"] == "call_1"
            && u["update"]["content"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.trim() == ran)
    });
    assert!(
        result_shown,
        "the tool's output reaches the editor: {first}"
    );
    let live_text = chunk_text(&first, "agent_message_chunk");
    assert!(live_text.starts_with("Let me check.You are in the project.tick "));
    assert!(!update_kinds(&first).contains(&"user_message_chunk".to_owned()));

    // The log holds the question, the answer, the directory, and the stopped run.
    let log = events(dir.path(), &id);
    match &log[0] {
        Any::ChatSessionConfigured(configured) => assert_eq!(configured.cwd, cwd),
        other => panic!("the first event is {}", other.type_name()),
    }
    let asked_at = log
        .iter()
        .position(|e| matches!(e, Any::ChatToolApprovalRequested(_)))
        .expect("the approval request is on the log");
    match &log[asked_at + 1] {
        Any::ChatToolApprovalDecided(decided) => assert_eq!(decided.decision, "allowed"),
        other => panic!("after the request comes {}", other.type_name()),
    }
    assert!(matches!(log.last(), Some(Any::ChatRunStopped(_))));

    // A new process loads it: the whole history comes back, then it goes on.
    let Some(second) = run(
        json!({"permission": "allow_once", "steps": [
            {"do": "load", "sessionId": id, "cwd": cwd},
            {"do": "prompt", "text": "once more"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&second);
    assert_eq!(results[0]["result"], json!({}), "{results:?}");
    assert_eq!(chunk_text(&second, "user_message_chunk"), "where?and now?");
    let replayed = chunk_text(&second, "agent_message_chunk");
    assert!(
        replayed.starts_with(&live_text),
        "the replay holds every chunk the editor saw live"
    );
    let finished = updates(&second)
        .iter()
        .any(|u| u["update"]["toolCallId"] == "call_1" && u["update"]["status"] == "completed");
    assert!(finished, "the replayed tool call ends completed");
    assert_eq!(
        results[1]["result"]["stopReason"], "end_turn",
        "{results:?}"
    );
    assert_eq!(second["permissions"].as_array().unwrap().len(), 1);
}

#[test]
fn a_rejected_call_is_not_run_and_allow_always_is_remembered() {
    let dir = fixture(TWICE);
    let cwd = dir.path().join("project").display().to_string();
    let Some(rejected) = run(
        json!({"permission": "reject_once", "steps": [
            {"do": "new", "cwd": cwd},
            {"do": "prompt", "text": "where?"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&rejected);
    assert_eq!(results[1]["result"]["stopReason"], "end_turn");
    let failed = updates(&rejected)
        .iter()
        .any(|u| u["update"]["toolCallId"] == "call_1" && u["update"]["status"] == "failed");
    assert!(failed, "a rejected call fails: {rejected}");
    let id = results[0]["result"]["sessionId"].as_str().unwrap();
    let never_ran = events(dir.path(), id).iter().all(|e| match e {
        Any::ChatToolResultReady(ready) => ready.result.contains("declined"),
        _ => true,
    });
    assert!(never_ran, "the model reads that the person declined");

    let Some(always) = run(
        json!({"permission": "allow_always", "steps": [
            {"do": "new", "cwd": cwd},
            {"do": "prompt", "text": "where?"},
            {"do": "prompt", "text": "and again?"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    assert_eq!(always["permissions"].as_array().unwrap().len(), 1);
    let id = step_results(&always)[0]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let decisions: Vec<(String, bool, bool)> = events(dir.path(), &id)
        .into_iter()
        .filter_map(|e| match e {
            Any::ChatToolApprovalDecided(d) => Some((d.decision, d.always, d.remembered)),
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        [
            ("allowed".into(), true, false),
            ("allowed".into(), true, true)
        ]
    );
    assert_eq!(chunk_text(&always, "agent_message_chunk"), "First.Second.");

    // "Allow always" is on the log: a new process that loads the session does not ask again.
    let Some(reloaded) = run(
        json!({"permission": "reject_once", "steps": [
            {"do": "load", "sessionId": id, "cwd": cwd},
            {"do": "prompt", "text": "once more?"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    assert_eq!(reloaded["permissions"], json!([]), "{reloaded}");
    let last = events(dir.path(), &id)
        .into_iter()
        .rev()
        .find_map(|e| match e {
            Any::ChatToolApprovalDecided(d) => Some((d.decision, d.always, d.remembered)),
            _ => None,
        });
    assert_eq!(last, Some(("allowed".into(), true, true)));
}

#[test]
fn sessions_of_run_command_are_listed_and_load_in_an_editor() {
    let dir = fixture(SCRIPT);
    let db = dir.path().join("t.db");
    let made = Command::new(reel_binary())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run-command",
            "../examples/weather-tool.yaml",
            "--session-id",
            "made",
        ])
        .arg("--timeline-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let Some(report) = run(
        json!({"steps": [
            {"do": "list"},
            {"do": "load", "sessionId": "made", "cwd": "/"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&report);
    let listed = &results[0]["result"]["sessions"];
    assert_eq!(listed[0]["sessionId"], "made", "{listed}");
    assert_eq!(listed[0]["title"], "What is the weather in Paris?");
    assert!(listed[0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        chunk_text(&report, "user_message_chunk"),
        "What is the weather in Paris?"
    );
    assert_eq!(
        chunk_text(&report, "agent_message_chunk"),
        "Let me check the forecast.It is sunny in Paris, 21 °C."
    );
    assert_eq!(
        chunk_text(&report, "agent_thought_chunk"),
        "I should look this up."
    );
}

/// Sends `line`, and returns the agent's answer to request `id` (skipping notifications).
fn exchange(
    stdin: &mut impl Write,
    stdout: &mut impl BufRead,
    line: &str,
    id: Option<u64>,
) -> Value {
    writeln!(stdin, "{line}").unwrap();
    stdin.flush().unwrap();
    loop {
        let mut answer = String::new();
        assert!(
            stdout.read_line(&mut answer).unwrap() > 0,
            "the agent ended"
        );
        let answer: Value = serde_json::from_str(&answer).unwrap();
        if answer["id"] == json!(id) {
            return answer;
        }
    }
}

#[test]
fn malformed_json_rpc_gets_json_rpc_errors_and_the_agent_goes_on() {
    let dir = fixture(SCRIPT);
    let mut child = Command::new(reel_binary())
        .arg("acp")
        .args(args(dir.path()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |line: &str, id: Option<u64>| exchange(&mut stdin, &mut stdout, line, id);
    let init = send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
        Some(1),
    );
    assert_eq!(init["result"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(send("{not json", None)["error"]["code"], -32700);
    let unknown = r#"{"jsonrpc":"2.0","id":2,"method":"no/such","params":{}}"#;
    assert_eq!(send(unknown, Some(2))["error"]["code"], -32601);
    let unloaded = r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}"#;
    assert_eq!(send(unloaded, Some(3))["error"]["code"], -32002);
    let relative = r#"{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"relative","mcpServers":[]}}"#;
    assert_eq!(send(relative, Some(4))["error"]["code"], -32602);
    let missing = r#"{"jsonrpc":"2.0","id":5,"method":"session/load","params":{"sessionId":"nope","cwd":"/","mcpServers":[]}}"#;
    assert_eq!(send(missing, Some(5))["error"]["code"], -32002);
    let new =
        r#"{"jsonrpc":"2.0","id":6,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#;
    let id = send(new, Some(6))["result"]["sessionId"].clone();
    let image = json!({"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId": id,
        "prompt":[{"type":"image","data":"AA==","mimeType":"image/png"}]}});
    assert_eq!(send(&image.to_string(), Some(7))["error"]["code"], -32602);
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_python_sdk_client_prompts_and_loads_the_session() {
    let dir = fixture(SCRIPT);
    let project = dir.path().join("project");
    let args = args(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(report) = python_acp_session(&project, &args) else {
        return;
    };
    assert_eq!(report["protocolVersion"], 1);
    assert_eq!(report["loadSession"], true);
    assert_eq!(report["stopReason"], "end_turn", "{report}");
    assert_eq!(
        report["permissions"],
        json!([["allow_once", "allow_always", "reject_once"]])
    );
    let text = |updates: &Value, kind: &str| -> String {
        updates
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["sessionUpdate"] == kind)
            .map(|u| u["content"]["text"].as_str().unwrap())
            .collect()
    };
    let live = text(&report["live"], "agent_message_chunk");
    assert_eq!(live, "Let me check.You are in the project.");
    assert_eq!(text(&report["replayed"], "agent_message_chunk"), live);
    assert_eq!(text(&report["replayed"], "user_message_chunk"), "where?");
    let completed = report["replayed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["toolCallId"] == "call_1" && u["status"] == "completed");
    assert!(completed, "{report}");
}

#[test]
fn a_session_forks_resumes_and_closes() {
    let dir = fixture(TWICE);
    let cwd = dir.path().join("project").display().to_string();
    let Some(first) = run(
        json!({"steps": [
            {"do": "new", "cwd": cwd},
            {"do": "prompt", "text": "where?"},
            {"do": "fork", "cwd": cwd},
            {"do": "prompt", "text": "and in the fork?"},
            {"do": "close"},
            {"do": "prompt", "text": "closed?"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&first);
    let source = results[0]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let fork = results[2]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(source, fork);
    assert_eq!(
        results[3]["result"]["stopReason"], "end_turn",
        "{results:?}"
    );
    assert_eq!(results[4]["result"], json!({}), "{results:?}");
    assert_eq!(
        results[5]["error"]["code"], -32002,
        "a closed session: {results:?}"
    );
    assert_eq!(chunk_text(&first, "agent_message_chunk"), "First.Second.");

    // The fork's log starts with the source's whole history, then goes its own way.
    let names = |events: Vec<Any>| -> Vec<String> {
        events.iter().map(|e| e.type_name().to_owned()).collect()
    };
    let source_events = names(events(dir.path(), &source));
    let fork_events = events(dir.path(), &fork);
    assert!(names(fork_events.clone()).starts_with(&source_events));
    let own_prompt = fork_events
        .iter()
        .any(|e| matches!(e, Any::ChatUserMessageAccepted(m) if m.text == "and in the fork?"));
    assert!(own_prompt && fork_events.len() > source_events.len());

    // Resumed in a new process: no replay, and prompts go on.
    let Some(resumed) = run(
        json!({"steps": [
            {"do": "resume", "sessionId": source, "cwd": cwd},
            {"do": "prompt", "text": "back"},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let results = step_results(&resumed);
    assert_eq!(results[0]["result"], json!({}), "{results:?}");
    assert_eq!(
        results[1]["result"]["stopReason"], "end_turn",
        "{results:?}"
    );
    assert!(!update_kinds(&resumed).contains(&"user_message_chunk".to_owned()));
}

/// A session whose run waits for a person (its stdin-RPC process ended while it asked): when
/// an editor loads it, the agent asks the editor (`session/request_permission`), and the
/// answer continues the same run.
#[test]
fn loading_a_session_that_waits_for_a_person_asks_the_editor() {
    let dir = fixture(SCRIPT);
    let db = dir.path().join("t.db");
    let mut rpc = reel_tests::RpcClient::start(&[
        "run-command",
        dir.path().join("agent.yaml").to_str().unwrap(),
        "--rpc",
        "--stdin-rpc",
        "--timeline-db",
        db.to_str().unwrap(),
        "--session-id",
        "waits",
    ]);
    rpc.send(r#"{"requestId":"s1","submit":{"prompt":"Where are you?"}}"#);
    rpc.wait_for("the question", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    rpc.close_stdin();
    assert_eq!(rpc.done_of("s1"), "waiting");
    let (status, _, stderr) = rpc.finish();
    assert!(status.success(), "{stderr}");

    let cwd = dir.path().join("project").display().to_string();
    let Some(report) = run(
        json!({"permission": "allow_once", "steps": [
            {"do": "load", "sessionId": "waits", "cwd": cwd},
            {"do": "wait_chunks", "count": 2},
        ]}),
        dir.path(),
    ) else {
        return;
    };
    let permissions = report["permissions"].as_array().unwrap();
    assert_eq!(permissions.len(), 1, "{report}");
    assert_eq!(
        permissions[0]["request"]["toolCall"]["toolCallId"],
        "call_1"
    );
    // The replay's words, then the run's answer once the tool ran.
    assert_eq!(
        chunk_text(&report, "agent_message_chunk"),
        "Let me check.You are in the project."
    );
    let events = events(dir.path(), "waits");
    let started: Vec<&Any> = events
        .iter()
        .filter(|e| matches!(e, Any::ChatRunStarted(_)))
        .collect();
    assert_eq!(started.len(), 1, "the same run goes on");
    let decided = events.iter().find_map(|e| match e {
        Any::ChatToolApprovalDecided(d) => Some(d.decision.clone()),
        _ => None,
    });
    assert_eq!(decided.as_deref(), Some("allowed"));
    let result = events.iter().find_map(|e| match e {
        Any::ChatToolResultReady(r) => Some(r.result.clone()),
        _ => None,
    });
    assert!(result.unwrap().starts_with("ran in "), "the call ran");
    // Its start is on the log once decided: a crash now would not ask again.
    let starts = events
        .iter()
        .filter(|e| matches!(e, Any::ChatToolExecutionStarted(_)))
        .count();
    assert_eq!(starts, 1);
    assert!(
        events.iter().any(|e| matches!(e, Any::ChatRunFinished(_))),
        "the run ended"
    );
}
