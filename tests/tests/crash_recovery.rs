//! Crash recovery: `kill -9` in the middle of a streamed reply, at several points, then resume,
//! against SQLite and PostgreSQL. The database must hold a gap-free prefix of the log with
//! entities that match a replay, and resuming must close the interrupted run without editing
//! history.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
    time::{Duration, Instant},
};

use reel_proto::Any;
use reel_tests::{
    FrameLine, assert_stream_shape, parse_frames,
    stored::{Backend, assert_log_and_entities_agree, command, final_text, ui_ordinals, unique},
};

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
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();

    // A COMMIT reel sent just before it died may still be carried out by PostgreSQL: read the
    // log once the server is done with the dead connection (named reel/PID).
    let mut db = backend.view().unwrap();
    let started = Instant::now();
    while db.connections_named(&format!("reel/{pid}")) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "PostgreSQL kept the dead connection"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
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

reel_tests::on_both_backends!(
    kill_9_at_the_first_delta_then_resume,
    kill_9_early_in_a_reply_then_resume,
    kill_9_late_in_a_reply_then_resume,
);
