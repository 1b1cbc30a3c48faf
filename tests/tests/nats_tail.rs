//! `reel tail SESSION --from nats://...`: a session followed from the JetStream stream its
//! `--sink nats://` keeps, with no database: the same frames as a tail of the database, from
//! any ordinal, in both encodings, and live with `--wait` until it is interrupted.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
    sync::mpsc,
    time::Duration,
};

use reel_tests::{
    Spawned,
    jetstream::{delete_stream, sink_of, stream_name},
    parse_frames, reel, run, ui_names,
};

/// Runs the weather tool example as session `id`, stored in `db` and kept in `sink`.
fn run_session(id: &str, db: &str, sink: &str, resume: bool) -> Vec<u8> {
    let mut args = vec![
        "run-command",
        "examples/weather-tool.yaml",
        "--session-id",
        id,
        "--timeline-db",
        db,
        "--sink",
        sink,
        "--output",
        "jsonl",
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
    output.stdout
}

/// `reel tail` of `id` with `source` (`--from URI` or `--timeline-db PATH`) and `more` flags.
fn tail(id: &str, source: [&str; 2], more: &[&str]) -> std::process::Output {
    let mut args = vec!["tail", id, source[0], source[1], "--output", "jsonl"];
    args.extend_from_slice(more);
    run(&args)
}

#[tokio::test]
async fn the_stream_tails_as_the_database_does_from_any_ordinal() {
    for encoding in ["json", "proto"] {
        let stream = stream_name(&format!("tail_{encoding}"));
        delete_stream(&stream).await;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let db = db.to_str().unwrap();
        let sink = format!("{}&encoding={encoding}", sink_of(&stream));
        // Two runs: the second resumes, so the stream holds both.
        run_session("t1", db, &sink, false);
        run_session("t1", db, &sink, true);
        for after in ["0", "7", "12"] {
            let from_stream = tail("t1", ["--from", &sink], &["--after", after]);
            let from_db = tail("t1", ["--timeline-db", db], &["--after", after]);
            for output in [&from_stream, &from_db] {
                assert!(
                    output.status.success(),
                    "--after {after}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            assert_eq!(
                String::from_utf8_lossy(&from_stream.stdout),
                String::from_utf8_lossy(&from_db.stdout),
                "{encoding}, --after {after}: the same frames"
            );
            let frames = parse_frames(&from_stream.stdout);
            assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
            if after == "0" {
                let names = ui_names(&frames);
                assert_eq!(
                    names.iter().filter(|n| *n == "ChatRunFinished").count(),
                    2,
                    "both runs: {names:?}"
                );
            }
        }
        // A cursor past the end, and a session the stream does not hold, are errors (the
        // database's tail says the same of a cursor past the end).
        let past = tail("t1", ["--timeline-db", db], &["--after", "10000"]);
        assert_eq!(past.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&past.stderr).contains("past the end"));
        for (session, after, says) in [("t1", "10000", "past the end"), ("t9", "0", "no events")] {
            let output = tail(session, ["--from", &sink], &["--after", after]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains(says), "{stderr}");
        }
        delete_stream(&stream).await;
    }
}

#[tokio::test]
async fn with_wait_tail_follows_the_stream_live_until_interrupted() {
    let stream = stream_name("tail_live");
    delete_stream(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap().to_owned();
    let sink = sink_of(&stream);
    // tail starts before the stream exists, and waits for it.
    let mut tail = Spawned::start(
        reel(&[
            "tail", "live", "--from", &sink, "--wait", "--after", "0", "--output", "jsonl",
        ])
        .stdout(Stdio::piped()),
    );
    let stdout = tail.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let written = tokio::task::spawn_blocking({
        let sink = sink.clone();
        move || run_session("live", &db, &sink, false)
    })
    .await
    .unwrap();
    let mut followed = String::new();
    while !followed.contains("ChatRunFinished") {
        let line = received
            .recv_timeout(Duration::from_secs(60))
            .expect("tail shows the run as it is published");
        followed.push_str(&line);
        followed.push('\n');
    }
    // Interrupted as Ctrl-C would: done stopped, exit 0.
    let pid = tail.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(tail.wait().unwrap().success());
    while let Ok(line) = received.recv_timeout(Duration::from_secs(5)) {
        followed.push_str(&line);
        followed.push('\n');
    }
    let frames = parse_frames(followed.as_bytes());
    assert_eq!(frames.last().unwrap().done_status(), Some("stopped"));
    // The ui events tail projected from the stream are the ones the writer printed.
    let ui = |frames: &[reel_tests::FrameLine]| -> Vec<String> {
        frames
            .iter()
            .filter(|f| f.ui_name().is_some())
            .map(|f| f.json["uiEvent"].to_string())
            .collect()
    };
    assert_eq!(ui(&frames), ui(&parse_frames(&written)));
    delete_stream(&stream).await;
}
