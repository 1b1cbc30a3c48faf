//! Durable sessions through the real binary: the log in a SQLite timeline database, resume by
//! replay, `kill -9` in the middle of a reply, one writer per session, damaged files.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use reel_engine::{LogEntry, Projection, TimelineProjection};
use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{
    FrameLine, RpcClient, TimelineDb, assert_stream_shape, parse_frames, reel, run, write_file,
};

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

#[test]
fn a_resumed_session_continues_the_conversation_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"Hi there.\"\n  - - text: \"Sure.\"\n  - - echo_context\n",
    );
    let db = dir.path().join("data/timeline.db");
    let db_arg = db.to_str().unwrap();
    let base = [
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "conv",
        "--timeline-db",
        db_arg,
    ];

    let first = run(&[&base[..], &["--say", "one"]].concat());
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = parse_frames(&first.stdout);
    assert_stream_shape(&first);
    let first_last = *ui_ordinals(&first).last().unwrap();

    // The same id again without --resume is refused: the session exists.
    let again = run(&[&base[..], &["--say", "two"]].concat());
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    let second = run(&[&base[..], &["--resume", "--say", "two"]].concat());
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

    let third = run(&[&base[..], &["--resume", "--say", "three"]].concat());
    assert!(third.status.success());
    let third = parse_frames(&third.stdout);
    assert_eq!(
        final_text(&third),
        "user: one\nassistant: Hi there.\nuser: two\nassistant: Sure.\nuser: three"
    );

    let mut db = TimelineDb::open(&db);
    let events = assert_log_and_entities_agree(&mut db, "conv");
    assert_eq!(*ui_ordinals(&third).last().unwrap(), events.len() as u64);
    assert_eq!(db.entities("conv").len(), 6);
}

#[test]
fn resume_needs_a_stored_session() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "nope",
        "--resume",
        "--timeline-db",
        db.to_str().unwrap(),
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
        error.message.contains("no session \"nope\""),
        "{}",
        error.message
    );
    // --resume alone is a usage error.
    assert_eq!(
        run(&["run-command", "examples/echo.yaml", "--resume"])
            .status
            .code(),
        Some(2)
    );
}

/// Starts a long reply, waits until the database holds `deltas` of it, kills reel with
/// SIGKILL, then checks the database and resumes the session with a new turn.
fn kill_mid_reply_then_resume(deltas: u64) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - repeat: {times: 100000, steps: [{text: \"tok \"}, {sleep_ms: 1}]}\n  - - text: \"after\"\n",
    );
    let db_path = dir.path().join("t.db");
    let db_arg = db_path.to_str().unwrap();
    let mut child = reel(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "crash",
        "--timeline-db",
        db_arg,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader =
        std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).count());
    let started = Instant::now();
    loop {
        if db_path.exists() && TimelineDb::open(&db_path).delta_count("crash") >= deltas {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the reply never reached {deltas} stored deltas"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();

    let mut db = TimelineDb::open(&db_path);
    let stored = assert_log_and_entities_agree(&mut db, "crash");
    assert!(
        db.delta_count("crash") >= deltas,
        "what was committed before the kill is there"
    );
    assert!(
        !stored
            .iter()
            .any(|e| matches!(e.event, Any::ChatRunFinished(_) | Any::ChatRunFailed(_)))
    );
    drop(db);

    // Resume: the interrupted run is closed by new events, then the new turn runs.
    let resumed = run(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "crash",
        "--timeline-db",
        db_arg,
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

    let mut db = TimelineDb::open(&db_path);
    let events = assert_log_and_entities_agree(&mut db, "crash");
    assert_eq!(
        &events[..stored.len()],
        &stored[..],
        "history was not edited"
    );
    let mut ids: Vec<String> = db.entities("crash").into_iter().map(|e| e.id).collect();
    let count = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), count, "no duplicated entity");
    let interrupted = db
        .entities("crash")
        .into_iter()
        .find(|e| matches!(&e.payload, Some(Any::ChatMessageEntity(m)) if m.role == "assistant"))
        .unwrap();
    match interrupted.payload.unwrap() {
        Any::ChatMessageEntity(m) => {
            assert_eq!(m.status, "failed");
            assert!(m.text.starts_with("tok tok"));
        }
        _ => unreachable!(),
    }
}

#[test]
fn kill_9_at_the_first_delta_then_resume() {
    kill_mid_reply_then_resume(1);
}

#[test]
fn kill_9_early_in_a_reply_then_resume() {
    kill_mid_reply_then_resume(40);
}

#[test]
fn kill_9_late_in_a_reply_then_resume() {
    kill_mid_reply_then_resume(300);
}

#[test]
fn a_second_process_on_the_same_session_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db_arg = db.to_str().unwrap();
    let mut first = RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "shared",
        "--timeline-db",
        db_arg,
    ]);
    first.send(r#"{"requestId":"a","submit":{"prompt":"first writer"}}"#);
    assert_eq!(first.done_of("a"), "ok");

    let started = Instant::now();
    let second = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "shared",
        "--resume",
        "--timeline-db",
        db_arg,
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
    let third = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "shared",
        "--resume",
        "--timeline-db",
        db_arg,
        "--name",
        "x",
    ]);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let mut db = TimelineDb::open(&db);
    assert_log_and_entities_agree(&mut db, "shared");
}

#[test]
fn a_stdin_session_is_stored_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(
        dir.path(),
        "turns:\n  - - text: \"One.\"\n  - - echo_context\n",
    );
    let db = dir.path().join("t.db");
    let db_arg = db.to_str().unwrap();
    let mut client = RpcClient::start(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "chat",
        "--timeline-db",
        db_arg,
    ]);
    client.send(r#"{"sessionId":"chat","requestId":"a","submit":{"prompt":"first"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    // done means durable: the database holds the whole run now.
    let mut view = TimelineDb::open(&db);
    let stored = assert_log_and_entities_agree(&mut view, "chat");
    assert!(matches!(
        stored.last().unwrap().event,
        Any::ChatRunFinished(_)
    ));
    drop(view);
    client.close_stdin();
    assert!(client.finish().0.success());

    let mut client = RpcClient::start(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "chat",
        "--resume",
        "--timeline-db",
        db_arg,
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

#[test]
fn a_damaged_database_is_refused_and_left_as_it_was() {
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
