//! The OpenAI-compatible provider against a real HTTP server on 127.0.0.1 that speaks the chat
//! completions SSE wire format: text, reasoning, usage, a character split across two pieces,
//! comments and keep-alives, several tool calls, error bodies, a 429 then success, a dropped
//! connection, a stall, and a cancel. The API key must never show anywhere.

use std::{process::Stdio, time::Duration};

use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{
    FrameLine, assert_stream_shape, parse_frames, reel,
    sse_server::{Reply, SseServer, delta_event, done_event, quick, tool_call_delta, usage_event},
    ui_names, write_file,
};
use serde_json::json;

const KEY: &str = "sk-test-4f9a1c";

/// Runs a command against `server` with the API key in the environment; returns stdout frames,
/// stderr, exit code and the debug file's text.
fn run_against(
    server: &SseServer,
    extra: &[&str],
) -> (Vec<FrameLine>, String, Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: Say hello.\nprovider:\n  name: openai\n  model: test-model\n  api_key_env: REEL_TEST_KEY\n",
    );
    let debug = dir.path().join("debug.jsonl");
    let base_url = server.base_url();
    let mut args = vec![
        "run-command",
        command.as_str(),
        "--rpc",
        "--base-url",
        base_url.as_str(),
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = reel(&args)
        .env("REEL_TEST_KEY", KEY)
        .env("REEL_LOG", "debug")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let debug_text = std::fs::read_to_string(&debug).unwrap_or_default();
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY) && !debug_text.contains(KEY),
        "the API key leaked"
    );
    (
        parse_frames(&output.stdout),
        stderr,
        output.status.code(),
        debug_text,
    )
}

fn payloads<'a>(
    frames: &'a [FrameLine],
    name: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> + 'a {
    frames
        .iter()
        .filter(move |f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
}

#[test]
fn text_reasoning_usage_and_a_character_split_across_pieces() {
    let text_event = delta_event(json!({"content": "lo wörld"}), None);
    // Split inside the two bytes of "ö".
    let split = text_event.iter().position(|&b| b == 0xC3).unwrap() + 1;
    let server = SseServer::start(vec![quick(vec![
        b": keep-alive\n\n".to_vec(),
        delta_event(
            json!({"role": "assistant", "reasoning_content": "Think first."}),
            None,
        ),
        delta_event(json!({"content": "Hel"}), None),
        text_event[..split].to_vec(),
        text_event[split..].to_vec(),
        delta_event(json!({}), Some("stop")),
        usage_event(12, 4),
        done_event(),
    ])]);
    let (frames, stderr, code, debug) = run_against(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_stream_shape(&frames);
    let texts: Vec<&str> = payloads(&frames, "ChatTextSegmentFinished")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello wörld"]);
    let reasoning: Vec<&str> = payloads(&frames, "ChatReasoningPatch")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, ["Think first."]);
    let finished = payloads(&frames, "ChatProviderCallFinished")
        .next()
        .unwrap();
    assert_eq!(finished["usage"]["inputTokens"], 12);
    assert_eq!(finished["stopReason"], "stop");
    assert!(!debug.is_empty());

    let requests = server.received();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]
            .head
            .starts_with("POST /v1/chat/completions HTTP/1.1")
    );
    assert!(
        requests[0]
            .head
            .contains(&format!("authorization: Bearer {KEY}")),
        "{}",
        requests[0].head
    );
    let body: serde_json::Value = serde_json::from_str(&requests[0].body).unwrap();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}])
    );
}

#[test]
fn several_tool_calls_stream_their_arguments_in_pieces() {
    let server = SseServer::start(vec![
        quick(vec![
            tool_call_delta(0, Some("call_a"), Some("get_weather"), ""),
            tool_call_delta(0, None, None, "{\"city\":"),
            tool_call_delta(1, Some("call_b"), Some("get_time"), "{\"zone\""),
            tool_call_delta(0, None, None, "\"Oslo\"}"),
            tool_call_delta(1, None, None, ":\"UTC\"}"),
            delta_event(json!({}), Some("tool_calls")),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "I have no such tools."}), Some("stop")),
            done_event(),
        ]),
    ]);
    let (frames, stderr, code, _) = run_against(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let names = ui_names(&frames);
    assert_eq!(
        names.iter().filter(|n| *n == "ChatToolCallStarted").count(),
        2
    );
    assert!(
        names
            .iter()
            .filter(|n| *n == "ChatToolArgumentsPatch")
            .count()
            >= 3
    );
    let requested: Vec<(String, serde_json::Value)> = payloads(&frames, "ChatToolCallRequested")
        .map(|p| {
            (
                p["toolName"].as_str().unwrap().to_owned(),
                serde_json::from_str(p["input"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        requested,
        [
            ("get_weather".to_owned(), json!({"city": "Oslo"})),
            ("get_time".to_owned(), json!({"zone": "UTC"}))
        ]
    );
    let finished = payloads(&frames, "ChatProviderCallFinished")
        .next()
        .unwrap();
    assert_eq!(
        (
            finished["stopReason"].as_str(),
            finished["finishClass"].as_str()
        ),
        (Some("tool_calls"), Some("tool_calls"))
    );
    // This command declares no tools: each call gets an error result naming the problem, and
    // the model is asked again with both results.
    let results: Vec<(bool, String)> = payloads(&frames, "ChatToolResultReady")
        .map(|p| {
            (
                p["isError"] == true,
                p["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|(error, text)| *error && text.contains("no tool named"))
    );
    let second: serde_json::Value = serde_json::from_str(&server.received()[1].body).unwrap();
    let roles: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second["messages"][2]["tool_calls"][1]["id"], "call_b");
    assert_eq!(second["messages"][4]["tool_call_id"], "call_b");
}

#[test]
fn an_error_body_fails_the_run_with_the_provider_s_message() {
    let server = SseServer::start(vec![Reply::Status {
        status: 400,
        body:
            json!({"error": {"message": "model 'nope' not found", "type": "invalid_request_error"}})
                .to_string(),
    }]);
    let (frames, _, code, _) = run_against(&server, &[]);
    assert_eq!(code, Some(1));
    assert_stream_shape(&frames);
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) => Some(e.clone()),
        _ => None,
    });
    let error = error.unwrap();
    assert_eq!(error.code, "run_failed");
    assert_eq!(
        error.message,
        "HTTP 400: invalid_request_error: model 'nope' not found"
    );
    assert_eq!(server.received().len(), 1, "a 400 is not retried");
}

#[test]
fn a_429_is_retried_and_each_retry_is_an_event() {
    let server = SseServer::start(vec![
        Reply::Status {
            status: 429,
            body: json!({"error": {"message": "slow down"}}).to_string(),
        },
        Reply::Status {
            status: 503,
            body: "upstream busy".into(),
        },
        quick(vec![
            delta_event(json!({"content": "at last"}), Some("stop")),
            done_event(),
        ]),
    ]);
    let (frames, stderr, code, _) = run_against(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let retries: Vec<(u64, String)> = payloads(&frames, "ChatProviderCallRetrying")
        .map(|p| {
            (
                p["attempt"].as_u64().unwrap(),
                p["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        retries,
        [
            (1, "HTTP 429: slow down".to_owned()),
            (2, "HTTP 503: upstream busy".to_owned())
        ]
    );
    assert_eq!(
        payloads(&frames, "ChatTextSegmentFinished").next().unwrap()["text"],
        "at last"
    );
    assert_eq!(server.received().len(), 3);
}

#[test]
fn a_dropped_connection_fails_the_run_and_keeps_what_arrived() {
    let server = SseServer::start(vec![quick(vec![delta_event(
        json!({"content": "half an ans"}),
        None,
    )])]);
    let (frames, _, code, _) = run_against(&server, &[]);
    assert_eq!(code, Some(1));
    assert_stream_shape(&frames);
    let failed = payloads(&frames, "ChatRunFailed").next().unwrap();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("closed before the reply was complete")
    );
    let kept = payloads(&frames, "ChatTextSegmentFinished").next().unwrap();
    assert_eq!(
        (kept["text"].as_str(), kept["status"].as_str()),
        (Some("half an ans"), Some("failed"))
    );
}

#[test]
fn a_server_that_stalls_times_out() {
    let server = SseServer::start(vec![Reply::Stream {
        pieces: vec![(
            delta_event(json!({"content": "and then"}), None),
            Duration::from_secs(20),
        )],
    }]);
    let (frames, _, code, _) = run_against(&server, &["--timeout-ms", "300"]);
    assert_eq!(code, Some(1));
    let failed = payloads(&frames, "ChatRunFailed").next().unwrap();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("sent nothing for 0.3 s"),
        "{failed}"
    );
}

#[test]
fn a_cancel_aborts_the_request_at_once() {
    let server = SseServer::start(vec![Reply::Stream {
        pieces: vec![
            (
                delta_event(json!({"content": "slow "}), None),
                Duration::from_secs(30),
            ),
            (done_event(), Duration::ZERO),
        ],
    }]);
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nprompt: go\nprovider:\n  name: openai\n  model: m\n",
    );
    let mut child = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--base-url",
        &server.base_url(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0);
        let patch = line.contains("\"ChatTextPatch\"");
        seen.extend_from_slice(line.as_bytes());
        if patch {
            break;
        }
    }
    let started = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    std::io::Read::read_to_end(&mut stdout, &mut seen).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "did not wait for the server"
    );
    let frames = parse_frames(&seen);
    assert_stream_shape(&frames);
    assert_eq!(frames.last().unwrap().done_status(), Some("stopped"));
    assert!(frames.iter().any(|f| matches!(f.frame(), Frame::UiEvent(ui) if matches!(ui.payload, Some(Any::ChatRunStopped(_))))));
}
