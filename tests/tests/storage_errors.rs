//! Database failures become clear errors, terminal only where going on would lose data, and
//! what was acknowledged stays stored: a full disk and a locked database, for real. (A server
//! that goes away is in durable.rs.)

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{RpcClient, TimelineDb, assert_stream_shape, parse_frames, run};

/// A tmpfs of `size` mounted for the test's lifetime.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// Mounts one; `None` (said on stderr) where mounting is not allowed, which CI never skips.
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        let path = dir.join("disk");
        std::fs::create_dir_all(&path).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status();
        match mounted {
            Ok(status) if status.success() => Some(Self { path }),
            _ => {
                reel_tests::skip(
                    "cannot mount a tmpfs here (not root?), so the storage failure tests cannot run",
                );
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

#[test]
fn a_full_disk_ends_the_session_and_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(dir.path(), "1m") else {
        return;
    };
    let script = reel_tests::write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"small\"\n  - - repeat: {times: 50000, steps: [{text: \"a longer piece of a reply \"}]}\n",
    );
    let cmd = reel_tests::write_file(
        dir.path(),
        "cmd.yaml",
        &format!("name: t\ndescription: t\nprompt: p\nprovider:\n  script: {script}\n"),
    );
    let db = disk.path.join("timeline.db");
    let db_arg = db.to_str().unwrap();
    let mut client = RpcClient::start(&[
        "run-command",
        &cmd,
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "full",
        "--timeline-db",
        db_arg,
    ]);
    client.send(r#"{"requestId":"a","submit":{"prompt":"fits"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    client.send(r#"{"requestId":"b","submit":{"prompt":"does not fit"}}"#);
    assert_eq!(client.done_of("b"), "failed");
    let (status, frames, stderr) = client.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) if e.code == "storage_failed" => Some(e.clone()),
        _ => None,
    });
    let error = error.expect("a storage_failed error");
    assert!(error.terminal);
    assert!(error.message.contains("full"), "{}", error.message);

    // The database opens cleanly and holds the acknowledged run, gap-free.
    let mut view = TimelineDb::open(&db);
    assert_eq!(view.integrity_check(), "ok");
    let events = view.events("full");
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(at, e)| e.ordinal == at as u64 + 1)
    );
    let first_run_end = events
        .iter()
        .position(|e| matches!(e.event, reel_proto::Any::ChatRunFinished(_)));
    assert!(first_run_end.is_some(), "the acknowledged run is stored");
}

#[test]
fn a_locked_database_is_a_clear_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db_arg = db.to_str().unwrap().to_owned();
    // Create the database, then hold its write lock from another process for a while.
    assert!(
        run(&[
            "run-command",
            "examples/echo.yaml",
            "--session-id",
            "first",
            "--timeline-db",
            &db_arg
        ])
        .status
        .success()
    );
    let mut holder = Command::new("python3")
        .args(["-c", &format!("import sqlite3, sys, time; c = sqlite3.connect('{db_arg}', isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(30)")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");

    let started = Instant::now();
    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "second",
        "--timeline-db",
        &db_arg,
    ]);
    let waited = started.elapsed();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        waited < Duration::from_secs(25),
        "gave up after its busy timeout, not after the lock: {waited:?}"
    );
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("locked"), "{stderr}");
}

#[test]
fn a_read_only_database_is_a_clear_error_and_stays_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(dir.path(), "4m") else {
        return;
    };
    let db = disk.path.join("timeline.db");
    let db_arg = db.to_str().unwrap().to_owned();
    assert!(
        run(&[
            "run-command",
            "examples/echo.yaml",
            "--session-id",
            "kept",
            "--timeline-db",
            &db_arg
        ])
        .status
        .success()
    );
    let before = std::fs::read(&db).unwrap();
    // Root ignores file modes, so make the whole file system read-only.
    let remounted = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&disk.path)
        .status()
        .unwrap();
    assert!(remounted.success());

    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--session-id",
        "kept",
        "--resume",
        "--timeline-db",
        &db_arg,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("read-only") || stderr.contains("readonly"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database is as it was"
    );
}

/// A disk that fills in the middle of a reply stops the run before its next side effect: the
/// tool the reply asks for never runs and the model is not called again.
#[test]
fn a_disk_that_fills_mid_run_stops_the_run_before_its_tools_and_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(dir.path(), "1m") else {
        return;
    };
    let marker = dir.path().join("the-tool-ran");
    let script = reel_tests::write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - repeat: {times: 50000, steps: [{text: \"a longer piece of a reply \"}]}\n    - tool_call: {id: call_1, name: touch, arguments: {}}\n  - - text: \"the model was called again\"\n",
    );
    let cmd = reel_tests::write_file(
        dir.path(),
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: p\nprovider:\n  script: {script}\ntools:\n  - name: touch\n    description: Leaves a mark.\n    executor:\n      command: [touch, {}]\n",
            marker.display()
        ),
    );
    let db = disk.path.join("timeline.db");
    let output = run(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "full",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let storage_errors: Vec<_> = frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::Error(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(storage_errors.len(), 1, "one error: {storage_errors:?}");
    assert_eq!(storage_errors[0].code, "storage_failed");
    assert!(storage_errors[0].terminal);
    assert!(!marker.exists(), "the tool's side effect never happened");
    let names = reel_tests::ui_names(&frames);
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "ChatProviderCallStarted")
            .count(),
        1,
        "the model was not called again"
    );
    assert!(
        !names
            .iter()
            .any(|n| n == "ChatToolExecutionStarted" || n == "ChatRunFinished")
    );
    assert_eq!(names.last().map(String::as_str), Some("ChatRunFailed"));
    // The run was cut short while it streamed, long before its 50,000 deltas.
    let patches = names.iter().filter(|n| *n == "ChatTextPatch").count();
    assert!(
        patches < 50_000,
        "{patches} deltas streamed after the disk filled"
    );
}

/// A database deleted under a running session (file, -wal and -shm) is noticed at the next
/// commit, as a lost database, never a silent `done ok` with nothing on disk.
#[test]
fn a_database_deleted_while_reel_writes_it_fails_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gone.db");
    let mut client = RpcClient::start(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "gone",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    client.send(r#"{"requestId":"a","submit":{"prompt":"stored"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    client.send(r#"{"requestId":"b","submit":{"prompt":"lost"}}"#);
    assert_eq!(client.done_of("b"), "failed");
    let (status, frames, stderr) = client.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let error = frames
        .iter()
        .find_map(|f| match f.frame() {
            Frame::Error(e) if e.code == "storage_failed" => Some(e.clone()),
            _ => None,
        })
        .expect("a storage_failed error");
    assert!(error.terminal);
    assert!(error.message.contains("deleted"), "{}", error.message);
    // A model call does not wait for the commit before it (docs/durable-sessions.md):
    // the model may have begun the lost request's reply, but the run stops at its next step,
    // so nothing of it streams after the failure is reported.
    let reported = frames
        .iter()
        .position(|f| matches!(f.frame(), Frame::Error(e) if e.code == "storage_failed"))
        .expect("reported");
    let streamed_after = frames[reported..]
        .iter()
        .filter(|f| f.line.request_id == "b" && f.ui_name() == Some("ChatTextPatch"))
        .count();
    assert_eq!(streamed_after, 0);
}
