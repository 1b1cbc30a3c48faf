//! What the re-run tests share (`reel rerun`, `reel diff`, `reel test`): a command whose tool
//! answers what it is told, running reel for its exit status and output, and reading a
//! re-run's report and a session's events the way the tests compare them.

use std::path::Path;

use serde_json::Value;

use crate::write_file;

/// A command whose model says a word, calls `note`, then shows the conversation; `system` is
/// its system prompt, the tool prints `answer`, `more` adds tools.
pub fn command(dir: &Path, name: &str, system: &str, answer: &str, more: &str) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - text: \"Let me note it. \"\n    - tool_call: {id: c1, name: note, arguments: {what: milk}}\n  - - echo_context\n",
    );
    write_file(
        dir,
        name,
        &format!(
            "name: t\ndescription: t\nprompt: Note the milk.\nsystem_prompt: {system}\nprovider:\n  script: {script}\ntools:\n  - name: note\n    description: Notes.\n    executor:\n      command: [sh, -c, 'echo {answer}']\n{more}"
        ),
    )
}

pub use crate::run_text as reel;

/// Runs command `cmd` as session `session` of the SQLite database `db` once per exit status
/// in `exits` (the first run makes the session, the others resume it), each ending so.
pub fn run_turns(cmd: &str, session: &str, db: &str, exits: &[i32]) {
    for (at, expected) in exits.iter().enumerate() {
        let mut args = vec![
            "run-command",
            cmd,
            "--session-id",
            session,
            "--timeline-db",
            db,
        ];
        if at > 0 {
            args.push("--resume");
        }
        let (status, _, stderr) = reel(&args);
        assert_eq!(status, Some(*expected), "{stderr}");
    }
}

/// `reel rerun SESSION --command CMD` on the database `db`.
pub fn rerun_of(session: &str, cmd: &str, db: &Path) -> (Option<i32>, String, String) {
    reel(&[
        "rerun",
        session,
        "--command",
        cmd,
        "--timeline-db",
        db.to_str().unwrap(),
    ])
}

/// The events of a session's runs (from its first user message to its last run's end), each
/// as `{name, payload}` with what differs between two sessions left out: ids, times,
/// ordinals and durations.
pub fn runs_of(events: &[reel_engine::LogEntry]) -> Vec<Value> {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|key, _| {
                    !(key.ends_with("Id") || key.ends_with("Ms") || key.ends_with("Ordinal"))
                });
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let first = events
        .iter()
        .position(|e| e.name() == "ChatUserMessageAccepted")
        .unwrap();
    let last = events
        .iter()
        .rposition(|e| {
            matches!(
                e.name(),
                "ChatRunFinished" | "ChatRunStopped" | "ChatRunFailed"
            )
        })
        .unwrap();
    events[first..=last]
        .iter()
        .map(|e| {
            let mut payload = serde_json::to_value(&e.event).unwrap();
            strip(&mut payload);
            serde_json::json!({"name": e.name(), "payload": payload})
        })
        .collect()
}

/// Each divergence of a re-run's JSON report as (turn, kind).
pub fn kinds(report: &Value) -> Vec<(u64, String)> {
    report["divergences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["turn"].as_u64().unwrap(),
                d["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// What `reel diff A B --format json` lists, as (turn, field); it must find them different.
pub fn differences_listed(db: &str, a: &str, b: &str) -> Vec<(u64, String)> {
    let (status, diffed, _) = reel(&["diff", a, b, "--format", "json", "--timeline-db", db]);
    assert_eq!(status, Some(1));
    let diffed: Value = serde_json::from_str(&diffed).unwrap();
    diffed["differing"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|turn| {
            let n = turn["turn"].as_u64().unwrap();
            turn["differences"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |d| (n, d["field"].as_str().unwrap().to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}
