//! Command tools as processes: what environment they get, what happens to them when reel is
//! told to stop by its terminal going away (SIGHUP), and how a tool that cannot run shows in
//! text mode.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use reel_tests::{parse_frames, reel, write_file};

/// A command file whose script calls `tool` once, then answers.
fn command(dir: &Path, tool: &str) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - tool_call: {id: call_1, name: probe}\n  - - text: answered\n",
    );
    write_file(
        dir,
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\ntools:\n  - name: probe\n    description: A probe.\n{tool}"
        ),
    )
}

fn tool_result(stdout: &[u8]) -> serde_json::Value {
    parse_frames(stdout)
        .iter()
        .find(|f| f.ui_name() == Some("ChatToolResultReady"))
        .map(|f| f.json["uiEvent"]["payload"].clone())
        .expect("a tool result")
}

#[test]
fn a_tool_sees_only_the_variables_it_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "    executor:\n      command: [env]\n    env: [REEL_TOOL_ALLOWED]\n",
    );
    let output = reel(&["run-command", &cmd, "--rpc"])
        .env("AWS_SECRET_ACCESS_KEY", "cloud-secret")
        .env("DATABASE_PASSWORD", "db-secret")
        .env("OPENAI_API_KEY", "provider-secret")
        .env("REEL_TOOL_ALLOWED", "yes")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result = tool_result(&output.stdout);
    let env = result["result"].as_str().unwrap();
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TERM",
                "TMPDIR",
                "REEL_TOOL_ALLOWED",
                // Which call it runs (see the test below): reel's own, no secret.
                "REEL_SESSION_ID",
                "REEL_RUN_ID",
                "REEL_TOOL_CALL_ID",
                "REEL_IDEMPOTENCY_KEY",
            ]
            .contains(name),
            "{name} reached the tool: {env}"
        );
    }
    assert!(
        env.contains("REEL_TOOL_ALLOWED=yes") && env.contains("LANG=C.UTF-8"),
        "{env}"
    );
    assert!(!env.contains("secret"), "{env}");
}

/// A tool is told which call it runs: the session, the run, the model's id of the call, and an
/// idempotency key that is the session and the ordinal of the call's request (the same when
/// the call is run again, different for every call).
#[test]
fn a_tool_is_told_its_call_and_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "    executor:\n      command: [sh, -c, 'printf \"%s %s %s %s\" \"$REEL_SESSION_ID\" \"$REEL_RUN_ID\" \"$REEL_TOOL_CALL_ID\" \"$REEL_IDEMPOTENCY_KEY\"']\n",
    );
    let db = dir.path().join("t.db");
    let run = |resume: bool| {
        let mut args = vec!["run-command", &cmd, "--rpc", "--include-backend-events"];
        args.extend([
            "--session-id",
            "keys",
            "--timeline-db",
            db.to_str().unwrap(),
        ]);
        if resume {
            args.push("--resume");
        }
        let output = reel(&args).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let frames = parse_frames(&output.stdout);
        let backend = |name: &str| {
            frames
                .iter()
                .find(|f| f.json["backendEvent"]["name"] == name)
                .map(|f| f.json["backendEvent"].clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let requested = backend("ChatToolCallRequested");
        let run_id = backend("ChatRunStarted")["payload"]["correlation"]["runId"].clone();
        let said = tool_result(&output.stdout)["result"]
            .as_str()
            .unwrap()
            .to_owned();
        let ordinal = requested["ordinal"].as_str().unwrap().to_owned();
        (said, run_id.as_str().unwrap().to_owned(), ordinal)
    };
    let (first, first_run, first_ordinal) = run(false);
    assert_eq!(
        first,
        format!("keys {first_run} call_1 keys:{first_ordinal}")
    );
    // The same script in a second run of the session: another call, another key.
    let (second, second_run, second_ordinal) = run(true);
    assert_ne!(first_ordinal, second_ordinal);
    assert_eq!(
        second,
        format!("keys {second_run} call_1 keys:{second_ordinal}")
    );
}

#[test]
fn a_tool_may_not_ask_for_the_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "    executor:\n      command: [env]\n    env: [OPENAI_API_KEY]\n",
    );
    let output = reel(&[
        "run-command",
        &cmd,
        "--rpc",
        "--provider",
        "openai",
        "--model",
        "m",
    ])
    .env("OPENAI_API_KEY", "sk-not-used")
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tools never see the key"), "{stderr}");
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_hangup_stops_the_run_like_sigterm_and_the_tool_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    let cmd = command(
        dir.path(),
        &format!(
            "    executor:\n      command: [sh, -c, \"sleep 30 & echo $! > {}; wait\"]\n",
            pidfile.display()
        ),
    );
    let child = reel(&["run-command", &cmd, "--rpc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sleeper = None;
    wait_for("the tool started", || {
        sleeper = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        sleeper.is_some()
    });
    let sleeper = sleeper.unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(129),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let frames = parse_frames(&output.stdout);
    reel_tests::assert_stream_shape(&frames);
    assert_eq!(frames.last().unwrap().done_status(), Some("stopped"));
    assert!(frames.iter().any(|f| f.ui_name() == Some("ChatRunStopped")));
    wait_for("the tool's child was stopped with the run", || {
        reel_tests::process_gone(sleeper)
    });
}

#[test]
fn a_tool_that_cannot_run_is_reported_on_stderr_in_text_mode() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "    executor:\n      command: [/nonexistent/tool]\n",
    );
    let output = reel(&["run-command", &cmd]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "answered");
    assert!(
        stderr.contains("tool \"probe\" failed") && stderr.contains("cannot start"),
        "{stderr}"
    );
}
