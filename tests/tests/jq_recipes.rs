//! The jq recipes of the Pinocchio JSONL documentation work on reel's output, with reel's
//! `@type` names. Needs `jq` (CI installs it; elsewhere the tests say so and skip).

use std::{
    io::Write,
    process::{Command, Stdio},
};

use reel_tests::run;

/// Runs `jq ARGS` over `input`; `None` (after saying so) when jq is missing outside CI.
fn jq(args: &[&str], input: &[u8]) -> Option<String> {
    let (stdout, success) = jq_status(args, input)?;
    assert!(success, "jq {args:?} failed");
    Some(stdout)
}

/// Like [`jq`], but also returns whether jq exited cleanly.
fn jq_status(args: &[&str], input: &[u8]) -> Option<(String, bool)> {
    let spawned = Command::new("jq")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            reel_tests::skip(&format!(
                "jq is not installed ({error}); .ci/run installs it"
            ));
            return None;
        }
    };
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    Some((
        String::from_utf8(output.stdout).unwrap(),
        output.status.success(),
    ))
}

fn haiku_stream() -> Vec<u8> {
    let output = run(&["run-command", "examples/haiku.yaml", "--output", "jsonl"]);
    assert!(output.status.success());
    output.stdout
}

#[test]
fn ordinals_are_strings_that_tonumber_turns_into_increasing_numbers() {
    let stream = haiku_stream();
    let Some(out) = jq(&["select(.uiEvent) | .uiEvent.ordinal | tonumber"], &stream) else {
        return;
    };
    let ordinals: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert!(!ordinals.is_empty());
    assert!(ordinals.windows(2).all(|w| w[0] <= w[1]), "{ordinals:?}");
    let types = jq(
        &["-r", "select(.uiEvent) | .uiEvent.ordinal | type"],
        &stream,
    )
    .unwrap();
    assert!(types.lines().all(|t| t == "string"));
}

#[test]
fn text_patches_by_name_and_by_type_give_the_reply() {
    let stream = haiku_stream();
    let Some(by_name) = jq(
        &[
            "-j",
            r#"select(.uiEvent.name == "ChatTextPatch") | .uiEvent.payload.text"#,
        ],
        &stream,
    ) else {
        return;
    };
    assert_eq!(
        by_name,
        "Grey waves fold and break,\nsalt wind combs the empty shore,\nthe tide keeps its time."
    );
    let by_type = jq(
        &[
            "-j",
            r#"select(.uiEvent.payload["@type"] == "type.googleapis.com/reel.chat.v1.ChatTextPatch") | .uiEvent.payload.text"#,
        ],
        &stream,
    )
    .unwrap();
    assert_eq!(by_type, by_name);
}

#[test]
fn the_final_assistant_text_comes_from_text_segment_finished() {
    let stream = haiku_stream();
    let recipe = r#"select(.uiEvent.name == "ChatTextSegmentFinished")
        | select(.uiEvent.payload.role == "assistant")
        | .uiEvent.payload.content // .uiEvent.payload.text"#;
    let Some(out) = jq(&["-r", recipe], &stream) else {
        return;
    };
    assert_eq!(
        out,
        "Grey waves fold and break,\nsalt wind combs the empty shore,\nthe tide keeps its time.\n"
    );
}

#[test]
fn done_and_terminal_errors_are_selectable() {
    let Some(done) = jq(&["-c", "select(.done) | .done"], &haiku_stream()) else {
        return;
    };
    assert_eq!(done, "{\"status\":\"ok\"}\n");

    let failing = run(&[
        "run-command",
        "examples/failing-model.yaml",
        "--output",
        "jsonl",
    ])
    .stdout;
    let errors = jq(
        &["-c", "select(.error.terminal == true) | .error"],
        &failing,
    )
    .unwrap();
    assert_eq!(
        errors,
        "{\"code\":\"run_failed\",\"message\":\"upstream exploded\",\"terminal\":true}\n"
    );
    let done = jq(&["-r", "select(.done) | .done.status"], &failing).unwrap();
    assert_eq!(done, "failed\n");
}

#[test]
fn tool_payloads_are_found_by_their_type() {
    let stream = run(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--output",
        "jsonl",
    ])
    .stdout;
    // The recipe as Pinocchio documents it prints the right frames, but jq 1.6 also reports an
    // error (and exits 5) for every frame without a payload, because `test` rejects null.
    let documented =
        r#"select(.uiEvent.payload["@type"]? | test("reel.chat.v1.ChatTool")) | .uiEvent.name"#;
    let Some((documented_out, _)) = jq_status(&["-r", documented], &stream) else {
        return;
    };
    // The null-safe form docs/protocol.md shows exits cleanly with the same output.
    let recipe = r#"select(.uiEvent.payload["@type"]? // "" | test("reel.chat.v1.ChatTool")) | .uiEvent.name"#;
    let out = jq(&["-r", recipe], &stream).unwrap();
    assert_eq!(out, documented_out);
    let mut names: Vec<&str> = out.lines().collect();
    names.dedup();
    assert_eq!(
        names,
        [
            "ChatToolCallStarted",
            "ChatToolArgumentsPatch",
            "ChatToolCallRequested",
            "ChatToolExecutionStarted",
            "ChatToolResultReady",
            "ChatToolCallFinished",
        ]
    );
}
