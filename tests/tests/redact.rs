//! `reel redact`: content erased from a stored session on SQLite and PostgreSQL. The weather
//! session says "Paris" in its prompt, the tool's arguments and result, and the reply (split
//! across deltas); after `--match Paris` no output of reel shows it (show, every export,
//! search, verify's rebuild, the turns, a resumed run's context), the log keeps its ordinals
//! and one more event records the redaction, another session is untouched, and the bytes are
//! gone from the database files (read raw: SQLite's file and WAL; PostgreSQL's relation files
//! after `--vacuum`). Bad requests and a session another process writes are refused, changing
//! nothing.

use std::path::Path;

use reel_tests::{
    RpcClient, TimelineDb, repo_root,
    served::{Served, echo_command},
    stored::Backend,
};
use serde_json::Value;

const SECRET: &str = "Paris";

fn weather() -> String {
    repo_root()
        .join("examples/weather-tool.yaml")
        .display()
        .to_string()
}

/// `reel ARGS` on the backend: (exit status, stdout, stderr).
fn reel(backend: &Backend, args: &[&str]) -> (Option<i32>, String, String) {
    let out = backend.run(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `reel ARGS` on the backend, which must succeed: its stdout.
fn ok(backend: &Backend, args: &[&str]) -> String {
    let (status, out, err) = reel(backend, args);
    assert_eq!(status, Some(0), "reel {args:?}: {err}");
    out
}

/// Every way reel shows the session, together.
fn every_output(backend: &Backend, id: &str) -> String {
    let mut all = ok(backend, &["show", id]);
    for format in ["jsonl", "markdown", "html", "turns"] {
        all.push_str(&ok(backend, &["export", id, "--format", format]));
    }
    all
}

/// The two sessions: "trip" (the weather tool loop, with turns kept) and "other".
fn record(backend: &Backend) {
    let turns = backend.turns_flags();
    let (weather, echo) = (weather(), echo_command());
    let mut args = vec!["run-command", &weather, "--session-id", "trip"];
    args.extend(turns.iter().map(String::as_str));
    ok(backend, &args);
    ok(
        backend,
        &[
            "run-command",
            &echo,
            "--session-id",
            "other",
            "--name",
            "Zanzibar",
        ],
    );
    assert!(every_output(backend, "trip").contains(SECRET));
}

/// Bad requests, and a session another process writes: each refused with a reason, nothing
/// changed.
fn refusals_change_nothing(backend: &Backend) {
    let before = ok(backend, &["export", "trip", "--format", "jsonl"]);
    let bad: [&[&str]; 7] = [
        &["--match", ""],
        &["--match", "a*"],
        &["--match", "(unclosed"],
        &["--ordinals", "5..999"],
        &["--ordinals", "9..3"],
        &["--ordinals", "x..3"],
        &["--entity", "no-such-entity"],
    ];
    for scope in bad {
        let mut args = vec!["redact", "trip"];
        args.extend(scope);
        let (status, _, err) = reel(backend, &args);
        assert_ne!(status, Some(0), "{scope:?} is refused");
        assert!(
            err.to_lowercase().contains("error"),
            "{scope:?} says why: {err}"
        );
    }
    let (status, _, err) = reel(backend, &["redact", "nobody", "--all"]);
    assert_ne!(status, Some(0));
    assert!(err.contains("no session"), "{err}");

    // A live process holds the session (a stdin-RPC client waiting for its next request).
    let echo = echo_command();
    let flags = backend.flags();
    let mut args = vec![
        "run-command",
        echo.as_str(),
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "trip",
        "--resume",
    ];
    args.extend(flags.iter().map(String::as_str));
    let mut holder = RpcClient::start(&args);
    holder.wait_for("the hello", |f| f.json.get("hello").is_some());
    let (status, _, err) = reel(backend, &["redact", "trip", "--all"]);
    assert_ne!(status, Some(0), "refused while another process writes");
    assert!(err.contains("before redacting"), "{err}");
    // The holder ends (killed, and waited for): its lease goes with it.
    drop(holder);
    assert_eq!(
        ok(backend, &["export", "trip", "--format", "jsonl"]),
        before
    );
}

/// The redaction itself, and every output after it.
/// Redacts "Paris" from the weather session and checks every output of reel; `just_after` runs
/// right after `reel redact`, before any other command touches the files.
fn erases_everywhere(backend: &Backend, extra: &[&str], just_after: impl FnOnce()) {
    let events_before = event_count(backend, "trip");
    let turns = backend.turns_flags();
    let mut args = vec![
        "redact",
        "trip",
        "--match",
        "Par[i]s",
        "--reason",
        "erasure request 7",
    ];
    args.extend(turns.iter().map(String::as_str));
    args.extend(extra);
    let out = ok(backend, &args);
    assert!(
        out.starts_with("redacted 4 entities of session trip"),
        "{out}"
    );
    just_after();

    let all = every_output(backend, "trip");
    assert!(!all.contains(SECRET), "{all}");
    assert!(all.contains("[redacted]"));
    assert!(
        all.contains("redacted: erasure request 7"),
        "the marker says why"
    );
    // The log: the same ordinals, one more event, recording the scope but not the pattern.
    assert_eq!(event_count(backend, "trip"), events_before + 1);
    let frames = ok(backend, &["export", "trip", "--format", "jsonl"]);
    let record = frames
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|frame| {
            let payload = frame.pointer("/uiEvent/payload")?;
            (payload["@type"].as_str()?.ends_with("ChatContentRedacted")).then(|| payload.clone())
        })
        .expect("the redaction event is on the log");
    assert_eq!(record["scope"], "match");
    assert_eq!(record["reason"], "erasure request 7");
    assert_eq!(record["entityIds"].as_array().unwrap().len(), 4);
    assert!(!record.to_string().contains("Par[i]s"));

    // verify rebuilds everything from the log: the stored entities and snapshot agree.
    let verified = ok(backend, &["verify", "trip"]);
    assert!(verified.contains("OK"), "{verified}");
    let hits = ok(backend, &["search", SECRET, "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&hits).unwrap(),
        Value::Array(vec![])
    );
    // What was not covered is still found: the entities' documents were written anew.
    let kept = ok(
        backend,
        &["search", "forecast", "--session", "trip", "--json"],
    );
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept[0]["role"], "assistant", "{kept}");
    let turns = format!("{:?}", backend.turns_view().turns("trip"));
    assert!(
        !turns.contains(SECRET) && turns.contains("[redacted]"),
        "{turns}"
    );

    // The other session is untouched.
    assert!(ok(backend, &["show", "other"]).contains("Zanzibar"));
    // The session goes on: the next run's context holds the tombstone, never the text.
    let echo = echo_command();
    ok(
        backend,
        &[
            "run-command",
            &echo,
            "--session-id",
            "trip",
            "--resume",
            "--name",
            "again",
        ],
    );
    let context = ok(backend, &["export", "trip", "--format", "turns"]);
    assert!(
        context.contains("[redacted]") && !context.contains(SECRET),
        "{context}"
    );
}

/// The id of the session's first entity (its first user message).
fn first_entity(backend: &Backend, id: &str) -> String {
    let frames = ok(backend, &["export", id, "--format", "jsonl"]);
    frames
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|frame| {
            let id = frame.pointer("/snapshot/entities/0/id")?;
            id.as_str().map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no snapshot with entities: {frames}"))
}

fn event_count(backend: &Backend, id: &str) -> u64 {
    let out = ok(backend, &["sessions", "--json"]);
    let sessions: Value = serde_json::from_str(&out).unwrap();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == id)
        .and_then(|s| s["events"].as_u64())
        .expect("the session is listed")
}

/// Whether `needle` is anywhere in the file's bytes (a missing file holds nothing).
fn file_holds(path: &Path, needle: &str) -> bool {
    std::fs::read(path).is_ok_and(|bytes| {
        bytes
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
    })
}

/// The SQLite files of a database: the file and its write-ahead log.
fn sqlite_files(db: &Path) -> Vec<std::path::PathBuf> {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            name.into()
        })
        .collect()
}

#[test]
fn redact_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let backend = Backend::Sqlite(db.clone());
    record(&backend);
    let turns_db = db.with_file_name("turns.db");
    let files: Vec<_> = sqlite_files(&db)
        .into_iter()
        .chain(sqlite_files(&turns_db))
        .collect();
    // A writer killed before its connection closed leaves its WAL behind, not checkpointed,
    // and while another program keeps the file open no closing connection checkpoints it:
    // the turns database's WAL holds the text until reel redact truncates it.
    reel_tests::python_sqlite(
        "import os; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_autocheckpoint = 0'); \
         c.execute(\"UPDATE turns SET context_json = context_json || ' '\"); c.commit(); os._exit(0)",
        &[turns_db.as_os_str()],
    );
    assert!(
        file_holds(&sqlite_files(&turns_db)[1], SECRET),
        "the turns database's WAL holds the text before (so the check below can fail)"
    );
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             c.execute('SELECT count(*) FROM turns').fetchall(); print('open', flush=True); sys.stdin.read()",
        ])
        .arg(&turns_db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut opened = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut opened,
    )
    .unwrap();
    assert_eq!(
        opened.trim(),
        "open",
        "the holder opened the turns database"
    );
    refusals_change_nothing(&backend);
    let erased = || {
        for file in &files {
            assert!(
                !file_holds(file, SECRET),
                "{} holds the erased text",
                file.display()
            );
        }
    };
    erases_everywhere(&backend, &[], erased);
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    erased();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(served_with_tombstones(&db));
    // Again: nothing is left to erase, and nothing is appended.
    let events = event_count(&backend, "trip");
    let again = ok(
        &backend,
        &[
            "redact",
            "trip",
            "--entity",
            &first_entity(&backend, "trip"),
        ],
    );
    assert!(again.contains("nothing was changed"), "{again}");
    assert_eq!(event_count(&backend, "trip"), events);
    // A file an older reel wrote without secure_delete may keep stale copies of the text in
    // free pages (made here the way SQLite makes them: rows written, then dropped).
    let stale = |name: &str| {
        let path = dir.path().join(name);
        let backend = Backend::Sqlite(path.clone());
        record(&backend);
        reel_tests::python_sqlite(
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA secure_delete = OFF'); \
             c.execute('CREATE TABLE scratch (x)'); c.execute('INSERT INTO scratch SELECT payload_json FROM events'); \
             c.commit(); c.execute('DROP TABLE scratch'); c.commit()",
            &[path.as_os_str()],
        );
        (backend, path)
    };
    let (kept, kept_path) = stale("kept.db");
    ok(&kept, &["redact", "trip", "--all"]);
    assert!(
        sqlite_files(&kept_path)
            .iter()
            .any(|f| file_holds(f, SECRET)),
        "free pages an older writer left keep their bytes without --vacuum"
    );
    let (vacuumed, vacuumed_path) = stale("vacuumed.db");
    ok(&vacuumed, &["redact", "trip", "--all", "--vacuum"]);
    for file in sqlite_files(&vacuumed_path) {
        assert!(
            !file_holds(&file, SECRET),
            "{} holds the erased text",
            file.display()
        );
    }
}

/// reel serve shows the session and its log with the tombstone.
async fn served_with_tombstones(db: &Path) {
    let served = Served::start(&echo_command(), db, &[], &[]);
    for path in [
        "/v1/sessions/trip",
        "/v1/sessions/trip/export?format=markdown",
        "/v1/sessions/trip/export?format=jsonl",
    ] {
        let (status, _, body) = served.get_text(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(
            body.contains("[redacted]") && !body.contains(SECRET),
            "{path}: {body}"
        );
    }
}

#[test]
fn redact_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let backend = Backend::Postgres(schema.dsn.clone());
    record(&backend);
    let mut view = TimelineDb::connect(&schema.dsn);
    assert!(
        view.relation_files_hold(&schema.name, SECRET),
        "the relation files hold the text before (so the check below can fail)"
    );
    refusals_change_nothing(&backend);
    erases_everywhere(&backend, &["--vacuum"], || {});
    assert!(
        !view.relation_files_hold(&schema.name, SECRET),
        "a relation file of the schema holds the erased text after VACUUM FULL"
    );
}

#[test]
fn a_match_that_finds_nothing_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    let echo = echo_command();
    ok(
        &backend,
        &["run-command", &echo, "--session-id", "s", "--name", "Ada"],
    );
    let before = ok(&backend, &["export", "s", "--format", "jsonl"]);
    let out = ok(&backend, &["redact", "s", "--match", "Grace"]);
    assert!(out.contains("nothing was changed"), "{out}");
    assert_eq!(ok(&backend, &["export", "s", "--format", "jsonl"]), before);
}

/// The sinks named with --sink get the redaction event: a JetStream stream that kept the
/// session (read with the official client) holds it next after the session's events, and an
/// exec child reads its frames.
#[test]
fn sinks_are_told_of_the_redaction() {
    use reel_tests::jetstream::{delete_stream, sink_of, stream_events, stream_name};

    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    let stream = stream_name("redact");
    let sink = sink_of(&stream);
    let weather = weather();
    ok(
        &backend,
        &[
            "run-command",
            &weather,
            "--session-id",
            "trip",
            "--sink",
            &sink,
        ],
    );
    let events = event_count(&backend, "trip");
    let told = dir.path().join("told.jsonl");
    let exec = format!("exec:sh -c 'cat > {}'", told.display());
    ok(
        &backend,
        &["redact", "trip", "--all", "--sink", &sink, "--sink", &exec],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let streamed = runtime.block_on(stream_events(&stream));
    runtime.block_on(delete_stream(&stream));
    let last = streamed.last().expect("the stream holds the session");
    assert_eq!(last.ordinal, events + 1);
    assert!(String::from_utf8_lossy(&last.payload).contains("ChatContentRedacted"));
    let frames = std::fs::read_to_string(&told).unwrap();
    assert!(
        frames.contains(r#""uiEvent""#) && frames.contains("ChatContentRedacted"),
        "{frames}"
    );
}

/// A reply of 450 deltas and a prompt: more rewritten events than one statement takes (200),
/// on both backends.
fn many_events_in_one_redaction(backend: &Backend, dir: &Path) {
    let script = reel_tests::write_file(
        dir,
        "long.yaml",
        "turns:\n  - - repeat: {times: 450, steps: [{text: \"Zanzibar \"}]}\n",
    );
    let command = reel_tests::write_file(
        dir,
        "long-command.yaml",
        &format!(
            "name: long\ndescription: long\nprompt: go to Zanzibar\nprovider:\n  script: {script}\n"
        ),
    );
    ok(backend, &["run-command", &command, "--session-id", "long"]);
    let out = ok(backend, &["redact", "long", "--match", "Zanzibar"]);
    // The user message, its run start, and each delta.
    assert!(out.contains("452 events rewritten"), "{out}");
    assert!(ok(backend, &["verify", "long"]).contains("OK"));
    let frames = ok(backend, &["export", "long", "--format", "jsonl"]);
    assert!(!frames.contains("Zanzibar") && frames.contains("[redacted]"));
}

#[test]
fn many_events_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    many_events_in_one_redaction(&backend, dir.path());
}

#[test]
fn many_events_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    many_events_in_one_redaction(&Backend::Postgres(schema.dsn.clone()), dir.path());
}
