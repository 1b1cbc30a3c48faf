//! The OTLP trace receiver of the tests: `tests/python/otlp_receiver.py`, which decodes OTLP
//! HTTP/protobuf with the official definitions (PyPI `opentelemetry-proto`; its virtualenv is
//! built once in the target folder) and reports each span as a JSON line.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::Value;

/// A running receiver; stopped when dropped.
pub struct OtlpReceiver {
    child: Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl OtlpReceiver {
    /// Starts it and waits until it listens; `None` when its package cannot be had (said).
    pub fn start() -> Option<Self> {
        let python = crate::TestPackage::OtlpReceiver.ready()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/otlp_receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the OTLP receiver starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines
            .next()
            .and_then(Result::ok)
            .and_then(|line| line.trim().parse().ok())
            .expect("the receiver prints its port");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::clone(&spans);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let span = serde_json::from_str(&line).expect("a span as JSON");
                received.lock().unwrap().push(span);
            }
        });
        Some(Self { child, port, spans })
    }

    /// The base URL to give `--otlp-endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits up to `timeout` for `count` spans.
    pub fn wait_for(&self, count: usize, timeout: Duration) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let spans = self.spans();
            if spans.len() >= count || started.elapsed() > timeout {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
