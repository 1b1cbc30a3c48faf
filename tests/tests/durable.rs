//! Durable sessions through the real binary: the log in a timeline database (every scenario
//! against SQLite and against PostgreSQL), resume by replay, `kill -9` in the middle of a reply,
//! one writer per session, damaged files.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Output, Stdio},
    time::{Duration, Instant},
};

use reel_engine::{LogEntry, Projection, TimelineProjection, new_id};
use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{
    FrameLine, RpcClient, TimelineDb, assert_stream_shape, parse_frames, postgres_dsn, reel, run,
    write_file,
};

/// Where a test keeps its sessions.
enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Backend {
    /// The flags that select this database.
    fn flags(&self) -> [String; 2] {
        match self {
            Backend::Sqlite(path) => ["--timeline-db".into(), path.display().to_string()],
            Backend::Postgres(dsn) => ["--timeline-dsn".into(), dsn.clone()],
        }
    }

    /// The flags that select this database as the turns database too (a second SQLite file).
    fn turns_flags(&self) -> [String; 2] {
        match self {
            Backend::Sqlite(path) => [
                "--turns-db".into(),
                path.with_file_name("turns.db").display().to_string(),
            ],
            Backend::Postgres(dsn) => ["--turns-dsn".into(), dsn.clone()],
        }
    }

    /// A reading connection to the turns database.
    fn turns_view(&self) -> TimelineDb {
        match self {
            Backend::Sqlite(path) => TimelineDb::open(&path.with_file_name("turns.db")),
            Backend::Postgres(dsn) => TimelineDb::connect(dsn),
        }
    }

    /// A reading connection, once the database exists.
    fn view(&self) -> Option<TimelineDb> {
        match self {
            Backend::Sqlite(path) => path.exists().then(|| TimelineDb::open(path)),
            Backend::Postgres(dsn) => Some(TimelineDb::connect(dsn)),
        }
    }

    /// `reel ARGS... DATABASE FLAGS` as a command, not started.
    fn reel(&self, args: &[&str]) -> std::process::Command {
        let flags = self.flags();
        let mut all = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        reel(&all)
    }

    /// `reel ARGS... DATABASE FLAGS`, run to completion.
    fn run(&self, args: &[&str]) -> Output {
        self.reel(args).output().expect("reel runs")
    }

    /// `reel ARGS... DATABASE FLAGS` as a stdin-RPC client.
    fn client(&self, args: &[&str]) -> RpcClient {
        let flags = self.flags();
        let mut all = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        RpcClient::start(&all)
    }
}

/// A session id no other test run uses (PostgreSQL tables outlive test runs).
fn unique(name: &str) -> String {
    format!("{name}-{}", new_id())
}

/// A command file playing `script`; returns its path.
fn command(dir: &Path, script: &str) -> String {
    let script = write_file(dir, "script.yaml", script);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"{{{{ say }}}}\"\nvariables:\n  - name: say\n    default: hello\nprovider:\n  script: {script}\n"
        ),
    )
}

fn final_text(frames: &[FrameLine]) -> String {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatTextSegmentFinished"))
        .map(|f| {
            f.json["uiEvent"]["payload"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn ui_ordinals(frames: &[FrameLine]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::UiEvent(ui) => Some(ui.ordinal),
            _ => None,
        })
        .collect()
}

/// The stored log is gap-free from 1, and replaying it gives the stored entities exactly.
fn assert_log_and_entities_agree(db: &mut TimelineDb, session: &str) -> Vec<LogEntry> {
    let events = db.events(session);
    for (at, entry) in events.iter().enumerate() {
        assert_eq!(entry.ordinal, at as u64 + 1, "gap-free ordinals");
    }
    let (last, entities_ordinal) = db.ordinals(session);
    assert_eq!(last, events.len() as u64);
    let replayed = TimelineProjection::replay(events.iter().take(entities_ordinal as usize));
    let mut expected = replayed.snapshot().entities;
    expected.sort_by(|a, b| (a.created_ordinal, &a.id).cmp(&(b.created_ordinal, &b.id)));
    assert_eq!(
        db.entities(session),
        expected,
        "stored entities = a replay of the stored log"
    );
    assert_eq!(db.integrity_check(), "ok");
    events
}

fn a_resumed_session_continues_the_conversation_and_the_log(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"Hi there.\"\n  - - text: \"Sure.\"\n  - - echo_context\n",
    );
    let id = unique("conv");
    let run = |extra: &[&str]| {
        backend.run(
            &[
                &["run-command", &cmd, "--rpc", "--session-id", &id][..],
                extra,
            ]
            .concat(),
        )
    };

    let first = run(&["--say", "one"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = parse_frames(&first.stdout);
    assert_stream_shape(&first);
    let first_last = *ui_ordinals(&first).last().unwrap();

    // The same id again without --resume is refused: the session exists.
    let again = run(&["--say", "two"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    let second = run(&["--resume", "--say", "two"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let second = parse_frames(&second.stdout);
    assert_stream_shape(&second);
    // The first snapshot of the resumed session shows the whole timeline so far.
    match second[1].frame() {
        Frame::Snapshot(s) => {
            assert_eq!(s.snapshot_ordinal, first_last);
            assert_eq!(s.entities.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ui_ordinals(&second)[0], first_last + 1, "ordinals continue");

    let third = run(&["--resume", "--say", "three"]);
    assert!(third.status.success());
    let third = parse_frames(&third.stdout);
    assert_eq!(
        final_text(&third),
        "user: one\nassistant: Hi there.\nuser: two\nassistant: Sure.\nuser: three"
    );

    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    assert_eq!(*ui_ordinals(&third).last().unwrap(), events.len() as u64);
    assert_eq!(db.entities(&id).len(), 6);
}

fn resume_needs_a_stored_session(backend: &Backend) {
    let id = unique("nope");
    let output = backend.run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        &id,
        "--resume",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) => Some(e.clone()),
        _ => None,
    });
    let error = error.unwrap();
    assert_eq!(error.code, "runner_init_failed");
    assert!(
        error.message.contains(&format!("no session {id:?}")),
        "{}",
        error.message
    );
}

/// Starts a long reply, waits until the database holds `deltas` of it, kills reel with
/// SIGKILL, then checks the database and resumes the session with a new turn.
fn kill_mid_reply_then_resume(backend: &Backend, deltas: u64) {
    let dir = tempfile::tempdir().unwrap();
    let id = unique("crash");
    let cmd = command(
        dir.path(),
        "turns:\n  - - repeat: {times: 100000, steps: [{text: \"tok \"}, {sleep_ms: 1}]}\n  - - text: \"after\"\n",
    );
    let mut child = backend
        .reel(&["run-command", &cmd, "--rpc", "--session-id", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader =
        std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).count());
    let started = Instant::now();
    while backend
        .view()
        .is_none_or(|mut db| db.delta_count(&id) < deltas)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the reply never reached {deltas} stored deltas"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();

    let mut db = backend.view().unwrap();
    let stored = assert_log_and_entities_agree(&mut db, &id);
    assert!(
        db.delta_count(&id) >= deltas,
        "what was committed before the kill is there"
    );
    assert!(
        !stored
            .iter()
            .any(|e| matches!(e.event, Any::ChatRunFinished(_) | Any::ChatRunFailed(_)))
    );
    drop(db);

    // Resume: the interrupted run is closed by new events, then the new turn runs.
    let resumed = backend.run(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        &id,
        "--resume",
        "--say",
        "again",
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let frames = parse_frames(&resumed.stdout);
    assert_stream_shape(&frames);
    let names: Vec<&str> = frames.iter().filter_map(FrameLine::ui_name).collect();
    assert_eq!(
        &names[..3],
        [
            "ChatTextSegmentFinished",
            "ChatProviderCallFinished",
            "ChatRunFailed"
        ],
        "{names:?}"
    );
    let segment = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatTextSegmentFinished"))
        .unwrap();
    assert_eq!(segment.json["uiEvent"]["payload"]["status"], "failed");
    let failed = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatRunFailed"))
        .unwrap();
    assert!(
        failed.json["uiEvent"]["payload"]["error"]
            .as_str()
            .unwrap()
            .starts_with("interrupted")
    );
    assert_eq!(
        ui_ordinals(&frames)[0],
        stored.len() as u64 + 1,
        "the first new event takes the next ordinal"
    );
    assert_eq!(final_text(&frames).rsplit("tok ").next(), Some("after"));

    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    assert_eq!(
        &events[..stored.len()],
        &stored[..],
        "history was not edited"
    );
    let entities = db.entities(&id);
    let mut ids: Vec<&str> = entities.iter().map(|e| e.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), entities.len(), "no duplicated entity");
    let interrupted = entities
        .iter()
        .find_map(|e| match &e.payload {
            Some(Any::ChatMessageEntity(m)) if m.role == "assistant" => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(interrupted.status, "failed");
    assert!(interrupted.text.starts_with("tok"));
}

fn kill_9_at_the_first_delta_then_resume(backend: &Backend) {
    kill_mid_reply_then_resume(backend, 1);
}

fn kill_9_early_in_a_reply_then_resume(backend: &Backend) {
    kill_mid_reply_then_resume(backend, 40);
}

fn kill_9_late_in_a_reply_then_resume(backend: &Backend) {
    kill_mid_reply_then_resume(backend, 300);
}

fn a_second_process_on_the_same_session_fails_fast(backend: &Backend) {
    let id = unique("shared");
    let mut first = backend.client(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        &id,
    ]);
    first.send(r#"{"requestId":"a","submit":{"prompt":"first writer"}}"#);
    assert_eq!(first.done_of("a"), "ok");

    let started = Instant::now();
    let second = backend.run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        &id,
        "--resume",
    ]);
    assert_eq!(second.status.code(), Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "fails fast, not after a busy timeout"
    );
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(message.contains("open in another process"), "{message}");

    // A request naming another session is refused: the id is fixed by --session-id.
    first.send(r#"{"sessionId":"other","requestId":"b","snapshot":{}}"#);
    assert_eq!(first.done_of("b"), "failed");
    first.send(r#"{"requestId":"c","shutdown":{}}"#);
    let (status, _, _) = first.finish();
    assert!(status.success());

    // Once the first process is gone, the session resumes.
    let third = backend.run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        &id,
        "--resume",
        "--name",
        "x",
    ]);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let mut db = backend.view().unwrap();
    assert_log_and_entities_agree(&mut db, &id);
}

fn a_stdin_session_is_stored_and_resumed(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"One.\"\n  - - echo_context\n",
    );
    let id = unique("chat");
    let mut client = backend.client(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        &id,
    ]);
    client.send(&format!(
        r#"{{"sessionId":"{id}","requestId":"a","submit":{{"prompt":"first"}}}}"#
    ));
    assert_eq!(client.done_of("a"), "ok");
    // done means durable: the database holds the whole run now.
    let mut view = backend.view().unwrap();
    let stored = assert_log_and_entities_agree(&mut view, &id);
    assert!(matches!(
        stored.last().unwrap().event,
        Any::ChatRunFinished(_)
    ));
    drop(view);
    client.close_stdin();
    assert!(client.finish().0.success());

    let mut client = backend.client(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        &id,
        "--resume",
    ]);
    client.send(r#"{"requestId":"b","submit":{"prompt":"second"}}"#);
    assert_eq!(client.done_of("b"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_eq!(
        final_text(&frames),
        "user: first\nassistant: One.\nuser: second"
    );
}

fn a_turn_is_stored_after_every_run(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"Hi.\"\n  - - text: \"half \"\n    - error: \"boom\"\n",
    );
    let id = unique("turns");
    let turns = backend.turns_flags();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run-command",
            cmd.as_str(),
            "--rpc",
            "--session-id",
            id.as_str(),
            &turns[0],
            &turns[1],
        ];
        args.extend_from_slice(extra);
        backend.run(&args)
    };
    assert!(run(&["--say", "one"]).status.success());
    assert_eq!(
        run(&["--resume", "--say", "two"]).status.code(),
        Some(1),
        "the second run fails"
    );

    let stored = backend.turns_view().turns(&id);
    let statuses: Vec<&str> = stored
        .iter()
        .map(|(status, _, _)| status.as_str())
        .collect();
    assert_eq!(statuses, ["finished", "failed"]);
    let texts: Vec<&str> = stored[1]
        .2
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["one", "Hi.", "two", "half "],
        "the failed turn holds what streamed"
    );
    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    assert_eq!(
        stored[1].1,
        events.len() as u64,
        "a turn names its run's last ordinal"
    );
}

#[test]
fn a_session_resumes_from_its_turns_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"Hi.\"\n  - - text: \"Sure.\"\n  - - echo_context\n",
    );
    let turns_db = dir.path().join("turns.db");
    let turns = turns_db.to_str().unwrap();
    let run = |extra: &[&str]| {
        run(&[
            &[
                "run-command",
                &cmd,
                "--rpc",
                "--session-id",
                "only-turns",
                "--turns-db",
                turns,
            ][..],
            extra,
        ]
        .concat())
    };
    assert!(run(&["--say", "one"]).status.success());
    assert!(run(&["--resume", "--say", "two"]).status.success());
    let third = run(&["--resume", "--say", "three"]);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let frames = parse_frames(&third.stdout);
    assert_stream_shape(&frames);
    assert_eq!(
        final_text(&frames),
        "user: one\nassistant: Hi.\nuser: two\nassistant: Sure.\nuser: three"
    );
    assert!(
        !dir.path().join("timeline.db").exists(),
        "no timeline database was asked for"
    );
}

/// Each scenario against SQLite and against PostgreSQL.
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $scenario() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$scenario(&super::Backend::Sqlite(dir.path().join("data/timeline.db")));
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $scenario() {
                    if let Some(dsn) = super::postgres_dsn() {
                        super::$scenario(&super::Backend::Postgres(dsn));
                    }
                }
            )*
        }
    };
}

on_both_backends!(
    a_resumed_session_continues_the_conversation_and_the_log,
    resume_needs_a_stored_session,
    kill_9_at_the_first_delta_then_resume,
    kill_9_early_in_a_reply_then_resume,
    kill_9_late_in_a_reply_then_resume,
    a_second_process_on_the_same_session_fails_fast,
    a_stdin_session_is_stored_and_resumed,
    a_turn_is_stored_after_every_run,
);

#[test]
fn resume_alone_is_a_usage_error() {
    assert_eq!(
        run(&["run-command", "examples/echo.yaml", "--resume"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn a_damaged_sqlite_database_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "s",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("left untouched"), "{stderr}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        garbage,
        "the file is exactly as it was"
    );
}

#[test]
fn sessions_in_parallel_share_one_postgres() {
    let Some(dsn) = postgres_dsn() else { return };
    let backend = Backend::Postgres(dsn);
    let ids: Vec<String> = (0..4).map(|_| unique("parallel")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            backend
                .reel(&[
                    "run-command",
                    "examples/haiku.yaml",
                    "--rpc",
                    "--session-id",
                    id,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut db = backend.view().unwrap();
    for id in &ids {
        let events = assert_log_and_entities_agree(&mut db, id);
        assert!(matches!(
            events.last().unwrap().event,
            Any::ChatRunFinished(_)
        ));
    }
}

#[test]
fn a_postgres_server_that_goes_away_ends_the_session_with_a_clear_error() {
    let Some(dsn) = postgres_dsn() else { return };
    let backend = Backend::Postgres(dsn.clone());
    let id = unique("gone");
    let mut client = backend.client(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        &id,
    ]);
    client.send(r#"{"requestId":"a","submit":{"prompt":"before"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    // The server ends reel's connection, as a restart or a failover would.
    let sql = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'reel/{}'",
        client.pid()
    );
    let terminated = std::process::Command::new("psql")
        .args([dsn.as_str(), "-tAc", &sql])
        .output()
        .expect("psql runs");
    assert!(
        terminated.status.success(),
        "{}",
        String::from_utf8_lossy(&terminated.stderr)
    );
    assert_ne!(
        String::from_utf8_lossy(&terminated.stdout).trim(),
        "0",
        "reel's connection was found"
    );
    client.send(r#"{"requestId":"b","submit":{"prompt":"after"}}"#);
    assert_eq!(client.done_of("b"), "failed");
    let (status, frames, stderr) = client.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) if e.code == "storage_failed" => Some(e.clone()),
        _ => None,
    });
    let error = error.expect("a storage_failed error");
    assert!(error.terminal);
    assert!(stderr.contains("timeline-db"), "{stderr}");
    // What was acknowledged before is stored.
    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Any::ChatUserMessageAccepted(m) if m.text == "before"))
    );
}

#[test]
fn verify_rebuilds_from_the_log_and_reports_differences() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough for a snapshot (every 50,000 events), so that verify checks one.
    let cmd = command(
        dir.path(),
        "turns:\n  - - repeat: {times: 60000, steps: [{text: \"tok \"}]}\n",
    );
    let db = dir.path().join("t.db");
    let db_arg = db.to_str().unwrap();
    let stored = run(&[
        "run-command",
        &cmd,
        "--session-id",
        "long",
        "--timeline-db",
        db_arg,
    ]);
    assert!(
        stored.status.success(),
        "{}",
        String::from_utf8_lossy(&stored.stderr)
    );

    let verified = run(&["verify", "--session-id", "long", "--timeline-db", db_arg]);
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{report}");
    assert!(report.contains("snapshot at ordinal"), "{report}");
    assert!(
        report.contains("OK: the log, the entities and the snapshot agree"),
        "{report}"
    );

    // Change a stored entity behind reel's back: verify says which one.
    let tamper = std::process::Command::new("python3")
        .args(["-c", &format!("import sqlite3; c = sqlite3.connect('{db_arg}'); c.execute(\"update entities set payload_json = replace(payload_json, 'tok', 'TOK') where kind = 'ChatMessage'\"); c.commit()")])
        .status()
        .unwrap();
    assert!(tamper.success());
    let verified = run(&["verify", "--session-id", "long", "--timeline-db", db_arg]);
    assert_eq!(verified.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verified.stdout).contains("DIFFERENT: ChatMessage"));

    let unknown = run(&["verify", "--session-id", "nobody", "--timeline-db", db_arg]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no session \"nobody\""));
}
