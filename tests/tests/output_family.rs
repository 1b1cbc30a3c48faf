//! One family of outputs: a stored session handed to a sink renders as the live run did. The
//! live stream and `export --format jsonl` are the same bytes, ids and times included; the
//! live `--output markdown|html` are the exports; `--output event-counts` (the manual's
//! "Adding a sink" example) counts what the run appended.

use std::path::Path;

use reel_tests::{run, write_file};

fn stdout_of(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "reel {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A command file whose run thinks, calls a tool `echo` (cat) and answers, and the database
/// path the session `s` is stored in.
fn command(dir: &Path) -> (String, String) {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - reasoning: Let me check.\n    - tool_call: {id: c1, name: echo, arguments: {city: Paris}}\n  - - text: \"Sunny, <b>22</b> °C.\"\n",
    );
    let cmd = write_file(
        dir,
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: Weather in Paris?\nprovider:\n  script: {script}\ntools:\n  - name: echo\n    description: Echoes.\n    executor:\n      command: [cat]\n"
        ),
    );
    (cmd, dir.join("t.db").display().to_string())
}

/// Runs the command as session `s` with `--output output` and returns its stdout.
fn live(cmd: &str, db: &str, output: &str) -> String {
    stdout_of(&[
        "run-command",
        cmd,
        "--session-id",
        "s",
        "--timeline-db",
        db,
        "--output",
        output,
    ])
}

#[test]
fn the_exported_frames_are_the_live_stream_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, db) = command(dir.path());
    let live = live(&cmd, &db, "jsonl");
    assert!(live.lines().count() > 10, "a real stream: {live}");
    let export = stdout_of(&["export", "s", "--format", "jsonl", "--timeline-db", &db]);
    assert_eq!(export, live);
    let file = dir.path().join("s.jsonl");
    let file_arg = file.to_str().unwrap();
    stdout_of(&[
        "export",
        "s",
        "--format",
        "jsonl",
        "-o",
        file_arg,
        "--timeline-db",
        &db,
    ]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), live);
}

#[test]
fn live_markdown_and_html_are_the_exports() {
    for format in ["markdown", "html"] {
        let dir = tempfile::tempdir().unwrap();
        let (cmd, db) = command(dir.path());
        let live = live(&cmd, &db, format);
        let export = stdout_of(&["export", "s", "--format", format, "--timeline-db", &db]);
        assert_eq!(live, export, "{format}");
        assert!(live.contains("Weather in Paris?"), "{live}");
        assert!(live.contains("Let me check."), "{live}");
        assert!(live.contains("Paris"), "{live}");
        // The reply's markup is text in both formats.
        assert!(!live.contains("<b>22</b>"), "{live}");
    }
}

#[test]
fn event_counts_count_what_the_run_appended() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, db) = command(dir.path());
    let counts = live(&cmd, &db, "event-counts");
    let count = |name: &str| -> u64 {
        counts
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {counts}"))
            .parse()
            .unwrap()
    };
    assert_eq!(count("ChatRunStarted"), 1);
    assert_eq!(count("ChatProviderCallStarted"), 2, "two model calls");
    assert_eq!(count("ChatToolCallRequested"), 1);
    assert_eq!(count("ChatRunFinished"), 1);
    // Every event the log holds is counted once.
    let total: u64 = counts
        .lines()
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let listed = stdout_of(&["sessions", "--timeline-db", &db, "--json"]);
    let sessions: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(sessions[0]["events"], total, "{listed}");
}

/// The manual's "Adding a sink" shows the real sink, not a copy that drifted.
#[test]
fn the_readme_shows_the_event_count_sink_as_it_is() {
    let root = reel_tests::repo_root();
    let readme = std::fs::read_to_string(root.join("docs/sinks-and-traces.md")).unwrap();
    let source = std::fs::read_to_string(root.join("sinks/src/event_counts.rs")).unwrap();
    let start = source.find("#[async_trait::async_trait]").unwrap();
    let end = source.find("#[cfg(test)]").unwrap();
    assert!(
        readme.contains(source[start..end].trim_end()),
        "docs/sinks-and-traces.md's \"Adding a sink\" must show sinks/src/event_counts.rs's Sink impl as it is"
    );
    let outputs = std::fs::read_to_string(root.join("cli/src/outputs.rs")).unwrap();
    let line = "Rendering::EventCounts => Box::new(EventCountSink::new(writer)),";
    assert!(outputs.contains(line) && readme.contains(line));
}
