//! A tool call whose process is killed in the middle of it, and what `on_interrupted` makes of
//! it when the session is opened again: `fail` (the default) records it interrupted and the
//! model reads that; `retry` (only for a tool declared `idempotent`) runs it again with the
//! same idempotency key; `ask` turns it into a durable approval a person decides.

use std::path::{Path, PathBuf};

use reel_tests::{FrameLine, RpcClient, approval_fixture::stored_rpc, write_file};

/// A command whose model calls `charge` once, then shows the conversation it was given. The
/// tool appends its idempotency key to `keys`, and the first time (no `first` file yet) hangs,
/// so that the test can kill reel in the middle of it. `extra` goes into its definition.
fn command(dir: &Path, extra: &str) -> (String, PathBuf) {
    let keys = dir.join("keys");
    let first = dir.join("first");
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: charge, arguments: {cents: 500}}\n  - - echo_context\n",
    );
    let tool = format!(
        "echo $REEL_IDEMPOTENCY_KEY >> {keys}; if [ -e {first} ]; then echo charged; else touch {first}; sleep 60; fi",
        keys = keys.display(),
        first = first.display()
    );
    let cmd = write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\ntools:\n  - name: charge\n    description: Charges a card.\n{extra}    executor:\n      command: [sh, -c, '{tool}']\n"
        ),
    );
    (cmd, keys)
}

fn keys(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn start(cmd: &str, db: &Path, resume: bool) -> RpcClient {
    stored_rpc(cmd, db, "pay", resume)
}

fn ui<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a FrameLine> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .collect()
}

/// Starts the run and kills reel with `kill -9` once the tool has started (its key is written).
fn kill_in_the_middle_of_the_call(cmd: &str, db: &Path, keys_file: &Path) {
    let mut client = start(cmd, db, false);
    client.send(r#"{"requestId":"s1","submit":{"prompt":"Charge it."}}"#);
    client.wait_for("the call's start", |f| {
        f.ui_name() == Some("ChatToolExecutionStarted")
    });
    for _ in 0..200 {
        if !keys(keys_file).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(keys(keys_file).len(), 1, "the tool started");
    let killed = std::process::Command::new("kill")
        .args(["-9", &client.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

#[test]
fn retry_runs_an_idempotent_call_again_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, keys_file) = command(
        dir.path(),
        "    idempotent: true\n    on_interrupted: retry\n",
    );
    let db = dir.path().join("t.db");
    kill_in_the_middle_of_the_call(&cmd, &db, &keys_file);

    let mut client = start(&cmd, &db, true);
    let finished = client.wait_for("the run's end", |f| f.ui_name() == Some("ChatRunFinished"));
    assert_eq!(finished.line.request_id, "");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    let keys = keys(&keys_file);
    assert_eq!(keys.len(), 2, "it ran twice: {keys:?}");
    assert_eq!(keys[0], keys[1], "with the same key");
    assert!(keys[0].starts_with("pay:"), "{keys:?}");
    let results = ui(&frames, "ChatToolResultReady");
    assert_eq!(results[0].json["uiEvent"]["payload"]["result"], "charged\n");
    assert!(ui(&frames, "ChatRunFailed").is_empty());
}

#[test]
fn fail_records_the_call_interrupted_and_does_not_run_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, keys_file) = command(dir.path(), "");
    let db = dir.path().join("t.db");
    kill_in_the_middle_of_the_call(&cmd, &db, &keys_file);

    let mut client = start(&cmd, &db, true);
    let failed = client.wait_for("the interrupted run's end", |f| {
        f.ui_name() == Some("ChatRunFailed")
    });
    assert_eq!(failed.json["uiEvent"]["payload"]["interrupted"], true);
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(keys(&keys_file).len(), 1, "it ran once");
    let results = ui(&frames, "ChatToolResultReady");
    assert!(
        results[0].json["uiEvent"]["payload"]["result"]
            .as_str()
            .unwrap()
            .starts_with("interrupted:"),
        "{:?}",
        results[0].text
    );
}

#[test]
fn ask_turns_the_call_into_a_durable_approval() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, keys_file) = command(dir.path(), "    on_interrupted: ask\n");
    let db = dir.path().join("t.db");
    kill_in_the_middle_of_the_call(&cmd, &db, &keys_file);

    let mut client = start(&cmd, &db, true);
    let asked = client.wait_for("the question", |f| {
        f.ui_name() == Some("ChatToolApprovalRequested")
    });
    assert_eq!(asked.json["uiEvent"]["payload"]["interrupted"], true);
    assert_eq!(
        keys(&keys_file).len(),
        1,
        "nothing runs before the decision"
    );
    client.send(r#"{"requestId":"a1","approve":{"callId":"c1","decision":"allow_once"}}"#);
    let done = client.done_of("a1");
    assert_eq!(
        done,
        "ok",
        "{:?}",
        client
            .frames_of("a1")
            .iter()
            .map(|f| &f.text)
            .collect::<Vec<_>>()
    );
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    let keys = keys(&keys_file);
    assert_eq!(keys.len(), 2, "allowed: it ran again, {keys:?}");
    assert_eq!(keys[0], keys[1]);
}

#[test]
fn retry_without_idempotent_is_a_setup_error() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = command(dir.path(), "    on_interrupted: retry\n");
    let output = reel_tests::run(&["run-command", &cmd]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("idempotent: true"), "{stderr}");
}
