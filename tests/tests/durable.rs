//! Durable sessions through the real binary: the log in a timeline database (every scenario
//! against SQLite and against PostgreSQL), resume by replay, one writer per session, turns,
//! verify, damaged files. Crash recovery (`kill -9`) is in crash_recovery.rs.

use std::time::{Duration, Instant};

use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{
    assert_stream_shape, parse_frames, run,
    stored::{Backend, assert_log_and_entities_agree, command, final_text, ui_ordinals, unique},
};

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

fn a_second_process_on_the_same_session_fails_fast(backend: &Backend) {
    let id = unique("shared");
    let mut first = backend.session_client("examples/echo.yaml", &id);
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
    // An error, not a hang (the bound is generous so a loaded machine cannot fail the test).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "fails instead of waiting for the session"
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
    let mut client = backend.session_client(&cmd, &id);
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

reel_tests::on_both_backends!(
    a_resumed_session_continues_the_conversation_and_the_log,
    resume_needs_a_stored_session,
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
