//! The Durable Streams readers of the tests, reading a `reel serve` session's stream over HTTP:
//! `tests/node/durable_streams_client.mjs` on the protocol's official TypeScript client
//! (`@durable-streams/client`, locked in `tests/node/package-lock.json`), and
//! `tests/python/durable_streams_client.py` on its Python client (`durable-streams` from PyPI).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::Value;

/// One batch the client handed its subscriber: the frames of one response (or SSE data
/// event) and the offset after them.
#[derive(Clone, Debug)]
pub struct Batch {
    pub offset: String,
    pub up_to_date: bool,
    pub items: Vec<Value>,
}

/// A running reader; killed when dropped.
pub struct StreamReader {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// The offset of its last line (`end`), once it has ended.
    pub end: Option<String>,
}

impl StreamReader {
    /// Starts the client with `options` (see the script: `url`, `token`, `offset`, `live`,
    /// `until`); `None` after saying why when the Node clients cannot be installed here.
    pub fn start(options: &Value) -> Option<Self> {
        let folder = crate::TestPackage::NodeClients.ready()?;
        let mut child = Command::new("node")
            .arg(folder.join("durable_streams_client.mjs"))
            .arg(options.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Some(Self {
            child,
            lines,
            end: None,
        })
    }

    /// The next batch; `None` when the client has ended (its end offset in `end`). Panics when
    /// nothing comes for a minute or the client fails.
    pub fn next_batch(&mut self) -> Option<Batch> {
        if self.end.is_some() {
            return None;
        }
        let line = match self.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(error) => {
                let status = self.child.try_wait();
                panic!("the Durable Streams client said nothing more ({error}; {status:?})")
            }
        };
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the client printed no JSON ({e}): {line}"));
        let offset = value["offset"].as_str().unwrap_or_default().to_owned();
        if value["end"] == true {
            let status = self.child.wait().expect("the client ends");
            assert!(
                status.success(),
                "the Durable Streams client failed: {status}"
            );
            self.end = Some(offset);
            return None;
        }
        Some(Batch {
            offset,
            up_to_date: value["upToDate"] == true,
            items: value["items"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// Every batch until the client ends.
    pub fn all(mut self) -> Vec<Batch> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch() {
            batches.push(batch);
        }
        batches
    }

    /// Stops it at once.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The frames of `batches`, in order.
pub fn frames(batches: &[Batch]) -> Vec<Value> {
    batches
        .iter()
        .flat_map(|b| b.items.iter().cloned())
        .collect()
}

/// What the Python client read of `url` in `mode` (`catch-up`, `long-poll`, `sse`) from
/// `offset`: its frames and its offset after them; `None` after saying why when its virtualenv
/// cannot be built here.
pub fn python_read(url: &str, mode: &str, offset: Option<&str>) -> Option<(Vec<Value>, String)> {
    let python = crate::TestPackage::DurableStreamsPython.ready()?;
    let script = crate::repo_root().join("tests/python/durable_streams_client.py");
    let output = Command::new(python)
        .arg(script)
        .args([url, mode])
        .args(offset)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Python client printed no JSON ({e}): {stdout}"));
    let frames = report["frames"].as_array().cloned().unwrap_or_default();
    Some((
        frames,
        report["offset"].as_str().unwrap_or_default().to_owned(),
    ))
}
