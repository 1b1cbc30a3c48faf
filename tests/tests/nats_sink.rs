//! `--sink nats://127.0.0.1:4222/STREAM` against the machine's NATS server with JetStream: every
//! stored event once and in order (read with the Rust client and with the official Python
//! one, `nats-py`), a killed writer's session caught up on resume, a store-only session's
//! events published when the sink first joins, a stream that refuses the session's subject
//! failing the run as a database failure would, and an unreachable server refused before
//! anything runs.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    TimelineDb,
    jetstream::{
        delete_stream, make_stream, read_with_python, sink_of, stream_config, stream_events,
        stream_name,
    },
    parse_frames, reel, run, scripted_command,
};

/// Checks that `stream` holds every event of session `id` in `db` exactly once, in order.
async fn assert_stream_holds_the_log(stream: &str, db: &std::path::Path, id: &str) -> usize {
    let stored = tokio::task::spawn_blocking({
        let db = db.to_path_buf();
        let id = id.to_owned();
        move || TimelineDb::open(&db).events(&id)
    })
    .await
    .unwrap();
    let streamed = stream_events(stream).await;
    let ordinals: Vec<u64> = streamed.iter().map(|e| e.ordinal).collect();
    let expected: Vec<u64> = stored.iter().map(|e| e.ordinal).collect();
    assert_eq!(
        ordinals, expected,
        "the stream holds the log, once, in order"
    );
    for (event, entry) in streamed.iter().zip(&stored) {
        assert_eq!(event.subject, format!("{stream}.{id}.events"));
        assert_eq!(event.msg_id, format!("{id}:{}", entry.ordinal));
        let json: serde_json::Value = serde_json::from_slice(&event.payload).unwrap();
        assert_eq!(json["backendEvent"]["name"], entry.name(), "{json}");
        assert_eq!(json["backendEvent"]["ordinal"], entry.ordinal.to_string());
    }
    streamed.len()
}

#[tokio::test]
async fn every_stored_event_is_in_the_stream_once_and_in_order() {
    let stream = stream_name("once");
    delete_stream(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let sink = sink_of(&stream);
    for resume in [false, true] {
        let mut args = vec![
            "run-command",
            "examples/weather-tool.yaml",
            "--session-id",
            "n1",
            "--timeline-db",
            db.to_str().unwrap(),
            "--sink",
            &sink,
        ];
        if resume {
            args.push("--resume");
        }
        let output = run(&args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let held = assert_stream_holds_the_log(&stream, &db, "n1").await;
    assert!(held > 30, "two runs' events: {held}");
    // A second client library reads the same: every event once, in order, with its headers.
    let subject = format!("{stream}.n1.events");
    let read = tokio::task::spawn_blocking({
        let stream = stream.clone();
        move || read_with_python(&stream, &subject)
    })
    .await
    .unwrap();
    let Some(read) = read else {
        return;
    };
    assert_eq!(read.len(), held);
    for (message, ordinal) in read.iter().zip(1u64..) {
        assert_eq!(message["msg_id"], format!("n1:{ordinal}"));
        assert_eq!(message["ordinal_header"], ordinal.to_string());
        assert_eq!(message["ordinal"], ordinal.to_string());
    }
    delete_stream(&stream).await;
}

#[tokio::test]
async fn a_killed_writer_and_a_late_sink_are_caught_up_from_the_store() {
    let stream = stream_name("catch_up");
    delete_stream(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db_arg = db.to_str().unwrap().to_owned();
    let sink = sink_of(&stream);
    // Without the sink: events only in the database.
    let first = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--session-id",
        "n2",
        "--timeline-db",
        &db_arg,
    ]);
    assert!(first.status.success());
    // With it, a long reply killed (-9) in the middle.
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - repeat: {times: 100000, steps: [{text: \"tick \"}, {sleep_ms: 2}]}\n",
    );
    let mut child = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--session-id",
        "n2",
        "--resume",
        "--timeline-db",
        &db_arg,
        "--sink",
        &sink,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut deltas = 0;
    while deltas < 200 {
        let line = lines.next().expect("frames").unwrap();
        if line.contains("ChatTextPatch") {
            deltas += 1;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Resumed with the sink: the stream gets what it missed, once.
    let resumed = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "n2",
        "--resume",
        "--timeline-db",
        &db_arg,
        "--sink",
        &sink,
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_stream_holds_the_log(&stream, &db, "n2").await;
    delete_stream(&stream).await;
}

#[tokio::test]
async fn a_stream_that_refuses_the_session_fails_the_run_like_a_database() {
    let stream = stream_name("refuses");
    // The stream exists, but for other subjects: JetStream never acknowledges.
    let elsewhere = format!("elsewhere_{}.>", std::process::id());
    make_stream(&stream, &[&elsewhere]).await;
    let sink = sink_of(&stream);
    let output = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--rpc",
        "--sink",
        &sink,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    let failure = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(error) if error.code == "storage_failed" => Some(error.clone()),
        _ => None,
    });
    let failure = failure.expect("a storage_failed error");
    assert!(
        failure.terminal && failure.message.contains("nats://"),
        "{failure:?}"
    );
    assert_eq!(frames.last().unwrap().done_status(), Some("failed"));
    delete_stream(&stream).await;
}

#[tokio::test]
async fn a_stream_whose_subjects_another_takes_is_named_with_what_to_do() {
    let other = stream_name("takes_all");
    let ours = stream_name("overlapped");
    delete_stream(&ours).await;
    // Another stream takes every subject under our prefix.
    make_stream(&other, &[&format!("{ours}.>")]).await;
    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--sink",
        &sink_of(&ours),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = format!("{}{stderr}", String::from_utf8_lossy(&output.stdout));
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains(&other) && said.contains("takes"), "{said}");
    assert!(said.contains("subject_prefix"), "{said}");
    delete_stream(&other).await;
}

#[tokio::test]
async fn a_closed_port_is_a_clear_error_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let stored = [
        "run-command",
        "examples/weather-tool.yaml",
        "--rpc",
        "--session-id",
        "closed",
        "--timeline-db",
        db.to_str().unwrap(),
    ];
    let mut with_sink = stored.to_vec();
    with_sink.extend(["--sink", "nats://127.0.0.1:1/REEL_TEST_CLOSED"]);
    let output = run(&with_sink);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to NATS at 127.0.0.1:1"),
        "{stderr}"
    );
    let frames = parse_frames(&output.stdout);
    assert!(frames.iter().all(|f| f.ui_name() != Some("ChatRunStarted")));
    // The session that never ran is not left behind: the same command without the sink
    // starts it anew (no --resume needed), and it runs.
    let output = run(&stored);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn with_encoding_proto_each_message_is_the_events_protobuf() {
    use prost::Message;
    let stream = stream_name("proto");
    delete_stream(&stream).await;
    let sink = format!("{}&encoding=proto", sink_of(&stream));
    let output = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--rpc",
        "--session-id",
        "p1",
        "--sink",
        &sink,
        "--timeline-db",
        tempfile::tempdir()
            .unwrap()
            .path()
            .join("t.db")
            .to_str()
            .unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let streamed = stream_events(&stream).await;
    assert!(!streamed.is_empty());
    for event in &streamed {
        let frame = reel_proto::rpc::BackendEventFrame::decode(event.payload.as_slice())
            .expect("protobuf bytes");
        assert_eq!(frame.ordinal, event.ordinal);
        assert_eq!(frame.payload.unwrap().type_name(), frame.name);
    }
    delete_stream(&stream).await;
}

#[tokio::test]
async fn a_stream_the_sink_creates_is_kept_as_the_uri_says() {
    use async_nats::jetstream::stream::{RetentionPolicy, StorageType};
    let stream = stream_name("options");
    delete_stream(&stream).await;
    let sink = format!(
        "{}&retention=interest&storage=memory&max_age=1h",
        sink_of(&stream)
    );
    let output = run(&["run-command", "examples/haiku.yaml", "--sink", &sink]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config = stream_config(&stream).await;
    assert_eq!(config.retention, RetentionPolicy::Interest);
    assert_eq!(config.storage, StorageType::Memory);
    assert_eq!(config.max_age, std::time::Duration::from_secs(3600));
    assert_eq!(config.subjects, [format!("{stream}.*.events")]);
    // Run again asking for another storage: the stream keeps its own, and reel says so.
    let file = format!("{}&storage=file", sink_of(&stream));
    let output = run(&["run-command", "examples/haiku.yaml", "--sink", &file]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("not as the sink URI asks"), "{stderr}");
    delete_stream(&stream).await;
}
