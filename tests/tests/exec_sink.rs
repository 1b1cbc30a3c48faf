//! `--sink exec:COMMAND`: the frames on a real child process's stdin, a slow child, a child
//! that dies, and sink URIs that are refused before anything runs.

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{assert_frames_with_the_log, parse_frames, run, scripted_command};

/// A reply of `deltas` text deltas.
fn long_reply(deltas: usize) -> String {
    format!("turns:\n  - - repeat: {{times: {deltas}, steps: [{{text: \"word \"}}]}}\n")
}

/// Runs `command` with frames on stdout and `sink`.
fn with_sink(command: &str, sink: &str) -> std::process::Output {
    run(&["run-command", command, "--output", "jsonl", "--sink", sink])
}

#[test]
fn the_child_reads_every_frame_and_every_logged_event_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(50));
    let capture = dir.path().join("captured file.jsonl");
    // Quotes keep the path with a space one word; no shell splits it.
    let sink = format!("exec:sh -c 'cat > \"$0\"' '{}'", capture.display());
    let output = with_sink(&command, &sink);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let captured = parse_frames(&std::fs::read(&capture).unwrap());
    let stdout = parse_frames(&output.stdout);
    // The child sees what stdout carries, and the log's own events besides.
    let events = assert_frames_with_the_log(&captured, &stdout);
    assert!(events > 50, "{events}");
}

#[test]
fn a_slow_child_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Far more than a pipe holds: the session waits for the child.
    let command = scripted_command(dir.path(), &long_reply(20_000));
    let capture = dir.path().join("slow.jsonl");
    let sink = format!("exec:sh -c 'sleep 1; cat > \"$0\"' {}", capture.display());
    let output = with_sink(&command, &sink);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let captured = parse_frames(&std::fs::read(&capture).unwrap());
    let deltas = captured
        .iter()
        .filter(|f| f.ui_name() == Some("ChatTextPatch"))
        .count();
    assert_eq!(deltas, 20_000);
    assert_eq!(captured.last().unwrap().done_status(), Some("ok"));
}

#[test]
fn a_child_that_dies_is_sink_failed_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(20_000));
    let output = with_sink(&command, "exec:head -c 100");
    let frames = parse_frames(&output.stdout);
    let failed = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(error) if error.code == "sink_failed" => Some(error.clone()),
        _ => None,
    });
    let failed = failed.expect("a sink_failed error frame");
    assert!(
        !failed.terminal && failed.message.contains("exec:head"),
        "{failed:?}"
    );
    let patches = frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatTextPatch"))
        .count();
    assert_eq!(patches, 20_000, "the run went on to its end");
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    // An output failed: the exit status says so.
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn sink_uris_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(5));
    for (uri, says) in [
        ("ftp://example.com/x", "not a sink URI"),
        ("exec:", "needs a command"),
        ("exec:cat 'open", "quotes do not close"),
        ("exec:/nonexistent/program", "cannot start"),
    ] {
        let output = with_sink(&command, uri);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{uri}: {stderr}");
        assert!(stderr.contains(says), "{uri}: {stderr}");
        let frames = parse_frames(&output.stdout);
        assert!(
            frames.iter().all(|f| f.ui_name() != Some("ChatRunStarted")),
            "{uri}: nothing ran"
        );
    }
}
