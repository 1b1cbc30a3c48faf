//! The session commands on sessions the real binary produced: `sessions`, `show`, `export`
//! (an earlier ordinal matching what the live stream showed then), `replay` (of a whole
//! capture and of one cut short) and `fork` (resumed with a new turn). `tail` is in tail.rs.

use std::{path::Path, process::Output};

use reel_tests::{parse_frames, reel, write_file};
use serde_json::Value;

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn reel_ok(args: &[&str]) -> String {
    ok(reel(args).output().unwrap())
}

/// Runs the weather example into `db` as `session`, with a debug capture at `debug`; returns
/// the live stdout.
fn weather(db: &str, session: &str, debug: &Path) -> String {
    reel_ok(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--rpc",
        "--session-id",
        session,
        "--timeline-db",
        db,
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ])
}

fn ui_lines(stream: &str) -> Vec<&str> {
    stream
        .lines()
        .filter(|line| line.contains("\"uiEvent\""))
        .collect()
}

fn ordinal_of(line: &str) -> u64 {
    let frame: Value = serde_json::from_str(line).unwrap();
    frame["uiEvent"]["ordinal"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn last_snapshot(stream: &str) -> Value {
    let line = stream
        .lines()
        .rev()
        .find(|line| line.contains("\"snapshot\""))
        .expect("a snapshot");
    serde_json::from_str::<Value>(line).unwrap()["snapshot"].clone()
}

#[test]
fn sessions_lists_newest_first_with_runs_events_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    weather(db, "first", &dir.path().join("a.jsonl"));
    let failing = reel(&[
        "run-command",
        "examples/failing-model.yaml",
        "--session-id",
        "second",
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    assert_eq!(failing.status.code(), Some(1));

    let json: Value =
        serde_json::from_str(&reel_ok(&["sessions", "--timeline-db", db, "--json"])).unwrap();
    let sessions = json.as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["session_id"], "second", "newest first");
    assert_eq!(sessions[0]["last_run_status"], "failed");
    assert_eq!(sessions[1]["session_id"], "first");
    assert_eq!(sessions[1]["runs"], 1);
    assert_eq!(sessions[1]["last_run_status"], "finished");
    assert_eq!(sessions[1]["title"], "What is the weather in Paris?");
    assert!(sessions[1]["events"].as_u64().unwrap() > 10);

    let table = reel_ok(&["sessions", "--timeline-db", db]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("SESSION"));
    assert!(lines[1].starts_with("second") && lines[1].contains("failed"));
    assert!(lines[2].starts_with("first") && lines[2].contains("What is the weather in Paris?"));

    // A database that is not there is an error, not a new empty file.
    let missing = dir.path().join("missing.db");
    let output = reel(&["sessions", "--timeline-db", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(!missing.exists());
}

#[test]
fn show_prints_the_timeline_as_plain_text_off_a_terminal_and_defuses_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    weather(db, "w", &dir.path().join("a.jsonl"));
    let hostile = write_file(
        dir.path(),
        "hostile.yaml",
        "turns:\n  - - text: \"red \\e[31m alert \\e]0;title\\a done\"\n",
    );
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        &format!("name: t\ndescription: t\nprompt: go\nprovider:\n  script: {hostile}\n"),
    );
    reel_ok(&[
        "run-command",
        &cmd,
        "--session-id",
        "h",
        "--timeline-db",
        db,
    ]);

    let shown = reel_ok(&["show", "w", "--timeline-db", db]);
    assert!(!shown.contains('\x1b'), "no colour off a terminal");
    assert!(shown.contains("Run 1"));
    assert!(shown.contains("You: What is the weather in Paris?"));
    assert!(shown.contains("I should look this up."));
    assert!(shown.contains("get_weather({\"city\":\"Paris\",\"unit\":\"celsius\"}) → completed"));
    assert!(shown.contains("\"forecast\":\"sunny\""));
    assert!(shown.contains("Assistant: It is sunny in Paris, 21 °C."));
    assert!(shown.contains("89 in / 33 out tokens"));

    // Earlier: before the tool ran.
    let earlier = reel_ok(&["show", "w", "--at", "12", "--timeline-db", db]);
    assert!(earlier.contains("at ordinal 12"));
    assert!(!earlier.contains("It is sunny"));

    let shown = reel_ok(&["show", "h", "--timeline-db", db]);
    assert!(!shown.contains('\x1b') && !shown.contains('\x07'));
    assert!(shown.contains("red \\u{1b}[31m alert"), "{shown}");
    let past_end = reel(&["show", "w", "--at", "9999", "--timeline-db", db])
        .output()
        .unwrap();
    assert_eq!(past_end.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&past_end.stderr).contains("no ordinal 9999"));
}

#[test]
fn an_export_at_an_earlier_ordinal_is_what_the_live_stream_showed_then() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let live = weather(db, "w", &dir.path().join("a.jsonl"));
    let live_ui = ui_lines(&live);
    let last = ordinal_of(live_ui.last().unwrap());
    for at in [1, 7, 12, 15, last] {
        let export = reel_ok(&[
            "export",
            "w",
            "--format",
            "jsonl",
            "--at",
            &at.to_string(),
            "--timeline-db",
            db,
        ]);
        let frames = parse_frames(export.as_bytes());
        reel_tests::assert_stream_shape(&frames);
        let expected: Vec<&str> = live_ui
            .iter()
            .copied()
            .filter(|line| ordinal_of(line) <= at)
            .collect();
        assert_eq!(ui_lines(&export), expected, "ui events up to {at}");
        assert_eq!(last_snapshot(&export)["snapshotOrdinal"], at.to_string());
    }
    // At the end, the final snapshot is the live one.
    let export = reel_ok(&["export", "w", "--format", "jsonl", "--timeline-db", db]);
    assert_eq!(last_snapshot(&export), last_snapshot(&live));
}

#[test]
fn markdown_turns_and_a_file_export() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    weather(db, "w", &dir.path().join("a.jsonl"));
    let markdown = reel_ok(&["export", "w", "--format", "markdown", "--timeline-db", db]);
    assert!(markdown.starts_with("# What is the weather in Paris?\n"));
    for part in [
        "## Run 1 · finished",
        "> What is the weather in Paris?",
        "*Thinking*",
        "**Tool call** `get_weather` (`call_weather_1`): completed",
        "```json\n{\"city\":\"Paris\",\"unit\":\"celsius\"}\n```",
        "It is sunny in Paris, 21 °C.",
    ] {
        assert!(markdown.contains(part), "{part:?} in\n{markdown}");
    }

    let turns: Value = serde_json::from_str(&reel_ok(&[
        "export",
        "w",
        "--format",
        "turns",
        "--timeline-db",
        db,
    ]))
    .unwrap();
    let roles: Vec<&str> = turns
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(turns[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(turns[2]["tool_call_id"], "call_weather_1");

    // A run's system prompt leads the turns, as a request would send it.
    let cmd = write_file(
        dir.path(),
        "brief.yaml",
        "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: hello there\n",
    );
    reel_ok(&[
        "run-command",
        &cmd,
        "--session-id",
        "brief",
        "--timeline-db",
        db,
    ]);
    let turns: Value = serde_json::from_str(&reel_ok(&[
        "export",
        "brief",
        "--format",
        "turns",
        "--timeline-db",
        db,
    ]))
    .unwrap();
    assert_eq!(
        turns,
        serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
            {"role": "assistant", "content": "hello there"},
        ])
    );

    let file = dir.path().join("out/w.md");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let output = reel(&[
        "export",
        "w",
        "--format",
        "markdown",
        "-o",
        file.to_str().unwrap(),
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    assert!(output.status.success());
    assert!(output.stdout.is_empty());
    assert!(output.stderr.is_empty(), "no progress bar off a terminal");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), markdown);
    // Nothing is left behind next to it.
    assert_eq!(
        std::fs::read_dir(file.parent().unwrap()).unwrap().count(),
        1
    );
}

#[test]
fn replay_rebuilds_a_session_from_a_capture_and_from_one_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original.db");
    let original = original.to_str().unwrap();
    let capture = dir.path().join("capture.jsonl");
    weather(original, "w", &capture);

    // The whole capture: the rebuilt database exports exactly as the original.
    let rebuilt = dir.path().join("rebuilt.db");
    let rebuilt = rebuilt.to_str().unwrap();
    let turns = dir.path().join("turns.db");
    reel_ok(&[
        "replay",
        capture.to_str().unwrap(),
        "--timeline-db",
        rebuilt,
        "--turns-db",
        turns.to_str().unwrap(),
    ]);
    let export = |db: &str| reel_ok(&["export", "w", "--format", "jsonl", "--timeline-db", db]);
    assert_eq!(export(rebuilt), export(original));
    reel_ok(&["verify", "--session-id", "w", "--timeline-db", rebuilt]);
    let mut turns_db = reel_tests::TimelineDb::open(&turns);
    assert_eq!(turns_db.turns("w").len(), 1, "the turn was stored");

    // Cut in the middle of a line, as a killed process leaves it.
    let text = std::fs::read(&capture).unwrap();
    let middle_of_line = text.len() * 2 / 3;
    assert_ne!(text[middle_of_line - 1], b'\n');
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, &text[..middle_of_line]).unwrap();
    let partial = dir.path().join("partial.db");
    let partial = partial.to_str().unwrap();
    let output = reel(&["replay", torn.to_str().unwrap(), "--timeline-db", partial])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cut short"));
    reel_ok(&["verify", "--session-id", "w", "--timeline-db", partial]);
    // Its log is a prefix of the original's, and resuming it closes the cut run and goes on.
    let full = export(original);
    let cut = export(partial);
    let cut_ui = ui_lines(&cut);
    assert!(!cut_ui.is_empty() && cut_ui.len() < ui_lines(&full).len());
    assert_eq!(cut_ui, ui_lines(&full)[..cut_ui.len()].to_vec());
    let resumed = reel_ok(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "w",
        "--resume",
        "--timeline-db",
        partial,
    ]);
    assert!(
        resumed.contains("\"ChatRunFailed\""),
        "the cut run is closed as interrupted"
    );
    assert!(resumed.contains("\"ChatRunFinished\""));

    // A gap in the middle is refused, and nothing is written.
    let lines: Vec<&str> = std::str::from_utf8(&text).unwrap().lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("\"backendEvent\""))
        .unwrap()
        + 2;
    let gapped: String = lines
        .iter()
        .enumerate()
        .filter(|(i, l)| *i != at || !l.contains("\"backendEvent\""))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let gapped_path = dir.path().join("gapped.jsonl");
    std::fs::write(&gapped_path, gapped).unwrap();
    let refused = dir.path().join("refused.db");
    let output = reel(&[
        "replay",
        gapped_path.to_str().unwrap(),
        "--timeline-db",
        refused.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("gap"));
}

#[test]
fn a_fork_holds_the_first_events_and_resumes_with_a_new_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"one\"\n  - - echo_context\n",
    );
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"{{{{ say }}}}\"\nvariables:\n  - name: say\n    default: hi\nprovider:\n  script: {script}\n"
        ),
    );
    let run = |session: &str, say: &str, resume: bool| {
        let mut args = vec![
            "run-command",
            &cmd,
            "--rpc",
            "--session-id",
            session,
            "--timeline-db",
            db,
            "--say",
            say,
        ];
        if resume {
            args.push("--resume");
        }
        reel_ok(&args)
    };
    run("parent", "first", false);
    let first_end =
        serde_json::from_str::<Value>(&reel_ok(&["sessions", "--timeline-db", db, "--json"]))
            .unwrap()[0]["events"]
            .as_u64()
            .unwrap();
    run("parent", "second", true);
    let parent_before = reel_ok(&["export", "parent", "--format", "jsonl", "--timeline-db", db]);

    reel_ok(&[
        "fork",
        "parent",
        "--at",
        &first_end.to_string(),
        "--new-session",
        "child",
        "--timeline-db",
        db,
    ]);
    reel_ok(&["verify", "--session-id", "child", "--timeline-db", db]);
    let child = reel_ok(&["export", "child", "--format", "jsonl", "--timeline-db", db]);
    let at_fork = reel_ok(&[
        "export",
        "parent",
        "--format",
        "jsonl",
        "--at",
        &first_end.to_string(),
        "--timeline-db",
        db,
    ]);
    assert_eq!(ui_lines(&child).len(), ui_lines(&at_fork).len());
    assert_eq!(last_snapshot(&child), last_snapshot(&at_fork));

    // The child's next turn sees the first exchange only (the parent's second is not its past).
    let resumed = run("child", "third", true);
    let text = last_snapshot(&resumed)["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["payload"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("user: first") && text.contains("assistant: one"),
        "{text}"
    );
    assert!(!text.contains("user: second"), "{text}");
    // The parent is untouched; forking onto an existing id is refused.
    assert_eq!(
        reel_ok(&["export", "parent", "--format", "jsonl", "--timeline-db", db]),
        parent_before
    );
    let again = reel(&[
        "fork",
        "parent",
        "--at",
        "1",
        "--new-session",
        "child",
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    assert_eq!(again.status.code(), Some(1));
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), export draws its progress bar
/// and show its colours; off one (every other test here), neither appears.
#[test]
fn a_terminal_gets_a_progress_bar_and_colour() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        reel_tests::skip("no `script` (util-linux) to make a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    weather(db, "w", &dir.path().join("a.jsonl"));
    let reel_path = reel_tests::reel_binary();
    let out = dir.path().join("w.jsonl");
    let on_terminal = |command: String| {
        let output = std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .current_dir(reel_tests::repo_root())
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let export = on_terminal(format!(
        "{} export w --format jsonl -o {} --timeline-db {db}",
        reel_path.display(),
        out.display()
    ));
    assert!(
        export.contains("exporting") && export.contains("events"),
        "{export:?}"
    );
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .ends_with("{\"version\":1,\"sessionId\":\"w\",\"done\":{\"status\":\"ok\"}}\n")
    );
    let shown = on_terminal(format!("{} show w --timeline-db {db}", reel_path.display()));
    assert!(shown.contains("\x1b[1;36mYou:\x1b[0m"), "{shown:?}");
}
