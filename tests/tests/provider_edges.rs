//! What the providers send and keep, checked on the wire against servers on 127.0.0.1 that
//! speak the real formats: exact settings (temperature, the reply limit's field, thinking),
//! the model that answered, errors in words a user can act on, secrets that never leave, and
//! Anthropic's usage, base URL, forced tool calls and signed thinking.

use std::path::Path;

use reel_tests::{
    FrameLine, parse_frames, reel,
    sse_server::{Reply, SseServer, anthropic_event, delta_event, done_event, quick, usage_event},
    write_file,
};
use serde_json::{Value, json};

const KEY: &str = "sk-test-77c1d0e5";

fn payloads<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .map(|f| &f.json["uiEvent"]["payload"])
        .collect()
}

/// A command file for `provider` with `extra` lines under `provider:`.
fn command(dir: &Path, provider: &str, extra: &str) -> String {
    write_file(
        dir,
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: Hello there.\nprovider:\n  name: {provider}\n  api_key_env: REEL_TEST_KEY\n{extra}"
        ),
    )
}

/// Runs reel with the key in the environment and logs at debug; returns stdout, stderr and
/// the exit code.
fn run_with_key(args: &[&str]) -> (Vec<u8>, String, Option<i32>) {
    let output = reel(args)
        .env("REEL_TEST_KEY", KEY)
        .env("REEL_LOG", "debug")
        .output()
        .unwrap();
    (
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.code(),
    )
}

fn openai_reply(model: &str) -> Reply {
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": model,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}, "finish_reason": null}]});
    quick(vec![
        format!("data: {chunk}\n\n").into_bytes(),
        delta_event(json!({}), Some("stop")),
        usage_event(5, 2),
        done_event(),
    ])
}

#[test]
fn settings_go_out_exactly_and_the_answering_model_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "  model: gpt-4o\n  temperature: 0.2\n  max_tokens: 100\n",
            "max_tokens",
        ),
        (
            "  model: o3-mini\n  max_tokens: 100\n",
            "max_completion_tokens",
        ),
        (
            "  model: gpt-5-nano\n  max_tokens: 100\n",
            "max_completion_tokens",
        ),
        (
            "  model: llama\n  max_tokens: 100\n  max_tokens_field: max_completion_tokens\n",
            "max_completion_tokens",
        ),
    ];
    for (settings, field) in cases {
        let server = SseServer::start(vec![openai_reply("served-model-2026-01")]);
        let cmd = command(dir.path(), "openai", settings);
        let (stdout, stderr, code) = run_with_key(&[
            "run-command",
            &cmd,
            "--rpc",
            "--base-url",
            &server.base_url(),
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        let body = &server.received()[0].body;
        if settings.contains("temperature") {
            assert!(body.contains("\"temperature\":0.2"), "{body}");
        }
        let request: Value = serde_json::from_str(body).unwrap();
        assert_eq!(request[field], 100, "{settings}: {body}");
        let other = if field == "max_tokens" {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        assert!(request.get(other).is_none(), "{settings}: {body}");
        let frames = parse_frames(&stdout);
        assert_eq!(
            payloads(&frames, "ChatProviderCallFinished")[0]["responseModel"],
            "served-model-2026-01"
        );
    }
    // The flag is an f64 too.
    let server = SseServer::start(vec![openai_reply("m")]);
    let cmd = command(dir.path(), "openai", "  model: m\n");
    let (_, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &server.base_url(),
        "--temperature",
        "0.7",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(server.received()[0].body.contains("\"temperature\":0.7"));
}

fn error_of(stdout: &[u8]) -> String {
    parse_frames(stdout)
        .iter()
        .find_map(|f| {
            f.json
                .get("error")
                .map(|e| e["message"].as_str().unwrap().to_owned())
        })
        .expect("an error frame")
}

#[test]
fn connection_errors_say_what_happened_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path(), "openai", "  model: m\n");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{closed}/v1");
    let (stdout, stderr, code) = run_with_key(&["run-command", &cmd, "--rpc", "--base-url", &base]);
    assert_eq!(code, Some(1), "{stderr}");
    let message = error_of(&stdout);
    assert!(message.contains("Connection refused"), "{message}");
    assert!(message.contains("is the server running"), "{message}");

    // A server that dies in the middle of a chunked reply.
    let cut = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n40\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hal";
    let server = SseServer::start(vec![Reply::Raw(cut.as_bytes().to_vec())]);
    let (stdout, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &server.base_url(),
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    let message = error_of(&stdout);
    assert!(
        message.contains("closed the connection in the middle of the reply"),
        "{message}"
    );
}

/// Every file of a SQLite database (the -wal included), as text.
fn database_text(db: &Path) -> String {
    let mut text = String::new();
    for suffix in ["", "-wal"] {
        let bytes = std::fs::read(format!("{}{suffix}", db.display())).unwrap_or_default();
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}

/// Runs an OpenAI command (written in `dir`) against a server that refuses it with 401 and
/// `body`, storing session `k` in `dir/t.db`, with `more` flags.
fn refused_with(dir: &Path, body: &Value, more: &[&str]) -> (Vec<u8>, String, Option<i32>) {
    let cmd = command(dir, "openai", "  model: m\n");
    let db = dir.join("t.db");
    let server = SseServer::start(vec![Reply::Status {
        status: 401,
        body: body.to_string(),
    }]);
    let base_url = server.base_url();
    let mut args = vec![
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &base_url,
        "--session-id",
        "k",
        "--timeline-db",
        db.to_str().unwrap(),
    ];
    args.extend(more);
    run_with_key(&args)
}

#[test]
fn a_key_or_a_url_password_echoed_back_is_redacted_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path(), "openai", "  model: m\n");
    let db = dir.path().join("t.db");
    let debug = dir.path().join("debug.jsonl");
    let echoed = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your key at ..."), "type": "invalid_request_error"}});
    let (stdout, stderr, code) = refused_with(
        dir.path(),
        &echoed,
        &["--debug-events-jsonl", debug.to_str().unwrap()],
    );
    assert_eq!(code, Some(1));
    let message = error_of(&stdout);
    assert!(
        message.contains("Incorrect API key provided: [redacted]"),
        "{message}"
    );
    for (place, text) in [
        ("stdout", String::from_utf8_lossy(&stdout).into_owned()),
        ("stderr", stderr),
        ("debug file", std::fs::read_to_string(&debug).unwrap()),
        ("database", database_text(&db)),
    ] {
        assert!(!text.contains(KEY), "the key is in the {place}");
    }

    // Credentials in the base URL, and a connection that fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://me:hunter2-secret@127.0.0.1:{closed}/v1?key=q-secret-0451");
    let (stdout, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &base,
        "--debug-events-jsonl",
        debug.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    let debug_text = std::fs::read_to_string(&debug).unwrap();
    for text in [
        String::from_utf8_lossy(&stdout).into_owned(),
        stderr,
        debug_text,
    ] {
        assert!(
            !text.contains("hunter2-secret") && !text.contains("q-secret-0451"),
            "{text}"
        );
        assert!(text.contains("[redacted]"), "{text}");
    }
}

#[test]
fn a_key_echoed_back_in_base64_is_redacted_everywhere() {
    use base64::{
        Engine,
        engine::general_purpose::{STANDARD, URL_SAFE},
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    // The credential as gateways echo it: the key alone, a Basic pair, a header line, in both
    // alphabets (each a different alignment of the key inside the encoded text).
    let echoed: Vec<String> = ["", "user:", "Bearer "]
        .iter()
        .flat_map(|prefix| {
            let plain = format!("{prefix}{KEY}");
            [STANDARD.encode(&plain), URL_SAFE.encode(&plain)]
        })
        .collect();
    let body = json!({"error": {"message": format!("bad credentials: {}", echoed.join(" ")), "type": "invalid_request_error"}});
    let (stdout, stderr, code) = refused_with(dir.path(), &body, &[]);
    assert_eq!(code, Some(1));
    assert!(
        error_of(&stdout).contains("[redacted]"),
        "{}",
        error_of(&stdout)
    );
    for (place, text) in [
        ("stdout", String::from_utf8_lossy(&stdout).into_owned()),
        ("stderr", stderr),
        ("database", database_text(&db)),
    ] {
        for form in &echoed {
            // What may be left of an encoded key is a few characters at each end.
            let middle = &form[form.len() / 2 - 4..form.len() / 2 + 4];
            assert!(
                !text.contains(middle),
                "the key's base64 {form} is in the {place}"
            );
        }
    }
}

fn start(usage: Value) -> Vec<u8> {
    anthropic_event(
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "model": "claude-test-2026", "content": [], "usage": usage}}),
    )
}

fn block_start(index: u32, block: Value) -> Vec<u8> {
    anthropic_event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_delta(index: u32, delta: Value) -> Vec<u8> {
    anthropic_event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn block_stop(index: u32) -> Vec<u8> {
    anthropic_event(json!({"type": "content_block_stop", "index": index}))
}

fn message_end(stop_reason: &str) -> Vec<Vec<u8>> {
    vec![
        anthropic_event(
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 7}}),
        ),
        anthropic_event(json!({"type": "message_stop"})),
    ]
}

fn text_reply(usage: Value, text: &str) -> Reply {
    let mut pieces = vec![
        start(usage),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": text})),
        block_stop(0),
    ];
    pieces.extend(message_end("end_turn"));
    quick(pieces)
}

#[test]
fn anthropic_cache_reads_are_counted_once_and_the_host_is_a_base_url() {
    let dir = tempfile::tempdir().unwrap();
    let server = SseServer::start(vec![text_reply(
        json!({"input_tokens": 29, "cache_read_input_tokens": 30, "output_tokens": 1}),
        "Hello.",
    )]);
    let cmd = command(dir.path(), "anthropic", "  model: claude-test\n");
    let db = dir.path().join("t.db");
    let turns = dir.path().join("turns.db");
    let (_, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &server.host_url(),
        "--session-id",
        "c",
        "--timeline-db",
        db.to_str().unwrap(),
        "--turns-db",
        turns.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        server.received()[0]
            .head
            .starts_with("POST /v1/messages HTTP/1.1"),
        "{}",
        server.received()[0].head
    );
    let shown = reel(&["show", "c", "--timeline-db", db.to_str().unwrap()])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("59 in (30 cached) / 7 out tokens"),
        "{shown}"
    );
    assert!(
        shown.contains("anthropic claude-test (answered by claude-test-2026)"),
        "{shown}"
    );
    let mut view = reel_tests::TimelineDb::open(&turns);
    let usage = view.turn_usage("c");
    assert_eq!(
        (usage[0].run.0, usage[0].run.2),
        (59, 30),
        "input and cached, each once"
    );
}

#[test]
fn a_forced_anthropic_call_gets_the_prefill_and_a_warning_when_no_call_comes() {
    let dir = tempfile::tempdir().unwrap();
    let server = SseServer::start(vec![text_reply(
        json!({"input_tokens": 3}),
        "Paris is sunny, I think.",
    )]);
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nprompt: Weather?\nprovider:\n  name: anthropic\n  model: m\n  tool_call_prefill: \"<tool_call>\\n\"\ntools:\n  - name: get_weather\n    description: Weather.\n    executor:\n      command: [echo, sunny]\ntool_choice: required\n",
    );
    let (stdout, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &server.base_url(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let request: Value = serde_json::from_str(&server.received()[0].body).unwrap();
    assert_eq!(request["tool_choice"], json!({"type": "any"}));
    let last = request["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last,
        json!({"role": "assistant", "content": [{"type": "text", "text": "<tool_call>\n"}]})
    );
    let frames = parse_frames(&stdout);
    let warnings = payloads(&frames, "ChatRunWarning");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0]["code"], "required_tool_call_missing");
    assert!(stderr.contains("had to call a tool"), "{stderr}");
}

#[test]
fn extended_thinking_keeps_its_signature_and_sends_it_back_in_the_tool_loop() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = vec![
        start(json!({"input_tokens": 10})),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        block_delta(
            0,
            json!({"type": "thinking_delta", "thinking": "I should look it up."}),
        ),
        block_delta(
            0,
            json!({"type": "signature_delta", "signature": "sig-abc"}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "redacted_thinking", "data": "enc-xyz"})),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        ),
        block_delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"city\":\"Paris\"}"}),
        ),
        block_stop(2),
    ];
    first.extend(message_end("tool_use"));
    let server = SseServer::start(vec![
        quick(first),
        text_reply(json!({"input_tokens": 20}), "Sunny."),
    ]);
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nprompt: Weather?\nprovider:\n  name: anthropic\n  model: m\n  max_tokens: 4096\n  thinking_budget_tokens: 2048\ntools:\n  - name: get_weather\n    description: Weather.\n    executor:\n      command: [echo, sunny]\n",
    );
    let (stdout, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--include-backend-events",
        "--base-url",
        &server.base_url(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let requests = server.received();
    let first: Value = serde_json::from_str(&requests[0].body).unwrap();
    assert_eq!(
        first["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    let second: Value = serde_json::from_str(&requests[1].body).unwrap();
    assert_eq!(
        second["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "I should look it up.", "signature": "sig-abc"},
            {"type": "redacted_thinking", "data": "enc-xyz"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ])
    );
    // The signatures are on the log, so a resumed or replayed session sends the same.
    let frames = parse_frames(&stdout);
    let signed: Vec<&FrameLine> = frames
        .iter()
        .filter(|f| f.json["backendEvent"]["name"] == "ChatReasoningSignature")
        .collect();
    assert_eq!(signed.len(), 2);

    // Anthropic's rules are checked before any call: no temperature beside thinking.
    let (_, stderr, code) = run_with_key(&[
        "run-command",
        &cmd,
        "--rpc",
        "--base-url",
        &server.base_url(),
        "--temperature",
        "0.5",
    ]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("temperature"), "{stderr}");
}
