//! `reel rerun SESSION --command FILE`: a stored session re-run against its recording. Its
//! prompts are fed again, each model call is answered with the recorded output (no network, no
//! key) once the request matches the recorded one, and the tools run again. The first
//! divergence stops it (exit 3) and names where and what: a tool result, or a part of a model
//! request. A re-run that goes the same way is a session `reel diff` finds equal.

use reel_tests::{
    rerun_checks::{command, differences_listed, kinds, reel, run_turns},
    write_file,
};
use serde_json::Value;

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
    // The re-run's own flags may follow run-command's (here --context-window).
    let (status, out, stderr) = rerun(
        &original,
        &[
            "--context-window",
            "100000",
            "--session-id",
            "late",
            "--format=json",
        ],
    );
    assert_eq!(status, Some(0), "{out}{stderr}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["rerun"].as_str(), report["equal"].as_bool()),
        (Some("late"), Some(true))
    );

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
    run_turns(&original, "orig", db, &[0, 0]);
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
    let found = kinds(&report);
    assert!(found.contains(&(1, "text".into())), "{found:?}");
    assert!(found.contains(&(2, "text".into())), "{found:?}");

    assert_eq!(
        differences_listed(db, "orig", "evaluated"),
        found,
        "reel diff lists the same differences"
    );
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
    run_turns(&cmd, "long", db, &[0, 0, 0, 0]);
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
