//! `reel export --format parquet`: a session's log as one Parquet row per event, and every
//! session's by day, read back with DuckDB (from PyPI): the event counts per type equal what
//! the runs' `--output event-counts` counted, the cost per model equals reel's own session
//! totals, on SQLite and PostgreSQL. An export never writes into a directory holding files.

use std::{collections::BTreeMap, path::Path};

use reel_tests::{TestPackage, repo_root, stored::Backend, write_file};
use serde_json::Value;

/// A run with a tool round (two model calls), then a plain one.
const SCRIPT: &str = "turns:
  - - tool_call: {id: call_1, name: echo, arguments: {x: 1}}
    - usage: {input_tokens: 1000, output_tokens: 100, cached_tokens: 200}
  - - text: \"done\"
    - usage: {input_tokens: 1500, output_tokens: 50}
  - - text: \"again\"
    - usage: {input_tokens: 2000, output_tokens: 10}
";

fn command(dir: &Path) -> String {
    let script = write_file(dir, "script.yaml", SCRIPT);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\n  pricing: {{input_per_mtok: 2.0, output_per_mtok: 10.0, cached_input_per_mtok: 0.5}}\ntools:\n  - name: echo\n    description: Echoes.\n    executor:\n      command: [cat]\n"
        ),
    )
}

fn ok(backend: &Backend, args: &[&str]) -> String {
    let out = backend.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reel {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// `--output event-counts` as a map.
fn counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, n) = line.rsplit_once(' ')?;
            Some((name.to_owned(), n.parse().ok()?))
        })
        .collect()
}

/// The session's cost as reel itself totals it: its last run's `sessionUsage`.
fn session_cost(backend: &Backend, id: &str) -> f64 {
    let frames = ok(backend, &["export", id, "--format", "jsonl"]);
    frames
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|frame| {
            let payload = frame.pointer("/uiEvent/payload")?;
            payload["@type"]
                .as_str()?
                .ends_with("ChatRunFinished")
                .then(|| payload["sessionUsage"]["costUsd"].as_f64())?
        })
        .next()
        .expect("a finished run")
}

fn exports_what_reel_counts(backend: &Backend, dir: &Path) {
    let Some(python) = TestPackage::DuckDb.ready() else {
        return;
    };
    let command = command(dir);
    // Session a: two runs on model m-a, counted as they run. Session b: one run on m-b.
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for resume in [false, true] {
        let mut args = vec![
            "run-command",
            &command,
            "--session-id",
            "a",
            "--model",
            "m-a",
            "--output",
            "event-counts",
        ];
        if resume {
            args.push("--resume");
        }
        for (name, n) in counts(&ok(backend, &args)) {
            *expected.entry(name).or_default() += n;
        }
    }
    ok(
        backend,
        &[
            "run-command",
            &command,
            "--session-id",
            "b",
            "--model",
            "m-b",
        ],
    );
    let file = dir.join("a.parquet");
    let days = dir.join("days");
    let (file_arg, days_arg) = (file.display().to_string(), days.display().to_string());
    ok(
        backend,
        &["export", "a", "--format", "parquet", "-o", &file_arg],
    );
    ok(
        backend,
        &["export", "--all", "--format", "parquet", "-o", &days_arg],
    );
    let read = std::process::Command::new(python)
        .arg(repo_root().join("tests/python/parquet_totals.py"))
        .args([&file_arg, &days_arg, "a"])
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&read.stderr);
    assert!(read.status.success(), "{stderr}");
    let read: Value = serde_json::from_slice(&read.stdout).unwrap();

    let counted: BTreeMap<String, u64> = serde_json::from_value(read["counts"].clone()).unwrap();
    assert_eq!(
        counted, expected,
        "events per type: DuckDB, then --output event-counts"
    );
    let per_model = &read["cost_per_model"];
    for (model, session) in [("m-a", "a"), ("m-b", "b")] {
        let cost = session_cost(backend, session);
        assert!(cost > 0.0);
        let from_parquet = per_model[model].as_f64().expect("the model's cost");
        assert!(
            (from_parquet - cost).abs() < 1e-9,
            "{model}: {from_parquet} vs {cost}"
        );
    }
    let events = ok(backend, &["sessions", "--json"]);
    let sessions: Value = serde_json::from_str(&events).unwrap();
    let total: u64 = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["events"].as_u64().unwrap())
        .sum();
    assert_eq!(read["rows"], total);
    assert_eq!(read["days"], 1);
    assert_eq!(
        read["same_rows"], 0,
        "the day files hold the session's rows as its own file"
    );
    assert_eq!(read["first_ordinals"], serde_json::json!([1, 2, 3]));

    // The directory holds files now: a second export is refused and touches nothing.
    let again = backend.run(&["export", "--all", "--format", "parquet", "-o", &days_arg]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    // Nothing since a future date: an empty directory, no file.
    let later = dir.join("later");
    let later_arg = later.display().to_string();
    ok(
        backend,
        &[
            "export",
            "--all",
            "--since",
            "2099-01-01",
            "--format",
            "parquet",
            "-o",
            &later_arg,
        ],
    );
    assert_eq!(std::fs::read_dir(&later).unwrap().count(), 0);
    // Parquet is binary: it needs -o.
    let refused = backend.run(&["export", "a", "--format", "parquet"]);
    assert!(!refused.status.success());
}

#[test]
fn parquet_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    exports_what_reel_counts(&backend, dir.path());
}

#[test]
fn parquet_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Postgres(schema.dsn.clone());
    exports_what_reel_counts(&backend, dir.path());
}
