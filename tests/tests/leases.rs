//! Leases: one writer per session, a lease that outlives its machine expires, `--steal-lease`
//! takes a session over on purpose, and the process it was taken from stops writing.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    on_both_backends, run,
    stored::{Backend, unique},
};

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs one SQL statement on a SQLite file, as another program would.
fn sqlite(db: &Path, sql: &str) -> String {
    reel_tests::python_sqlite(
        "c = sqlite3.connect(sys.argv[1]); r = c.execute(sys.argv[2]).fetchall(); c.commit(); print(r)",
        &[db.as_os_str(), std::ffi::OsStr::new(sql)],
    )
}

/// A session `s` in a new SQLite file, its lease then written as another host's.
fn session_leased_elsewhere(dir: &Path, heartbeat_ms: i64) -> String {
    let db = dir.join("t.db");
    let made = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "s",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    sqlite(
        &db,
        &format!(
            "INSERT INTO leases (session_id, owner, acquired_at, heartbeat_at) VALUES ('s', 'another-container/1/1', 0, {heartbeat_ms}) ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, heartbeat_at = excluded.heartbeat_at"
        ),
    );
    db.display().to_string()
}

#[test]
fn another_hosts_lease_expires_when_its_heartbeat_stops() {
    let dir = tempfile::tempdir().unwrap();
    let db = session_leased_elsewhere(dir.path(), now_ms() - 120_000);
    // tail does not wait for a writer that stopped long ago.
    let started = Instant::now();
    let tailed = run(&["tail", "s", "--timeline-db", &db]);
    assert!(tailed.status.success(), "{}", stderr(&tailed));
    assert!(started.elapsed() < Duration::from_secs(30), "tail ended");
    let resumed = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "s",
        "--resume",
        "--timeline-db",
        &db,
    ]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
}

#[test]
fn a_fresh_lease_of_another_host_is_refused_unless_stolen() {
    let dir = tempfile::tempdir().unwrap();
    let db = session_leased_elsewhere(dir.path(), now_ms() + 60_000);
    let refused = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "s",
        "--resume",
        "--timeline-db",
        &db,
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(
        err.contains("another-container/1/1") && err.contains("--steal-lease"),
        "{err}"
    );
    let stolen = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "s",
        "--resume",
        "--steal-lease",
        "--timeline-db",
        &db,
    ]);
    assert!(stolen.status.success(), "{}", stderr(&stolen));
    assert!(
        stderr(&stolen).contains("took session s over from another-container/1/1"),
        "{}",
        stderr(&stolen)
    );
    // --steal-lease only makes sense for a session that exists.
    let usage = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "n",
        "--steal-lease",
    ]);
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn a_writer_renews_its_lease_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut client = reel_tests::RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "idle",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    client.send(r#"{"requestId":"a","submit":{"prompt":"hi"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    let heartbeat = || {
        sqlite(
            &db,
            "SELECT heartbeat_at FROM leases WHERE session_id = 'idle'",
        )
    };
    let first = heartbeat();
    let started = Instant::now();
    while heartbeat() == first {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the heartbeat never moved from {first}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM leases WHERE session_id = 'idle'"),
        "[(0,)]",
        "the lease is released at the end"
    );
}

/// A session taken over with `--steal-lease` from a live writer: the taker runs, and the old
/// writer's next request fails with storage_failed instead of writing beside it.
fn a_stolen_session_stops_its_old_writer(backend: &Backend) {
    let id = unique("stolen");
    let mut old = backend.session_client("examples/echo.yaml", &id);
    old.send(r#"{"requestId":"a","submit":{"prompt":"first"}}"#);
    assert_eq!(old.done_of("a"), "ok");
    let refused = backend.run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        &id,
        "--resume",
    ]);
    assert_eq!(refused.status.code(), Some(1), "a live writer holds it");
    let taker = backend.run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        &id,
        "--resume",
        "--steal-lease",
    ]);
    assert!(taker.status.success(), "{}", stderr(&taker));
    assert!(
        stderr(&taker).contains("--steal-lease: took session"),
        "{}",
        stderr(&taker)
    );
    old.send(r#"{"requestId":"b","submit":{"prompt":"second"}}"#);
    assert_eq!(old.done_of("b"), "failed");
    let (status, frames, err) = old.finish();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        frames.iter().any(
            |f| matches!(f.frame(), Frame::Error(e) if e.code == "storage_failed" && e.terminal)
        )
    );
    // The stored log is the taker's continuation, gap-free.
    let mut db = backend.view().unwrap();
    let events = reel_tests::stored::assert_log_and_entities_agree(&mut db, &id);
    let prompts: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            reel_proto::Any::ChatUserMessageAccepted(m) => Some(m.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert_eq!(prompts[0], "first");
    assert!(prompts[1].starts_with("Hello world"), "{prompts:?}");
}

on_both_backends!(a_stolen_session_stops_its_old_writer);

/// One SQLite file as both the timeline and the turns database: the second store is a second
/// connection, not a second open. A second open looked at the file and closed it, which drops
/// every POSIX lock the process held on it; another program then checkpointed and removed the
/// WAL under reel, and reel's later writes went to a file nobody else could see.
#[test]
fn one_file_as_timeline_and_turns_database_keeps_its_writes_visible() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let path = db.to_str().unwrap();
    let mut client = reel_tests::RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "both",
        "--timeline-db",
        path,
        "--turns-db",
        path,
    ]);
    client.send(r#"{"requestId":"a","submit":{"prompt":"hi"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    // Another program opens and closes the database while reel holds it.
    let events = || sqlite(&db, "SELECT count(*) FROM events WHERE session_id = 'both'");
    let first = events();
    client.send(r#"{"requestId":"b","submit":{"prompt":"again"}}"#);
    assert_eq!(client.done_of("b"), "ok");
    assert_ne!(
        events(),
        first,
        "the second submit's events are visible to another program"
    );
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM turns WHERE session_id = 'both'"),
        "[(2,)]"
    );
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_writer_that_exited_is_free_at_once_even_before_its_parent_reaps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let made = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "z",
        "--timeline-db",
        db,
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    let mut writer = reel_tests::reel(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "z",
        "--resume",
        "--timeline-db",
        db,
    ])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // hello on stdout: it holds the lease.
    let mut hello = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(writer.stdout.take().unwrap()),
        &mut hello,
    )
    .unwrap();
    assert!(hello.contains("hello"), "{hello}");
    let resume = || {
        run(&[
            "run-command",
            "examples/echo.yaml",
            "--session-id",
            "z",
            "--resume",
            "--timeline-db",
            db,
        ])
    };
    let busy = resume();
    assert!(
        stderr(&busy).contains("is open in another process"),
        "a live writer's session was written: {}",
        stderr(&busy)
    );
    // Killed and not reaped: a zombie whose /proc entry still names its start time.
    writer.kill().unwrap();
    let pid = writer.id();
    let zombie = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
    assert!(zombie, "the writer is a zombie");
    // Free at once (a busy session is refused at once, it is not waited for).
    let resumed = resume();
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    writer.wait().unwrap();
}
