//! The one-shot stream of `reel run-command`, in every output mode, from the real binary.

use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{assert_stream_shape, parse_frames, repo_root, run, scripted_command, ui_names};

#[test]
fn every_example_runs_without_arguments_and_streams_a_valid_protocol() {
    let examples = std::fs::read_dir(repo_root().join("examples")).unwrap();
    let mut ran = 0;
    for entry in examples {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let path = path.to_str().unwrap();
        for mode in [
            &["--output", "jsonl"][..],
            &["--rpc"],
            &["--rpc", "--include-backend-events"],
        ] {
            let mut args = vec!["run-command", path];
            args.extend_from_slice(mode);
            let output = run(&args);
            let frames = parse_frames(&output.stdout);
            assert_stream_shape(&frames);
            let done = frames.last().unwrap().done_status().unwrap().to_owned();
            if path.ends_with("failing-model.yaml") {
                assert_eq!(done, "failed");
                assert!(!output.status.success());
            } else {
                assert_eq!(
                    done,
                    "ok",
                    "{path}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                assert!(output.status.success());
            }
        }
        ran += 1;
    }
    assert!(ran >= 4, "the examples folder holds the shipped commands");
}

#[test]
fn a_successful_stream_has_the_documented_shape() {
    let output = run(&[
        "run-command",
        "examples/haiku.yaml",
        "--output",
        "jsonl",
        "--topic",
        "autumn",
    ]);
    assert!(output.status.success());
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    // hello, initial snapshot (empty), ui events, final snapshot, done
    assert!(matches!(frames[1].frame(), Frame::Snapshot(s) if s.entities.is_empty()));
    assert!(
        matches!(frames[frames.len() - 2].frame(), Frame::Snapshot(s) if !s.entities.is_empty())
    );
    let names = ui_names(&frames);
    assert_eq!(
        names.first().map(String::as_str),
        Some("ChatUserMessageAccepted")
    );
    assert_eq!(names.last().map(String::as_str), Some("ChatRunFinished"));
    for expected in [
        "ChatReasoningPatch",
        "ChatTextPatch",
        "ChatTextSegmentFinished",
        "ChatProviderCallFinished",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    // The prompt template was filled from the flag.
    let accepted = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatUserMessageAccepted"))
        .unwrap();
    assert_eq!(
        accepted.json["uiEvent"]["payload"]["text"],
        "Write a haiku about autumn."
    );
    assert_eq!(
        accepted.json["uiEvent"]["payload"]["@type"],
        "type.googleapis.com/reel.chat.v1.ChatUserMessageAccepted"
    );
    match frames[0].frame() {
        Frame::Hello(hello) => {
            assert_eq!(hello.protocol, "reel.rpc.v1");
            assert_eq!(hello.protocol_version, 1);
            assert!(hello.server.starts_with("reel/"));
            assert_eq!(hello.capabilities, ["ui-events", "snapshot", "done"]);
        }
        _ => unreachable!(),
    }
}

#[test]
fn patches_carry_only_new_text() {
    let dir = tempfile::tempdir().unwrap();
    let steps: String = (0..200)
        .map(|i| format!("    - text: \"w{i} \"\n"))
        .collect();
    let command = scripted_command(dir.path(), &format!("turns:\n  -\n{steps}"));
    let frames = parse_frames(&run(&["run-command", &command, "--rpc"]).stdout);
    let patches: Vec<_> = frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::UiEvent(ui) => match ui.payload.as_ref()? {
                Any::ChatTextPatch(p) => Some((p.offset, p.text.clone(), f.text.len())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(patches.len(), 200);
    let mut offset = 0;
    for (at, (patch_offset, text, _)) in patches.iter().enumerate() {
        assert_eq!(*patch_offset, offset);
        assert_eq!(text, &format!("w{at} "));
        offset += text.chars().count() as u64;
    }
    // The 200th patch line is no longer than the 10th but for its longer numbers.
    assert!(
        patches[199].2 <= patches[9].2 + 8,
        "{} vs {}",
        patches[199].2,
        patches[9].2
    );
}

#[test]
fn backend_events_are_the_log_in_order() {
    let output = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--rpc",
        "--include-backend-events",
    ]);
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let backend: Vec<(u64, String)> = frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::BackendEvent(b) => Some((b.ordinal, b.name.clone())),
            _ => None,
        })
        .collect();
    for (at, (ordinal, _)) in backend.iter().enumerate() {
        assert_eq!(*ordinal, at as u64 + 1, "gap-free ordinals from 1");
    }
    let names: Vec<&str> = backend.iter().map(|(_, n)| n.as_str()).collect();
    for expected in [
        "ChatToolCallStarted",
        "ChatToolArgumentsDelta",
        "ChatToolCallRequested",
        "ChatToolExecutionStarted",
        "ChatToolResultReady",
        "ChatToolCallFinished",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    match frames[0].frame() {
        Frame::Hello(hello) => assert!(hello.capabilities.iter().any(|c| c == "backend-events")),
        _ => unreachable!(),
    }
    // The tool call shows in the final snapshot with its complete arguments, executed.
    let snapshot = frames.iter().rev().find_map(|f| match f.frame() {
        Frame::Snapshot(s) => Some(s.clone()),
        _ => None,
    });
    let call = snapshot
        .unwrap()
        .entities
        .into_iter()
        .find(|e| e.kind == "ChatToolCall")
        .expect("a tool call entity");
    match call.payload.unwrap() {
        Any::ToolCallEntity(c) => {
            assert_eq!(c.tool_name, "get_weather");
            let input: serde_json::Value = serde_json::from_str(&c.input).unwrap();
            assert_eq!(input["city"], "Paris");
            assert_eq!(c.status, "completed");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn text_mode_streams_the_reply_as_plain_text() {
    let output = run(&["run-command", "examples/echo.yaml", "--name", "Ada"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "Hello Ada, this reply streams from reel's event log.\n"
    );
}

#[test]
fn json_and_yaml_print_one_result_document() {
    let output = run(&["run-command", "examples/haiku.yaml", "--output", "json"]);
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["status"], "ok");
    assert_eq!(document["usage"]["output_tokens"], 19);
    let roles: Vec<&str> = document["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "thinking", "assistant"]);

    let output = run(&["run-command", "examples/haiku.yaml", "--output", "yaml"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("status: ok"), "{text}");
    assert!(text.contains("role: assistant"), "{text}");
}

#[test]
fn line_separators_never_appear_raw_in_a_frame() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - text: \"one\\u2028two\\u2029three\"\n",
    );
    let output = run(&["run-command", &command, "--rpc"]);
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    assert!(!stdout.contains('\u{2028}') && !stdout.contains('\u{2029}'));
    assert!(stdout.contains(r"one\u2028two\u2029three"));
    let frames = parse_frames(&output.stdout);
    let finished = frames
        .iter()
        .find(|f| f.ui_name() == Some("ChatTextSegmentFinished"))
        .unwrap();
    assert_eq!(
        finished.json["uiEvent"]["payload"]["text"],
        "one\u{2028}two\u{2029}three"
    );
}

#[test]
fn a_setup_error_still_streams_hello_error_and_done() {
    let output = run(&[
        "run-command",
        "examples/does-not-exist.yaml",
        "--rpc",
        "--some-variable",
        "x",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) => Some(e.clone()),
        _ => None,
    });
    let error = error.expect("an error frame");
    assert_eq!(error.code, "runner_init_failed");
    assert!(error.terminal);
    assert!(
        error.message.contains("does-not-exist.yaml"),
        "{}",
        error.message
    );
    assert_eq!(frames.last().unwrap().done_status(), Some("failed"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("does-not-exist.yaml"));
}

#[test]
fn a_bad_script_is_a_setup_error_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), "turns:\n  - - txet: oops\n");
    let output = run(&["run-command", &command, "--rpc"]);
    assert_eq!(output.status.code(), Some(1));
    let frames = parse_frames(&output.stdout);
    assert_stream_shape(&frames);
    let message = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) => Some(e.message.clone()),
        _ => None,
    });
    assert!(message.unwrap().contains("script.yaml"));
}

#[test]
fn a_missing_required_variable_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let command = reel_tests::write_file(
        dir.path(),
        "cmd.yaml",
        "name: n\ndescription: d\nprompt: \"{{ who }}\"\nvariables:\n  - name: who\n",
    );
    let output = run(&["run-command", &command]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--who"));
    assert!(output.stdout.is_empty());
}

#[test]
fn the_debug_file_receives_the_stdout_frames_and_the_log_s_events() {
    let dir = tempfile::tempdir().unwrap();
    let debug = dir.path().join("new/folders/events.jsonl");
    std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
    std::fs::write(&debug, "stale content that must be truncated\n".repeat(100)).unwrap();
    let debug_arg = debug.to_str().unwrap();
    let output = run(&[
        "run-command",
        "examples/haiku.yaml",
        "--rpc",
        "--debug-events-jsonl",
        debug_arg,
    ]);
    assert!(output.status.success());
    // The debug file is stdout plus a backendEvent frame for every log event, in place.
    let file = String::from_utf8(std::fs::read(&debug).unwrap()).unwrap();
    let without_log: String = file
        .lines()
        .filter(|line| !line.contains("\"backendEvent\""))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(without_log, String::from_utf8(output.stdout).unwrap());
    let log = parse_frames(file.as_bytes())
        .iter()
        .filter(|f| matches!(f.frame(), Frame::BackendEvent(_)))
        .count();
    let with_log = run(&[
        "run-command",
        "examples/haiku.yaml",
        "--rpc",
        "--include-backend-events",
    ]);
    let stdout_log = parse_frames(&with_log.stdout)
        .iter()
        .filter(|f| matches!(f.frame(), Frame::BackendEvent(_)))
        .count();
    assert!(log > 0 && log == stdout_log, "{log} vs {stdout_log}");

    // Parent folders are created; in text mode stdout stays text and the file gets the frames.
    let debug = dir.path().join("other/deeper/events.jsonl");
    let output = run(&[
        "run-command",
        "examples/echo.yaml",
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    assert!(
        String::from_utf8(output.stdout)
            .unwrap()
            .starts_with("Hello world")
    );
    let frames = parse_frames(&std::fs::read(&debug).unwrap());
    assert_stream_shape(&frames);
    match frames[0].frame() {
        Frame::Hello(hello) => assert!(hello.capabilities.iter().any(|c| c == "debug-log")),
        _ => unreachable!(),
    }
}
