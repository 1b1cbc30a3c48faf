//! The provider benchmark: a local server streams N deltas as fast as it can, in the OpenAI
//! chat-completions and then the Anthropic Messages wire format; reel takes them through the
//! HTTP client, SSE parsing, the log, the projections and the JSONL sink (into a writer that
//! discards). Reports the process's CPU time and peak memory. The server's own share is
//! included: it only writes bytes encoded before the clock starts. Peak memory is the process's
//! high-water mark, so the second API's figure is "at most".

use std::{
    io::{Read, Write},
    net::TcpListener,
    time::Instant,
};

use reel_engine::{Fanout, Provider, RunOutcome, Session, new_id};
use reel_providers::{AnthropicProvider, HttpConfig, OpenAiProvider};
use reel_sinks::JsonlFrameSink;

/// A wire format the benchmark streams.
#[derive(Clone, Copy, Debug)]
pub enum Api {
    OpenAi,
    Anthropic,
}

pub async fn run(deltas: usize, api: Api) -> anyhow::Result<()> {
    let body = match api {
        Api::OpenAi => openai_body(deltas),
        Api::Anthropic => anthropic_body(deltas),
    };
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        let mut request = [0u8; 64 * 1024];
        let _ = stream.read(&mut request)?;
        stream.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        )?;
        stream.write_all(&body)
    });

    let config = HttpConfig::new(format!("http://127.0.0.1:{port}/v1"));
    let provider: Box<dyn Provider> = match api {
        Api::OpenAi => Box::new(OpenAiProvider::new(config)?),
        Api::Anthropic => Box::new(AnthropicProvider::new(config)?),
    };
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(JsonlFrameSink::new(
        "null",
        std::io::sink(),
        false,
    )));
    let mut session = Session::new(new_id(), fanout);
    let (cpu_before, started) = (cpu_seconds(), Instant::now());
    let outcome = super::run_prompt(&mut session, provider.as_ref()).await;
    let events = session.log().last_ordinal();
    let failures = session.close().await;
    let (cpu, wall) = (cpu_seconds() - cpu_before, started.elapsed().as_secs_f64());
    server
        .join()
        .map_err(|_| anyhow::anyhow!("the bench server crashed"))??;
    if outcome != RunOutcome::Finished || !failures.is_empty() {
        return Err(anyhow::anyhow!(
            "the run did not finish: {outcome:?} {failures:?}"
        ));
    }
    let server = match api {
        Api::OpenAi => "an OpenAI-compatible server",
        Api::Anthropic => "an Anthropic Messages server",
    };
    println!("reel bench: {server} on 127.0.0.1 streams {deltas} deltas as fast as it can");
    println!(
        "{events} events in {wall:.3} s: CPU {cpu:.3} s ({:.1} us per delta), peak RSS {} KiB",
        cpu * 1e6 / deltas as f64,
        super::proc_status_kib("self", "VmHWM")
    );
    Ok(())
}

/// The whole chat-completions response body: N content deltas, a finish and [DONE].
fn openai_body(deltas: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(deltas * 150);
    for i in 0..deltas {
        let chunk = format!(
            r#"{{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"tok{} "}},"finish_reason":null}}]}}"#,
            i % 10
        );
        body.extend_from_slice(format!("data: {chunk}\n\n").as_bytes());
    }
    body.extend_from_slice(br#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    body.extend_from_slice(b"\n\ndata: [DONE]\n\n");
    body
}

/// The whole Messages response body: a text block of N deltas, usage and the stop.
fn anthropic_body(deltas: usize) -> Vec<u8> {
    let event = |kind: &str, data: &str| format!("event: {kind}\ndata: {data}\n\n");
    let mut body = String::with_capacity(deltas * 150);
    body += &event(
        "message_start",
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}"#,
    );
    body += &event(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    for i in 0..deltas {
        let data = format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"tok{} "}}}}"#,
            i % 10
        );
        body += &event("content_block_delta", &data);
    }
    body += &event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    body += &event(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20000}}"#,
    );
    body += &event("message_stop", r#"{"type":"message_stop"}"#);
    body.into_bytes()
}

/// User plus system CPU time of this process, from /proc/self/stat (clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rfind(')').map_or("", |at| &stat[at + 1..]);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |at: usize| {
        fields
            .get(at)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
