//! Usage and cost: per model call (priced as the call's usage arrives), per run (its calls
//! together, tool rounds included) and per session (across runs, across resumes, also a
//! resume from the turns database alone), in the frames and in the turns database, on SQLite
//! and PostgreSQL.

use reel_tests::{
    FrameLine, parse_frames, reel,
    stored::{Backend, unique},
    write_file,
};
use serde_json::Value;

/// Two runs' worth of model calls: the first run calls a tool, so it makes two calls.
const SCRIPT: &str = "turns:
  - - tool_call: {id: call_1, name: echo, arguments: {x: 1}}
    - usage: {input_tokens: 1000, output_tokens: 100, cached_tokens: 200}
  - - text: \"done\"
    - usage: {input_tokens: 1500, output_tokens: 50}
  - - text: \"again\"
    - usage: {input_tokens: 2000, output_tokens: 10}
  - - text: \"from turns\"
    - usage: {input_tokens: 3000, output_tokens: 20}
";

/// US$ per million tokens: input 2, output 10, cached input 0.5.
const PRICING: &str =
    "  pricing: {input_per_mtok: 2.0, output_per_mtok: 10.0, cached_input_per_mtok: 0.5}\n";

fn command(dir: &std::path::Path) -> String {
    let script = write_file(dir, "script.yaml", SCRIPT);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\n{PRICING}tools:\n  - name: echo\n    description: Echoes.\n    executor:\n      command: [cat]\n"
        ),
    )
}

fn payloads<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// (input, output, cached, cost) of a UsageInfo payload.
fn usage(value: &Value) -> (i64, i64, i64, f64) {
    let n = |key: &str| value[key].as_i64().unwrap_or(0);
    (
        n("inputTokens"),
        n("outputTokens"),
        n("cachedTokens"),
        value["costUsd"].as_f64().unwrap_or(0.0),
    )
}

fn assert_usage(actual: (i64, i64, i64, f64), expected: (i64, i64, i64, f64)) {
    assert_eq!(
        (actual.0, actual.1, actual.2),
        (expected.0, expected.1, expected.2)
    );
    assert!(close(actual.3, expected.3), "{actual:?} vs {expected:?}");
}

// Costs: call 1 = (800 * 2 + 200 * 0.5 + 100 * 10) / 1e6; call 2 = (1500 * 2 + 50 * 10) / 1e6;
// call 3 = (2000 * 2 + 10 * 10) / 1e6; call 4 = (3000 * 2 + 20 * 10) / 1e6.
const CALL_1: f64 = 0.0027;
const CALL_2: f64 = 0.0035;
const CALL_3: f64 = 0.0041;
const CALL_4: f64 = 0.0062;

fn usage_and_cost_add_up_per_call_run_and_session(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path());
    let id = unique("usage");
    let turns = backend.turns_flags();
    let turns: Vec<&str> = turns.iter().map(String::as_str).collect();
    let mut args = vec!["run-command", &cmd, "--rpc", "--session-id", &id];
    args.extend(&turns);

    let first = backend.run(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let frames = parse_frames(&first.stdout);
    let calls = payloads(&frames, "ChatProviderCallFinished");
    assert_usage(usage(&calls[0]["usage"]), (1000, 100, 200, CALL_1));
    assert_usage(usage(&calls[1]["usage"]), (1500, 50, 0, CALL_2));
    let run = payloads(&frames, "ChatRunFinished")[0];
    let run_one = (2500, 150, 200, CALL_1 + CALL_2);
    assert_usage(usage(&run["usage"]), run_one);
    assert_usage(usage(&run["sessionUsage"]), run_one);

    args.push("--resume");
    let second = backend.run(&args);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let frames = parse_frames(&second.stdout);
    let run = payloads(&frames, "ChatRunFinished")[0];
    assert_usage(usage(&run["usage"]), (2000, 10, 0, CALL_3));
    let session_two = (4500, 160, 200, CALL_1 + CALL_2 + CALL_3);
    assert_usage(usage(&run["sessionUsage"]), session_two);

    // The turns database keeps both, per run.
    let rows = backend.turns_view().turn_usage(&id);
    assert_eq!(rows.len(), 2);
    assert_usage(rows[0].run, run_one);
    assert_usage(rows[0].session, run_one);
    assert_usage(rows[1].run, (2000, 10, 0, CALL_3));
    assert_usage(rows[1].session, session_two);

    // Resumed from the turns database alone, the session's total goes on from its last turn.
    let mut from_turns = vec![
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        &id,
        "--resume",
    ];
    from_turns.extend(&turns);
    let third = reel(&from_turns).output().unwrap();
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let frames = parse_frames(&third.stdout);
    let run = payloads(&frames, "ChatRunFinished")[0];
    let session_three = (7500, 180, 200, CALL_1 + CALL_2 + CALL_3 + CALL_4);
    assert_usage(usage(&run["sessionUsage"]), session_three);
    // Its turn is the newest: a later resume starts from it.
    let rows = backend.turns_view().turn_usage(&id);
    assert_eq!(rows.len(), 3);
    assert_usage(rows[2].session, session_three);
}

reel_tests::on_both_backends!(usage_and_cost_add_up_per_call_run_and_session);
