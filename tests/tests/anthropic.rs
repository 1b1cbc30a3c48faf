//! The Anthropic Messages provider against a real HTTP server on 127.0.0.1 that speaks its SSE
//! wire format: several tool uses in one reply, a character split across pieces, 529 then
//! success, an `overloaded_error` event, an error body, a dropped connection and a stall. (Its
//! tool loop, with thinking, pings and comments, is in tool_loop.rs.)

use std::time::Duration;

use reel_tests::{
    FrameLine, assert_stream_shape, parse_frames, reel,
    sse_server::{Reply, SseServer, anthropic_event, quick},
};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-5d2e";

fn payload<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

/// A short reply that says `text` and ends the turn.
fn text_reply(text: &str) -> Vec<Vec<u8>> {
    vec![
        anthropic_event(
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 40}}}),
        ),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": text})),
        anthropic_event(json!({"type": "content_block_stop", "index": 0})),
        anthropic_event(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        anthropic_event(json!({"type": "message_stop"})),
    ]
}

/// Runs a plain prompt against an Anthropic server; returns frames and exit code.
fn run_anthropic(server: &SseServer) -> (Vec<FrameLine>, Option<i32>) {
    run_anthropic_with(server, &[])
}

fn run_anthropic_with(server: &SseServer, extra: &[&str]) -> (Vec<FrameLine>, Option<i32>) {
    let base_url = server.base_url();
    let mut args = vec![
        "run-command",
        "examples/echo.yaml",
        "--provider",
        "anthropic",
        "--model",
        "claude-test",
        "--base-url",
        &base_url,
        "--rpc",
    ];
    args.extend_from_slice(extra);
    let output = reel(&args).env("ANTHROPIC_API_KEY", KEY).output().unwrap();
    (parse_frames(&output.stdout), output.status.code())
}

#[test]
fn anthropic_overloaded_is_retried_and_an_error_event_fails_the_run_keeping_the_text() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            .to_string();
    let server = SseServer::start(vec![
        Reply::Status {
            status: 529,
            body: overloaded.clone(),
        },
        quick(vec![
            anthropic_event(
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
            ),
            anthropic_event(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})),
            anthropic_event(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Partial"}})),
            anthropic_event(serde_json::from_str(&overloaded).unwrap()),
        ]),
    ]);
    let (frames, code) = run_anthropic(&server);
    assert_eq!(code, Some(1));
    assert_stream_shape(&frames);
    let retry = payload(&frames, "ChatProviderCallRetrying");
    assert_eq!(retry.len(), 1);
    assert!(
        retry[0]["reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 529: overloaded_error: Overloaded")
    );
    let error = frames
        .iter()
        .find_map(|f| f.json.get("error"))
        .expect("an error frame");
    assert_eq!(error["code"], "run_failed");
    assert_eq!(error["message"], "overloaded_error: Overloaded");
    let text: Vec<&Value> = payload(&frames, "ChatTextSegmentFinished");
    assert_eq!(text[0]["text"], "Partial", "what arrived is kept");
}

#[test]
fn anthropic_error_bodies_are_not_retried_unless_they_should_be() {
    let server = SseServer::start(vec![Reply::Status {
        status: 400,
        body: json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: must be positive"}}).to_string(),
    }]);
    let (frames, code) = run_anthropic(&server);
    assert_eq!(code, Some(1));
    let error = frames.iter().find_map(|f| f.json.get("error")).unwrap();
    assert_eq!(
        error["message"],
        "HTTP 400: invalid_request_error: max_tokens: must be positive"
    );
    assert_eq!(server.received().len(), 1);
}

fn block_start(index: u32, block: Value) -> Vec<u8> {
    anthropic_event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_delta(index: u32, delta: Value) -> Vec<u8> {
    anthropic_event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

#[test]
fn anthropic_several_tool_uses_in_one_reply_and_a_character_split_across_pieces() {
    let text = block_delta(0, json!({"type": "text_delta", "text": "Zwei Städte"}));
    // Split inside the two bytes of "ä".
    let split = text.iter().position(|&b| b == 0xC3).unwrap() + 1;
    let server = SseServer::start(vec![
        quick(vec![
            anthropic_event(
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 20}}}),
            ),
            block_start(0, json!({"type": "text", "text": ""})),
            text[..split].to_vec(),
            text[split..].to_vec(),
            anthropic_event(json!({"type": "content_block_stop", "index": 0})),
            block_start(
                1,
                json!({"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
            ),
            block_start(
                2,
                json!({"type": "tool_use", "id": "toolu_b", "name": "get_time", "input": {}}),
            ),
            block_delta(
                1,
                json!({"type": "input_json_delta", "partial_json": "{\"city\":"}),
            ),
            block_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"zone\": \"UTC\"}"}),
            ),
            block_delta(
                1,
                json!({"type": "input_json_delta", "partial_json": " \"Oslo\"}"}),
            ),
            anthropic_event(json!({"type": "content_block_stop", "index": 2})),
            anthropic_event(json!({"type": "content_block_stop", "index": 1})),
            anthropic_event(
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
            ),
            anthropic_event(json!({"type": "message_stop"})),
        ]),
        quick(text_reply("Noted.")),
    ]);
    let (frames, code) = run_anthropic(&server);
    assert_eq!(code, Some(0));
    assert_stream_shape(&frames);
    let text: Vec<&Value> = payload(&frames, "ChatTextSegmentFinished");
    assert_eq!(text[0]["text"], "Zwei Städte");
    // Complete in the order their blocks stopped; arguments whole.
    let requested: Vec<(String, Value)> = payload(&frames, "ChatToolCallRequested")
        .iter()
        .map(|p| {
            (
                p["toolCallId"].as_str().unwrap().to_owned(),
                serde_json::from_str(p["input"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        requested,
        [
            ("toolu_b".to_owned(), json!({"zone": "UTC"})),
            ("toolu_a".to_owned(), json!({"city": "Oslo"})),
        ]
    );
    // echo.yaml declares no tools: both get error results in one user message.
    let second: Value = serde_json::from_str(&server.received()[1].body).unwrap();
    let results = second["messages"][2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r["type"] == "tool_result" && r["is_error"] == true)
    );
}

#[test]
fn anthropic_a_dropped_connection_keeps_what_arrived_and_a_stall_times_out() {
    let server = SseServer::start(vec![quick(vec![
        anthropic_event(
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        ),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "half an ans"})),
    ])]);
    let (frames, code) = run_anthropic(&server);
    assert_eq!(code, Some(1));
    assert_stream_shape(&frames);
    let failed = payload(&frames, "ChatRunFailed")[0];
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("closed before the reply was complete")
    );
    assert_eq!(
        payload(&frames, "ChatTextSegmentFinished")[0]["text"],
        "half an ans"
    );

    let server = SseServer::start(vec![Reply::Stream {
        pieces: vec![(
            anthropic_event(json!({"type": "ping"})),
            Duration::from_secs(20),
        )],
    }]);
    let (frames, code) = run_anthropic_with(&server, &["--timeout-ms", "300"]);
    assert_eq!(code, Some(1));
    let failed = payload(&frames, "ChatRunFailed")[0];
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("sent nothing for 0.3 s"),
        "{failed}"
    );
}
