//! The tool loop against real HTTP servers on 127.0.0.1 speaking each API's SSE:
//! `examples/weather-tool.yaml` run with `--provider openai` and `--provider anthropic`. The
//! model asks for `get_weather`, reel runs the example's command tool, sends the result back,
//! and the model answers: two model calls, every lifecycle event in order, and the second
//! request carrying the tool call and its result in the API's own shape. And the API key in no
//! output, database or tool.

use reel_tests::{
    FrameLine, assert_stream_shape, parse_frames, reel,
    sse_server::{
        SseServer, anthropic_event, delta_event, done_event, quick, tool_call_delta, usage_event,
    },
    ui_names,
};
use serde_json::{Value, json};

const KEY: &str = "sk-tool-loop-77e1";

/// Runs the weather example against `server` as `provider`, checks it succeeded without
/// showing the key anywhere, and returns its frames.
fn run_weather(server: &SseServer, provider: &str, key_env: &str) -> Vec<FrameLine> {
    let dir = tempfile::tempdir().unwrap();
    let debug = dir.path().join("debug.jsonl");
    let base_url = server.base_url();
    let output = reel(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--provider",
        provider,
        "--base-url",
        &base_url,
        "--model",
        "test-model",
        "--rpc",
        "--include-backend-events",
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ])
    .env(key_env, KEY)
    .env("REEL_LOG", "debug")
    .output()
    .unwrap();
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let debug = std::fs::read_to_string(&debug).unwrap();
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY) && !debug.contains(KEY),
        "the API key leaked"
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    parse_frames(&output.stdout)
}

fn payload<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

/// The checks both providers share: the lifecycle in order, one tool execution between two
/// model calls, the tool's real output as the result, correlation ids that tie them together.
fn assert_two_iteration_loop(frames: &[FrameLine], tool_call_id: &str) {
    assert_stream_shape(frames);
    let names = ui_names(frames);
    let milestones: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| {
            n.starts_with("ChatTool")
                || n.starts_with("ChatProviderCall") && !n.ends_with("MetadataUpdated")
                || n.starts_with("ChatRun")
        })
        .collect();
    let mut deduped = milestones.clone();
    deduped.dedup();
    assert_eq!(
        deduped,
        [
            "ChatRunStarted",
            "ChatProviderCallStarted",
            "ChatToolCallStarted",
            "ChatToolArgumentsPatch",
            "ChatToolCallRequested",
            "ChatProviderCallFinished",
            "ChatToolExecutionStarted",
            "ChatToolResultReady",
            "ChatToolCallFinished",
            "ChatProviderCallStarted",
            "ChatProviderCallFinished",
            "ChatRunFinished",
        ],
        "{names:?}"
    );
    let result = payload(frames, "ChatToolResultReady")[0];
    assert_eq!(result["toolCallId"], tool_call_id);
    assert_eq!(result["toolName"], "get_weather");
    assert_ne!(result["isError"], true);
    let output: Value = serde_json::from_str(result["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        output,
        json!({"city": "Paris", "forecast": "sunny", "temperature_c": 21})
    );
    // Correlation: the result names the tool call and the run the call belongs to.
    let started = payload(frames, "ChatRunStarted")[0];
    assert_eq!(
        result["correlation"]["runId"],
        started["correlation"]["runId"]
    );
    assert_eq!(result["correlation"]["toolCallId"], tool_call_id);
    let finished = payload(frames, "ChatToolCallFinished")[0];
    assert_eq!(finished["status"], "completed");
    let calls = payload(frames, "ChatProviderCallStarted");
    assert_ne!(
        calls[0]["correlation"]["providerCallId"],
        calls[1]["correlation"]["providerCallId"]
    );
    let answer: Vec<&str> = payload(frames, "ChatTextSegmentFinished")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer.last(), Some(&"Sunny, 21 °C in Paris."));
}

#[test]
fn openai_runs_a_two_iteration_tool_loop_with_a_command_tool() {
    let tool_delta = |id, name, arguments| tool_call_delta(0, id, name, arguments);
    let server = SseServer::start(vec![
        quick(vec![
            tool_delta(Some("call_w1"), Some("get_weather"), ""),
            tool_delta(None, None, "{\"city\": "),
            tool_delta(None, None, "\"Paris\"}"),
            delta_event(json!({}), Some("tool_calls")),
            usage_event(80, 12),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "Sunny, 21 °C"}), None),
            delta_event(json!({"content": " in Paris."}), Some("stop")),
            usage_event(120, 9),
            done_event(),
        ]),
    ]);
    let frames = run_weather(&server, "openai", "OPENAI_API_KEY");
    assert_two_iteration_loop(&frames, "call_w1");

    let requests = server.received();
    assert_eq!(requests.len(), 2);
    let first: Value = serde_json::from_str(&requests[0].body).unwrap();
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["required"],
        json!(["city"])
    );
    let second: Value = serde_json::from_str(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["tool_calls"][0]["id"], "call_w1");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        "{\"city\": \"Paris\"}"
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], "call_w1");
    assert!(messages[2]["content"].as_str().unwrap().contains("sunny"));
}

/// The events of an Anthropic reply that says `text`, then calls get_weather.
fn anthropic_tool_reply() -> Vec<Vec<u8>> {
    vec![
        anthropic_event(json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": "test-model", "stop_reason": null,
            "usage": {"input_tokens": 90, "output_tokens": 1, "cache_read_input_tokens": 40}}})),
        anthropic_event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The user wants weather."}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}})),
        anthropic_event(json!({"type": "content_block_stop", "index": 0})),
        anthropic_event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Let me check."}})),
        anthropic_event(json!({"type": "content_block_stop", "index": 1})),
        anthropic_event(json!({"type": "ping"})),
        anthropic_event(json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "ris\"}"}})),
        anthropic_event(json!({"type": "content_block_stop", "index": 2})),
        anthropic_event(json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 35}})),
        anthropic_event(json!({"type": "message_stop"})),
    ]
}

fn anthropic_text_reply() -> Vec<Vec<u8>> {
    vec![
        anthropic_event(json!({"type": "message_start", "message": {
            "id": "msg_2", "type": "message", "role": "assistant", "content": [],
            "usage": {"input_tokens": 140, "output_tokens": 1}}})),
        anthropic_event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Sunny, 21 °C"}})),
        b": a comment line\n\n".to_vec(),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": " in Paris."}})),
        anthropic_event(json!({"type": "content_block_stop", "index": 0})),
        anthropic_event(json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})),
        anthropic_event(json!({"type": "message_stop"})),
    ]
}

#[test]
fn anthropic_runs_a_two_iteration_tool_loop_with_a_command_tool() {
    let server = SseServer::start(vec![
        quick(anthropic_tool_reply()),
        quick(anthropic_text_reply()),
    ]);
    let frames = run_weather(&server, "anthropic", "ANTHROPIC_API_KEY");
    assert_two_iteration_loop(&frames, "toolu_01");
    let reasoning = payload(&frames, "ChatReasoningSegmentFinished");
    assert_eq!(reasoning[0]["text"], "The user wants weather.");
    let calls = payload(&frames, "ChatProviderCallFinished");
    assert_eq!(calls[0]["stopReason"], "tool_use");
    assert_eq!(calls[0]["finishClass"], "tool_calls");
    assert_eq!(calls[0]["usage"]["inputTokens"], 90);
    assert_eq!(calls[0]["usage"]["outputTokens"], 35);
    assert_eq!(calls[0]["usage"]["cacheReadInputTokens"], 40);
    assert_eq!(calls[1]["stopReason"], "end_turn");

    let requests = server.received();
    assert_eq!(requests.len(), 2);
    let head = &requests[0].head;
    assert!(head.starts_with("POST /v1/messages HTTP/1.1"), "{head}");
    assert!(head.contains(&format!("x-api-key: {KEY}")));
    assert!(head.contains("anthropic-version: 2023-06-01"));
    let first: Value = serde_json::from_str(&requests[0].body).unwrap();
    assert_eq!(first["stream"], true);
    assert!(first["max_tokens"].as_u64().unwrap() > 0);
    assert_eq!(first["tools"][0]["name"], "get_weather");
    assert_eq!(
        first["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );
    let second: Value = serde_json::from_str(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        ])
    );
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_01");
    assert_eq!(messages[2]["content"][0]["is_error"], false);
}

/// The key in no frame, log line, debug file or database, and not in a tool's environment
/// either (a tool could print it into a result, and from there into everything else).
#[test]
fn the_api_key_reaches_no_output_no_database_and_no_tool() {
    let dir = tempfile::tempdir().unwrap();
    let command = reel_tests::write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nprompt: Show me the key.\nprovider:\n  name: openai\n  model: m\n  api_key_env: REEL_SECRET_KEY\ntools:\n  - name: env\n    description: Prints the key variable.\n    executor:\n      command: [sh, -c, 'printf \"%s\" \"${REEL_SECRET_KEY:-the key is hidden}\"']\n",
    );
    let tool_call = |arguments: &str, id: Option<&str>, name: Option<&str>| {
        let mut function = json!({"arguments": arguments});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": 0, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        delta_event(json!({"tool_calls": [call]}), None)
    };
    let server = SseServer::start(vec![
        quick(vec![
            tool_call("{}", Some("call_env"), Some("env")),
            delta_event(json!({}), Some("tool_calls")),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "No key here."}), Some("stop")),
            done_event(),
        ]),
    ]);
    let timeline = dir.path().join("timeline.db");
    let turns = dir.path().join("turns.db");
    let debug = dir.path().join("debug.jsonl");
    let base_url = server.base_url();
    let output = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--include-backend-events",
        "--base-url",
        &base_url,
        "--session-id",
        "secret",
        "--timeline-db",
        timeline.to_str().unwrap(),
        "--turns-db",
        turns.to_str().unwrap(),
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ])
    .env("REEL_SECRET_KEY", KEY)
    .env("REEL_LOG", "trace")
    .output()
    .unwrap();
    assert!(output.status.success());
    let frames = parse_frames(&output.stdout);
    assert_eq!(
        payload(&frames, "ChatToolResultReady")[0]["result"],
        "the key is hidden"
    );
    // The key did reach the server, in its header.
    assert!(
        server.received()[0]
            .head
            .contains(&format!("authorization: Bearer {KEY}"))
    );
    let mut places = vec![
        ("stdout", output.stdout.clone()),
        ("stderr", output.stderr.clone()),
        ("debug file", std::fs::read(&debug).unwrap()),
    ];
    // Every file the databases consist of (WAL and shared memory included).
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("timeline.db") || name.starts_with("turns.db") {
            places.push(("database", std::fs::read(&path).unwrap()));
        }
    }
    assert!(places.len() >= 5, "both databases were written");
    for (place, bytes) in places {
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the API key is in the {place}"
        );
    }
}
