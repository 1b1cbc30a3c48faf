//! Budgets through the real binary: each kind stops the run at the right model call with
//! `ChatRunFinished{status: budget_exceeded}`, a non-terminal error frame and a stderr line;
//! a resumed session keeps what it spent; a session past its budget refuses a submit.

use std::path::Path;

use reel_tests::{FrameLine, assert_request_scoped, parse_frames, stored::Backend, write_file};

/// Three model calls if nothing stops them: two tool rounds, then an answer. Each call reports
/// 100 input and 10 output tokens.
const THREE_CALLS: &str = "turns:
  - - usage: {input_tokens: 100, output_tokens: 10}
    - tool_call: {id: c1, name: echo, arguments: {}}
  - - usage: {input_tokens: 100, output_tokens: 10}
    - tool_call: {id: c2, name: echo, arguments: {}}
  - - usage: {input_tokens: 100, output_tokens: 10}
    - text: done
";

fn command(dir: &Path, extra: &str) -> String {
    let script = write_file(dir, "script.yaml", THREE_CALLS);
    let tool = write_file(dir, "echo.sh", "#!/bin/sh\ncat\n");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\n  pricing: {{input_per_mtok: 1000.0, output_per_mtok: 1000.0}}\ntools:\n  - name: echo\n    executor: {{command: [{tool}]}}\n{extra}"
        ),
    )
}

/// Runs one prompt with `flags`; returns the frames, stderr and exit code.
fn one_shot(command: &str, flags: &[&str]) -> (Vec<FrameLine>, String, i32) {
    let mut args = vec!["run-command", command, "--rpc"];
    args.extend(flags);
    let output = reel_tests::run(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (
        parse_frames(&output.stdout),
        stderr,
        output.status.code().unwrap(),
    )
}

fn calls(frames: &[FrameLine]) -> usize {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatProviderCallStarted"))
        .count()
}

fn run_finished(frames: &[FrameLine]) -> &serde_json::Value {
    let finished = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatRunFinished"))
        .expect("the run finished");
    &finished.json["uiEvent"]["payload"]
}

fn error(frames: &[FrameLine]) -> &serde_json::Value {
    frames
        .iter()
        .find_map(|f| f.json.get("error"))
        .expect("an error frame")
}

#[test]
fn each_kind_of_run_budget_stops_the_run_at_the_right_call() {
    let dir = tempfile::tempdir().unwrap();
    let command = command(dir.path(), "");
    // (flags, the calls made, the budget named). Tokens and cost are known after a call, so
    // the call that reaches a limit is the last one made.
    let cases: [(&[&str], usize, &str); 4] = [
        (&["--max-model-calls", "2"], 2, "max_model_calls"),
        (&["--max-input-tokens", "150"], 2, "max_input_tokens"),
        (&["--max-output-tokens", "10"], 1, "max_output_tokens"),
        // 110 tokens at $1000 per million: $0.11 a call.
        (&["--max-cost-usd", "0.2"], 2, "max_cost_usd"),
    ];
    for (flags, made, limit) in cases {
        let (frames, stderr, code) = one_shot(&command, flags);
        assert_eq!(calls(&frames), made, "{flags:?}");
        let finished = run_finished(&frames);
        assert_eq!(finished["status"], "budget_exceeded", "{flags:?}");
        assert!(
            finished["error"].as_str().unwrap().contains(limit),
            "{finished}"
        );
        let error = error(&frames);
        assert_eq!(error["code"], "budget_exceeded");
        assert_eq!(
            error.get("terminal"),
            None,
            "the error is not terminal: {error}"
        );
        assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
        assert!(stderr.contains(&format!("run budget {limit}")), "{stderr}");
        assert_eq!(code, 1, "a run cut short by a budget exits 1");
        // Every tool call the model made has its result: the context stays well formed.
        let results = frames
            .iter()
            .filter(|f| f.ui_name() == Some("ChatToolResultReady"))
            .count();
        let requested = frames
            .iter()
            .filter(|f| f.ui_name() == Some("ChatToolCallRequested"))
            .count();
        assert_eq!(results, requested);
    }
    let (frames, _, code) = one_shot(&command, &["--max-model-calls", "3"]);
    assert_eq!(
        (calls(&frames), code),
        (3, 0),
        "a budget that suffices changes nothing"
    );
    assert_eq!(run_finished(&frames)["status"], "finished");
}

#[test]
fn a_session_budget_survives_resume_and_refuses_a_submit_once_spent() {
    let dir = tempfile::tempdir().unwrap();
    let command = command(dir.path(), "budget:\n  session: {max_model_calls: 4}\n");
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    let mut client = backend.session_client(&command, "b");
    client.send(r#"{"requestId":"r1","submit":{"prompt":"one"}}"#);
    assert_eq!(client.done_of("r1"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_eq!(calls(&frames), 3);

    let mut resumed = backend.resumed_client(&command, "b", &[]);
    resumed.send(r#"{"requestId":"r2","submit":{"prompt":"two"}}"#);
    assert_eq!(resumed.done_of("r2"), "ok");
    resumed.send(r#"{"requestId":"r3","submit":{"prompt":"three"}}"#);
    assert_eq!(resumed.done_of("r3"), "failed");
    let (status, frames, stderr) = resumed.finish();
    assert!(status.success(), "{stderr}");
    assert_request_scoped(&frames);
    // The fourth call of the session was the last: the resumed process knew three were spent.
    assert_eq!(calls(&frames), 1);
    let finished = run_finished(&frames);
    assert_eq!(finished["status"], "budget_exceeded");
    assert!(
        finished["error"]
            .as_str()
            .unwrap()
            .contains("session budget max_model_calls")
    );
    let refused: Vec<&FrameLine> = frames
        .iter()
        .filter(|f| f.line.request_id == "r3")
        .collect();
    assert_eq!(refused.len(), 2, "refused: an error and done, no run");
    assert_eq!(refused[0].json["error"]["code"], "budget_exceeded");
}

#[test]
fn a_cost_budget_without_prices_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(
        dir.path(),
        "command.yaml",
        "name: t\ndescription: t\nprompt: go\n",
    );
    let (frames, stderr, code) = one_shot(&command, &["--max-cost-usd", "1"]);
    assert_eq!(code, 1);
    assert_eq!(calls(&frames), 0);
    let error = error(&frames);
    assert_eq!(error["code"], "runner_init_failed");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("provider.pricing"),
        "{error}"
    );
    assert!(stderr.contains("provider.pricing"), "{stderr}");
    let (frames, _, code) = one_shot(&command, &["--max-model-calls", "0"]);
    assert_eq!(
        (code, calls(&frames)),
        (2, 0),
        "a budget of no calls is a usage error"
    );
}
