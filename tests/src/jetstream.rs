//! The machine's NATS server with JetStream (127.0.0.1:4222), read with the official Rust
//! client (`async-nats`): what a stream holds, and streams made and removed by the tests.

use async_nats::jetstream::{self, stream};

/// The NATS server the tests use.
pub const NATS: &str = "127.0.0.1:4222";

/// One message of a stream: its subject, its headers' message id and ordinal, its payload.
#[derive(Debug, Clone)]
pub struct StreamedEvent {
    pub subject: String,
    pub msg_id: String,
    pub ordinal: u64,
    pub payload: Vec<u8>,
}

async fn context() -> jetstream::Context {
    let client = async_nats::connect(NATS)
        .await
        .expect("the NATS server answers on 127.0.0.1:4222 (.ci/run checks it)");
    jetstream::new(client)
}

/// A stream name of this test run's own, and its subject prefix (streams may not share
/// subjects).
pub fn stream_name(test: &str) -> String {
    format!("REEL_TEST_{test}_{}", std::process::id())
}

/// The sink URI of `stream`, its subjects `STREAM.SESSION.events`.
pub fn sink_of(stream: &str) -> String {
    format!("nats://127.0.0.1:4222/{stream}?subject_prefix={stream}")
}

/// Every message of `stream`, in stream order.
pub async fn stream_events(stream: &str) -> Vec<StreamedEvent> {
    let jetstream = context().await;
    let stream = jetstream
        .get_stream(stream)
        .await
        .expect("the stream exists");
    let info = stream.get_info().await.expect("stream info");
    let mut events = Vec::new();
    for sequence in info.state.first_sequence..=info.state.last_sequence {
        if info.state.messages == 0 {
            break;
        }
        let message = stream.get_raw_message(sequence).await.expect("a message");
        let header = |name: &str| {
            message
                .headers
                .get(name)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        events.push(StreamedEvent {
            subject: message.subject.to_string(),
            msg_id: header("Nats-Msg-Id"),
            ordinal: header("Reel-Ordinal").parse().unwrap_or_default(),
            payload: message.payload.to_vec(),
        });
    }
    events
}

/// How `stream` is configured.
pub async fn stream_config(stream: &str) -> stream::Config {
    let mut stream = context()
        .await
        .get_stream(stream)
        .await
        .expect("the stream exists");
    stream.info().await.expect("stream info").config.clone()
}

/// Makes `stream` over `subjects` (replacing one of that name).
pub async fn make_stream(name: &str, subjects: &[&str]) {
    let jetstream = context().await;
    let _ = jetstream.delete_stream(name).await;
    jetstream
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("the stream is made");
}

/// The messages of `subject` in `stream` as the official Python client (PyPI `nats-py`, its
/// virtualenv built once in the target folder) reads them, one JSON object each: `msg_id`,
/// `ordinal_header`, and the payload's `ordinal` and `name`.
/// `None` when its package cannot be had (said).
pub fn read_with_python(stream: &str, subject: &str) -> Option<Vec<serde_json::Value>> {
    let python = crate::TestPackage::NatsPython.ready()?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python/jetstream_reader.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .args([NATS, stream, subject])
        .output()
        .expect("the Python client runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let messages = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    Some(messages)
}

/// Removes `stream` (the tests clean up the streams they make).
pub async fn delete_stream(name: &str) {
    let _ = context().await.delete_stream(name).await;
}
