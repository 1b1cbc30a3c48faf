//! What goes wrong: a failing model call, failing outputs, a crash inside reel, signals. In every
//! case done is the last frame and the exit status says what happened.

use std::{
    io::{BufRead, BufReader, Read},
    process::Stdio,
    time::{Duration, Instant},
};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    FrameLine, assert_stream_shape, parse_frames, reel, run, scripted_command, ui_names,
};

fn error_frames(frames: &[FrameLine]) -> Vec<(String, bool, String)> {
    frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::Error(e) => Some((e.code.clone(), e.terminal, e.message.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failing_model_call_ends_with_a_terminal_error_and_done_failed() {
    let output = run(&[
        "run-command",
        "examples/failing-model.yaml",
        "--output",
        "jsonl",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let n = frames.len();
    assert!(
        matches!(frames[n - 3].frame(), Frame::Snapshot(_)),
        "snapshot, error, done"
    );
    assert_eq!(
        error_frames(&frames),
        vec![("run_failed".into(), true, "upstream exploded".into())]
    );
    assert_eq!(frames[n - 1].done_status(), Some("failed"));
    let names = ui_names(&frames);
    assert!(
        names.contains(&"ChatTextPatch".to_owned()),
        "what streamed before the failure is kept"
    );
    assert_eq!(names.last().map(String::as_str), Some("ChatRunFailed"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("upstream exploded"));
}

#[test]
fn a_crash_inside_reel_still_ends_with_error_and_done() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - text: \"before \"\n    - panic: \"provider bug\"\n",
    );
    let output = run(&["run-command", &command, "--rpc"]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    assert_eq!(
        error_frames(&frames),
        vec![("internal_error".into(), true, "provider bug".into())]
    );
    assert_eq!(frames.last().unwrap().done_status(), Some("failed"));
}

#[test]
fn a_full_disk_detaches_the_debug_sink_and_the_run_goes_on() {
    let output = run(&[
        "run-command",
        "examples/haiku.yaml",
        "--rpc",
        "--debug-events-jsonl",
        "/dev/full",
    ]);
    // The run succeeded, but an output failed: that is not a clean exit.
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    let errors = error_frames(&frames);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let (code, terminal, message) = &errors[0];
    assert_eq!((code.as_str(), *terminal), ("sink_failed", false));
    assert!(message.contains("debug-file"), "{message}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("No space left on device"));
    // Nothing was lost on stdout: the full reply is there.
    assert!(ui_names(&frames).contains(&"ChatRunFinished".to_owned()));
}

#[test]
fn a_closed_stdout_detaches_stdout_and_the_debug_file_gets_everything() {
    let dir = tempfile::tempdir().unwrap();
    let steps: String = (0..3000)
        .map(|i| format!("    - text: \"word{i} \"\n"))
        .collect();
    let command = scripted_command(
        dir.path(),
        &format!("turns:\n  -\n    - sleep_ms: 200\n{steps}"),
    );
    let debug = dir.path().join("debug.jsonl");
    let mut child = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Read the first line, then close the pipe while the reply is still to come.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("\"hello\""));
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Broken pipe"), "{stderr}");
    let frames = parse_frames(&std::fs::read(&debug).unwrap());
    assert_stream_shape(&frames);
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    let errors = error_frames(&frames);
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].0.as_str(), errors[0].1), ("sink_failed", false));
    let patches = ui_names(&frames)
        .iter()
        .filter(|n| *n == "ChatTextPatch")
        .count();
    assert_eq!(patches, 3000, "the debug file lost nothing");
}

/// Starts a slow scripted reply, waits for its first text patch, sends `signal`, and returns the
/// frames, the exit status and how long the process took to finish after the signal.
fn interrupt_with(signal: &str) -> (Vec<FrameLine>, Option<i32>, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - text: \"first \"\n    - sleep_ms: 30000\n    - text: \"never\"\n",
    );
    let debug = dir.path().join("debug.jsonl");
    let mut child = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the stream ended before the first patch"
        );
        let is_patch = line.contains("\"ChatTextPatch\"");
        seen.extend_from_slice(line.as_bytes());
        if is_patch {
            break;
        }
    }
    let sent = Instant::now();
    let kill = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    stdout.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let elapsed = sent.elapsed();
    let frames = parse_frames(&seen);
    // The debug file was flushed too, and ends the same way (it also holds the log's events).
    let debug_frames: Vec<FrameLine> = parse_frames(&std::fs::read(&debug).unwrap())
        .into_iter()
        .filter(|f| !matches!(f.frame(), Frame::BackendEvent(_)))
        .collect();
    assert_eq!(debug_frames.len(), frames.len());
    (frames, status.code(), elapsed)
}

#[test]
fn ctrl_c_stops_the_run_and_done_is_last() {
    let (frames, code, elapsed) = interrupt_with("-INT");
    assert_stream_shape(&frames);
    assert_eq!(code, Some(130));
    assert_eq!(frames.last().unwrap().done_status(), Some("stopped"));
    let names = ui_names(&frames);
    assert_eq!(names.last().map(String::as_str), Some("ChatRunStopped"));
    assert!(!frames.iter().any(|f| f.text.contains("never")));
    // The 30 s sleep was abandoned, not waited out.
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
}

#[test]
fn sigterm_stops_the_run_and_done_is_last() {
    let (frames, code, _) = interrupt_with("-TERM");
    assert_stream_shape(&frames);
    assert_eq!(code, Some(143));
    assert_eq!(frames.last().unwrap().done_status(), Some("stopped"));
    let stopped = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatRunStopped"))
        .expect("ChatRunStopped");
    assert_eq!(stopped.json["uiEvent"]["payload"]["status"], "stopped");
    // The partial reply is in the final snapshot, marked stopped.
    let snapshot = frames
        .iter()
        .rev()
        .find(|f| f.json.get("snapshot").is_some())
        .unwrap();
    let entities = snapshot.json["snapshot"]["entities"].as_array().unwrap();
    let assistant = entities
        .iter()
        .find(|e| e["payload"]["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["payload"]["text"], "first ");
    assert_eq!(assistant["payload"]["status"], "stopped");
}
