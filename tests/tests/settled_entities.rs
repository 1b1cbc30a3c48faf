//! A durable session lets its settled entities go between requests (memory holds what can still
//! change; the database holds everything), and every view still shows the whole timeline: a
//! `snapshot` request, a resumed session's first snapshot when the stored snapshot it resumes
//! from was taken after entities were let go, `tail`, and `verify`.

use reel_tests::{FrameLine, parse_frames, python_sqlite, stored::Backend, write_file};

/// A reply of 60,000 deltas (so the database snapshots the state during it), then a short one.
const SCRIPT: &str =
    "turns:\n  - - repeat: {times: 60000, steps: [{text: \"w \"}]}\n  - - text: short\n";

fn messages_in_snapshot(frame: &FrameLine) -> usize {
    frame.json["snapshot"]["entities"]
        .as_array()
        .map_or(0, |entities| {
            entities
                .iter()
                .filter(|e| e["kind"] == "ChatMessage")
                .count()
        })
}

fn snapshot_of<'a>(frames: &'a [FrameLine], rid: &str) -> &'a FrameLine {
    frames
        .iter()
        .find(|f| f.line.request_id == rid && f.json.get("snapshot").is_some())
        .unwrap_or_else(|| panic!("no snapshot for {rid:?}"))
}

#[test]
fn a_long_session_shows_its_whole_timeline_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(dir.path(), "script.yaml", SCRIPT);
    let command = write_file(
        dir.path(),
        "command.yaml",
        &format!("name: t\ndescription: t\nprompt: unused\nprovider:\n  script: {script}\n"),
    );
    let db = dir.path().join("t.db");
    let backend = Backend::Sqlite(db.clone());
    let mut client = backend.session_client(&command, "long");
    for (rid, prompt) in [
        ("r1", "long one"),
        ("r2", "short one"),
        ("r3", "long again"),
    ] {
        client.send(&format!(
            r#"{{"requestId":"{rid}","submit":{{"prompt":"{prompt}"}}}}"#
        ));
        assert_eq!(client.done_of(rid), "ok");
    }
    client.send(r#"{"requestId":"s1","snapshot":{}}"#);
    assert_eq!(client.done_of("s1"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(
        messages_in_snapshot(snapshot_of(&frames, "s1")),
        6,
        "three prompts, three replies"
    );

    // The newest stored snapshot was taken after the first runs' entities were let go.
    let stored = python_sqlite(
        "import sqlite3, json; c = sqlite3.connect(sys.argv[1]); \
         s = c.execute('SELECT state_json FROM snapshots ORDER BY ordinal DESC LIMIT 1').fetchone()[0]; \
         print(json.loads(s)['timeline'].get('evicted_through', 0))",
        &[db.as_os_str()],
    );
    assert!(
        stored.trim().parse::<u64>().unwrap() > 0,
        "the stored snapshot is partial: {stored}"
    );
    let verified = backend.run(&["verify", "long"]);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(
        said.contains("OK: the log, the entities and the snapshot agree"),
        "{said}"
    );

    // Resumed from that snapshot: the first snapshot is whole, and so is the next.
    let mut resumed = backend.resumed_client(&command, "long", &[]);
    resumed.send(r#"{"requestId":"r4","submit":{"prompt":"once more"}}"#);
    assert_eq!(resumed.done_of("r4"), "ok");
    resumed.send(r#"{"requestId":"s2","snapshot":{}}"#);
    assert_eq!(resumed.done_of("s2"), "ok");
    let (status, frames, _) = resumed.finish();
    assert!(status.success());
    assert_eq!(messages_in_snapshot(snapshot_of(&frames, "")), 6);
    assert_eq!(messages_in_snapshot(snapshot_of(&frames, "s2")), 8);

    // A reader taking the session at its end (from the newest stored snapshot) sees it whole.
    let tail = backend.run(&["tail", "long", "--output", "jsonl"]);
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let tailed = parse_frames(&tail.stdout);
    let last = tailed
        .iter()
        .rev()
        .find(|f| f.json.get("snapshot").is_some())
        .unwrap();
    assert_eq!(messages_in_snapshot(last), 8);
}
