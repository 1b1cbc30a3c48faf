//! OpenTelemetry traces over OTLP HTTP/protobuf, received on 127.0.0.1 by a receiver that
//! decodes them with the official `opentelemetry-proto` definitions: the span tree of a run with
//! a tool call, the GenAI attributes, the ordinals of the log, no text unless asked for, and an
//! endpoint that is down.

use std::{collections::HashMap, time::Duration};

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    otlp_receiver::OtlpReceiver,
    parse_frames, reel, run,
    sse_server::{SseServer, delta_event, done_event, quick, usage_event},
    write_file,
};
use serde_json::Value;

/// The weather example (two model calls around one tool call) with `model` and frames.
const ARGS: [&str; 7] = [
    "run-command",
    "examples/weather-tool.yaml",
    "--model",
    "test-model-1",
    "--output",
    "jsonl",
    "--include-backend-events",
];

/// The spans of the run: four of them (a run, two model calls, a tool execution).
fn spans_of(receiver: &OtlpReceiver) -> Vec<Value> {
    let spans = receiver.wait_for(4, Duration::from_secs(30));
    assert_eq!(spans.len(), 4, "{spans:#?}");
    spans
}

fn named_spans<'a>(spans: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
        .collect()
}

/// The ordinals of each event name in the run's stdout.
fn ordinals(stdout: &[u8]) -> HashMap<String, Vec<i64>> {
    let mut ordinals: HashMap<String, Vec<i64>> = HashMap::new();
    for frame in parse_frames(stdout) {
        if let Frame::BackendEvent(event) = frame.frame() {
            ordinals
                .entry(event.name.clone())
                .or_default()
                .push(event.ordinal as i64);
        }
    }
    ordinals
}

#[test]
fn a_run_is_a_tree_of_genai_spans_carrying_the_logs_ordinals() {
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let mut args = ARGS.to_vec();
    let endpoint = receiver.endpoint();
    args.extend(["--otlp-endpoint", &endpoint]);
    let output = run(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let session = parse_frames(&output.stdout)[0].line.session_id.clone();
    let logged = ordinals(&output.stdout);
    let spans = spans_of(&receiver);
    let [run_span] = named_spans(&spans, "invoke_agent")[..] else {
        panic!("one run span: {spans:#?}")
    };
    let calls = named_spans(&spans, "chat test-model-1");
    let tools = named_spans(&spans, "execute_tool get_weather");
    assert_eq!((calls.len(), tools.len()), (2, 1), "{spans:#?}");
    // One trace; the run is its root, the calls and the tool its children, inside its time.
    assert_eq!(run_span["parent_span_id"], "");
    assert_eq!(run_span["kind"], "SPAN_KIND_INTERNAL");
    for child in calls.iter().chain(&tools) {
        assert_eq!(child["trace_id"], run_span["trace_id"]);
        assert_eq!(child["parent_span_id"], run_span["span_id"]);
        assert!(child["start_ns"].as_u64() >= run_span["start_ns"].as_u64());
        assert!(child["end_ns"].as_u64() <= run_span["end_ns"].as_u64());
        assert!(child["start_ns"].as_u64() <= child["end_ns"].as_u64());
    }
    for span in &spans {
        assert_eq!(span["content_type"], "application/x-protobuf");
        assert_eq!(span["service"], "reel");
        assert_eq!(span["status"], "STATUS_CODE_UNSET", "{span}");
        let attributes = &span["attributes"];
        assert_eq!(attributes["gen_ai.conversation.id"], session.as_str());
        assert_eq!(attributes["reel.session.id"], session.as_str());
    }
    // The GenAI attributes.
    let run_attributes = &run_span["attributes"];
    assert_eq!(run_attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(
        run_attributes["reel.ordinal.start"],
        logged["ChatRunStarted"][0]
    );
    assert_eq!(
        run_attributes["reel.ordinal.end"],
        logged["ChatRunFinished"][0]
    );
    for (at, call) in calls.iter().enumerate() {
        let attributes = &call["attributes"];
        assert_eq!(call["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.system"], "scripted");
        assert_eq!(attributes["gen_ai.request.model"], "test-model-1");
        assert!(
            attributes["gen_ai.usage.input_tokens"].is_i64(),
            "{attributes}"
        );
        assert!(
            attributes["gen_ai.usage.output_tokens"].is_i64(),
            "{attributes}"
        );
        assert_eq!(
            attributes["reel.ordinal.start"],
            logged["ChatProviderCallStarted"][at]
        );
        assert_eq!(
            attributes["reel.ordinal.end"],
            logged["ChatProviderCallFinished"][at]
        );
    }
    let mut reasons: Vec<&Value> = calls
        .iter()
        .map(|c| &c["attributes"]["gen_ai.response.finish_reasons"])
        .collect();
    reasons.sort_by_key(|r| r.to_string());
    assert_eq!(
        reasons,
        [
            &serde_json::json!(["stop"]),
            &serde_json::json!(["tool_calls"])
        ]
    );
    let tool = &tools[0]["attributes"];
    assert_eq!(tool["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool["gen_ai.tool.name"], "get_weather");
    assert!(!tool["gen_ai.tool.call.id"].as_str().unwrap().is_empty());
    assert_eq!(
        tool["reel.ordinal.start"],
        logged["ChatToolExecutionStarted"][0]
    );
    assert_eq!(tool["reel.ordinal.end"], logged["ChatToolCallFinished"][0]);
    // No text of the conversation unless asked for: not the prompt's city, not the reply.
    let everything = serde_json::to_string(&spans).unwrap();
    assert!(!everything.contains("Paris"), "{everything}");
    assert!(!everything.contains("gen_ai.input.messages"));
}

#[test]
fn the_standard_variables_choose_the_endpoint_the_service_and_the_content() {
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let output = reel(&ARGS)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "weather-app")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let spans = spans_of(&receiver);
    assert!(spans.iter().all(|s| s["service"] == "weather-app"));
    let run_span = named_spans(&spans, "invoke_agent")[0];
    let input = run_span["attributes"]["gen_ai.input.messages"]
        .as_str()
        .unwrap();
    let input: Value = serde_json::from_str(input).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert!(
        input[0]["parts"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Paris")
    );
    let tool = &named_spans(&spans, "execute_tool")[0]["attributes"];
    assert!(
        tool["gen_ai.tool.call.arguments"]
            .as_str()
            .unwrap()
            .contains("Paris")
    );
    assert!(!tool["gen_ai.tool.call.result"].as_str().unwrap().is_empty());
    let answers: Vec<String> = named_spans(&spans, "chat")
        .iter()
        .filter_map(|c| c["attributes"]["gen_ai.output.messages"].as_str())
        .map(str::to_owned)
        .collect();
    assert_eq!(answers.len(), 2);
    assert!(
        answers.iter().any(|a| a.contains("Paris")),
        "the forecast reply: {answers:?}"
    );
}

#[test]
fn an_endpoint_that_is_down_costs_the_run_nothing_but_a_warning() {
    let port = reel_tests::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut args = ARGS.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let output = run(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        parse_frames(&output.stdout).last().unwrap().done_status(),
        Some("ok")
    );
    assert!(stderr.contains("cannot export traces"), "{stderr}");
}

#[test]
fn an_endpoint_that_is_no_url_is_refused_before_anything_runs() {
    let output = run(&[
        "run-command",
        "examples/haiku.yaml",
        "--otlp-endpoint",
        "ftp://127.0.0.1:9",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--otlp-endpoint"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn a_real_providers_call_carries_its_response_model_and_tokens() {
    // An OpenAI-compatible server on 127.0.0.1 whose chunks name a dated model.
    let named = |delta: Value, finish: Option<&str>| {
        let chunk = serde_json::json!({
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "test-model-2026-01",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {chunk}\n\n").into_bytes()
    };
    let server = SseServer::start(vec![quick(vec![
        named(serde_json::json!({"content": "Hi"}), None),
        delta_event(serde_json::json!({}), Some("stop")),
        usage_event(7, 3),
        done_event(),
    ])]);
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(
        dir.path(),
        "cmd.yaml",
        "name: t\ndescription: t\nprompt: Say hello.\nprovider:\n  name: openai\n  model: test-model\n  api_key_env: REEL_TEST_KEY\n",
    );
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let output = reel(&[
        "run-command",
        &command,
        "--rpc",
        "--base-url",
        &server.base_url(),
        "--otlp-endpoint",
        &receiver.endpoint(),
    ])
    .env("REEL_TEST_KEY", "sk-test")
    .output()
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let spans = receiver.wait_for(2, Duration::from_secs(30));
    let call = named_spans(&spans, "chat test-model");
    assert_eq!(call.len(), 1, "{spans:#?}");
    let attributes = &call[0]["attributes"];
    assert_eq!(attributes["gen_ai.system"], "openai");
    assert_eq!(attributes["gen_ai.request.model"], "test-model");
    assert_eq!(attributes["gen_ai.response.model"], "test-model-2026-01");
    assert_eq!(attributes["gen_ai.usage.input_tokens"], 7);
    assert_eq!(attributes["gen_ai.usage.output_tokens"], 3);
    assert_eq!(
        attributes["gen_ai.response.finish_reasons"],
        serde_json::json!(["stop"])
    );
}

#[test]
fn a_failed_model_call_and_its_run_have_error_statuses() {
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let output = run(&[
        "run-command",
        "examples/failing-model.yaml",
        "--otlp-endpoint",
        &receiver.endpoint(),
    ]);
    assert_eq!(output.status.code(), Some(1), "the run failed");
    let spans = receiver.wait_for(2, Duration::from_secs(30));
    assert_eq!(spans.len(), 2, "{spans:#?}");
    for span in &spans {
        assert_eq!(span["status"], "STATUS_CODE_ERROR", "{span}");
        assert!(
            !span["status_message"].as_str().unwrap().is_empty(),
            "{span}"
        );
    }
    let run_span = named_spans(&spans, "invoke_agent")[0];
    let call = named_spans(&spans, "chat")[0];
    assert_eq!(call["parent_span_id"], run_span["span_id"]);
}
