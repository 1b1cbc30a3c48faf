//! reel as an MCP client, against a real MCP server on the official Python SDK
//! (tests/python/mcp_server.py, PyPI `mcp`) over stdio: its tools in the toolbox, their calls
//! on the log, a cancelled call cancelled on the server, a server that dies mid-call, one that
//! never starts; and the servers an editor hands over through ACP.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use reel_proto::Any;
use reel_tests::{
    RpcClient, TimelineDb,
    acp_client::{acp_session, step_results, updates},
    mcp_server::{HttpMcpServer, mcp_server_command},
    reel_binary, write_file,
};
use serde_json::json;

/// A command file running the scripted `turns` with the test MCP server (`command`, or the
/// real one) as server `test`; `None` when the real one's package cannot be had (said).
fn command_file(dir: &Path, turns: &str, command: Option<Vec<String>>) -> Option<String> {
    let script = write_file(dir, "script.yaml", &format!("turns:\n{turns}"));
    let command = match command {
        Some(command) => command,
        None => mcp_server_command()?,
    };
    let command = serde_json::to_string(&command).unwrap();
    let file = write_file(
        dir,
        "mcp.yaml",
        &format!(
            "name: mcp\ndescription: MCP tools\nprompt: use the tools\nprovider:\n  script: {script}\nmcp_servers:\n  - name: test\n    command: {command}\n"
        ),
    );
    Some(file)
}

/// Waits up to 20 s for the file at `path`; panics with `never` without it.
fn wait_for_file(path: &Path, never: &str) {
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "{never}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `command` once as session `id` in `dir`'s database.
fn run_stored(dir: &Path, command: &str, id: &str) -> std::process::Output {
    Command::new(reel_binary())
        .args(["run-command", command, "--session-id", id, "--timeline-db"])
        .arg(dir.join("t.db"))
        .output()
        .unwrap()
}

fn stored(dir: &Path, id: &str) -> Vec<Any> {
    let mut db = TimelineDb::open(&dir.join("t.db"));
    db.events(id).into_iter().map(|e| e.event).collect()
}

fn results(events: &[Any]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            Any::ChatToolResultReady(r) => Some((r.result.clone(), r.is_error)),
            _ => None,
        })
        .collect()
}

/// An MCP call says which call it is in its `_meta`, its idempotency key among it: the session
/// and the ordinal of the call's request, as a command tool's `REEL_IDEMPOTENCY_KEY` is.
#[test]
fn an_mcp_call_carries_its_idempotency_key_in_its_meta() {
    let dir = tempfile::tempdir().unwrap();
    let Some(command) = command_file(
        dir.path(),
        "  - - tool_call: {id: c1, name: test__whoami, arguments: {}}\n  - - text: done\n",
        None,
    ) else {
        return;
    };
    let run = run_stored(dir.path(), &command, "w1");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = TimelineDb::open(&dir.path().join("t.db")).events("w1");
    let (ordinal, run_id) = events
        .iter()
        .find_map(|e| match &e.event {
            Any::ChatToolCallRequested(r) => {
                Some((e.ordinal, r.correlation.clone().unwrap().run_id))
            }
            _ => None,
        })
        .expect("the call was requested");
    let result = results(&events.into_iter().map(|e| e.event).collect::<Vec<_>>());
    assert_eq!(result.len(), 1, "{result:?}");
    // The tool's text, then its structured content.
    let text = result[0].0.lines().next().unwrap_or_default();
    let meta: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        meta,
        json!({
            "reel/idempotencyKey": format!("w1:{ordinal}"),
            "reel/runId": run_id,
            "reel/sessionId": "w1",
            "reel/toolCallId": "c1",
        })
    );
}

#[test]
fn an_mcp_servers_tools_are_called_and_listed_on_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let Some(command) = command_file(
        dir.path(),
        "  - - tool_call: {id: c1, name: test__echo, arguments: {text: hello}}\n    - tool_call: {id: c2, name: test__add, arguments: {a: 2, b: 3}}\n  - - text: done\n",
        None,
    ) else {
        return;
    };
    let run = run_stored(dir.path(), &command, "m1");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = stored(dir.path(), "m1");
    let listed = events
        .iter()
        .find_map(|e| match e {
            Any::ChatToolServersStarted(started) => Some(started.clone()),
            _ => None,
        })
        .expect("the servers are listed on the log");
    let server = &listed.servers[0];
    assert_eq!(
        (server.name.as_str(), server.transport.as_str()),
        ("test", "stdio")
    );
    assert!(server.error.is_empty(), "{}", server.error);
    let names: Vec<&str> = server.tools.iter().map(|t| t.name.as_str()).collect();
    for tool in [
        "test__echo",
        "test__add",
        "test__slow",
        "test__crash",
        "test__whoami",
    ] {
        assert!(names.contains(&tool), "{names:?}");
    }
    let echo = server
        .tools
        .iter()
        .find(|t| t.name == "test__echo")
        .unwrap();
    assert_eq!(echo.server_name, "echo");
    assert!(echo.parameters.contains("\"text\""), "{}", echo.parameters);
    // Text and structured content are both kept. Both calls run at once: their results come
    // in the order they finish.
    let results = results(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    let echo = results.iter().find(|r| r.0.starts_with("hello"));
    assert!(echo.is_some_and(|r| !r.1), "{results:?}");
    let sum = results.iter().find(|r| r.0.starts_with('5'));
    assert!(
        sum.is_some_and(|r| r.0.contains("\"result\":5")),
        "{results:?}"
    );
    assert!(matches!(events.last(), Some(Any::ChatRunFinished(_))));
}

#[test]
fn a_stopped_run_cancels_its_call_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled.txt");
    let call = json!({"seconds": 60, "marker": marker}).to_string();
    let Some(command) = command_file(
        dir.path(),
        &format!("  - - tool_call: {{id: c1, name: test__slow, arguments: {call}}}\n"),
        None,
    ) else {
        return;
    };
    let mut client = RpcClient::start(&["run-command", &command, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"go","submit":{"prompt":"wait"}}"#);
    client.wait_for("the call's start", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    // Cancelled once the server runs the tool: a cancellation that reaches the Python SDK
    // before the tool's function starts stops the call before it runs, and nothing writes the
    // marker (what a busy machine once did to this test).
    wait_for_file(
        &dir.path().join("cancelled.txt.started"),
        "the server never started the call",
    );
    client.send(r#"{"requestId":"stop","cancel":{}}"#);
    assert_eq!(client.done_of("go"), "stopped");
    wait_for_file(&marker, "the server never heard of the cancellation");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled");
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_server_that_dies_mid_call_is_an_error_result_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let Some(command) = command_file(
        dir.path(),
        "  - - tool_call: {id: c1, name: test__crash, arguments: {}}\n  - - text: it broke\n",
        None,
    ) else {
        return;
    };
    let run = run_stored(dir.path(), &command, "m2");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = stored(dir.path(), "m2");
    let results = results(&events);
    assert_eq!(results.len(), 1);
    assert!(results[0].1, "an error result: {results:?}");
    assert!(
        results[0].0.contains("MCP server test failed"),
        "{results:?}"
    );
    assert!(matches!(events.last(), Some(Any::ChatRunFinished(_))));
}

#[test]
fn a_server_that_cannot_start_is_left_out_with_its_error_on_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let missing = vec!["/nonexistent/mcp-server".to_owned()];
    let Some(command) = command_file(dir.path(), "  - - text: no tools\n", Some(missing)) else {
        return;
    };
    let run = run_stored(dir.path(), &command, "m3");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("MCP server test left out"), "{stderr}");
    let events = stored(dir.path(), "m3");
    let error = events.iter().find_map(|e| match e {
        Any::ChatToolServersStarted(started) => Some(started.servers[0].error.clone()),
        _ => None,
    });
    assert!(
        error.is_some_and(|e| e.contains("/nonexistent/mcp-server")),
        "{events:?}"
    );
}

#[test]
fn an_editors_mcp_servers_join_an_acp_session() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: editor__echo, arguments: {text: from the editor}}\n  - - text: ok\n",
    );
    let command = write_file(
        dir.path(),
        "agent.yaml",
        &format!(
            "name: agent\ndescription: agent\nprompt: unused\nprovider:\n  script: {script}\n"
        ),
    );
    let Some(server) = mcp_server_command() else {
        return;
    };
    let db = dir.path().join("t.db").display().to_string();
    let cwd = dir.path().display().to_string();
    let Some(report) = acp_session(
        &json!({"steps": [
            {"do": "new", "cwd": cwd, "mcpServers": [
                {"name": "editor", "command": server[0], "args": [server[1]], "env": []},
            ]},
            {"do": "prompt", "text": "echo"},
        ]}),
        &[&command, "--timeline-db", &db],
    ) else {
        return;
    };
    let results = step_results(&report);
    assert_eq!(results[1]["result"]["stopReason"], "end_turn", "{report}");
    let shown = updates(&report).iter().any(|u| {
        u["update"]["toolCallId"] == "c1"
            && u["update"]["content"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("from the editor"))
    });
    assert!(shown, "the MCP tool's result reaches the editor: {report}");
    let capabilities = &report["results"][0]["result"]["agentCapabilities"]["mcpCapabilities"];
    assert_eq!(capabilities["http"], true);
}

#[test]
fn a_streamable_http_servers_tools_are_called() {
    let Some(server) = HttpMcpServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: web__add, arguments: {a: 20, b: 22}}\n  - - text: done\n",
    );
    let command = write_file(
        dir.path(),
        "mcp.yaml",
        &format!(
            "name: mcp\ndescription: MCP tools\nprompt: add\nprovider:\n  script: {script}\nmcp_servers:\n  - name: web\n    url: {}\n",
            server.url
        ),
    );
    let run = run_stored(dir.path(), &command, "h1");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events = stored(dir.path(), "h1");
    let transport = events.iter().find_map(|e| match e {
        Any::ChatToolServersStarted(started) => Some(started.servers[0].transport.clone()),
        _ => None,
    });
    assert_eq!(transport.as_deref(), Some("http"));
    let results = results(&events);
    assert!(
        results[0].0.starts_with("42") && !results[0].1,
        "{results:?}"
    );
}
