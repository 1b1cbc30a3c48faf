//! The benchmark's side of `reel serve`: the child process, its HTTP routes, and event-stream
//! subscribers that count the frames they read and report the moments that are timed.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use anyhow::{Context, bail};
use futures::StreamExt;
use memchr::memmem;
use tokio::sync::mpsc;

/// A `reel serve` child (this binary) on 127.0.0.1; killed when dropped.
pub struct Server {
    child: Child,
    pub base: String,
    pub http: reqwest::Client,
}

impl Server {
    /// Starts `reel serve` on the commands in `commands` and the database `db` with `extra`
    /// flags (`--max-connections N`), and waits until it listens. Its log goes on to this
    /// process's stderr. Nothing is evicted while it is measured.
    pub fn start_with(commands: &Path, db: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_evicting(commands, db, "1h", extra)
    }

    /// As [`Server::start_with`], evicting a session nobody used for `idle_timeout` (`1s`).
    pub fn start_evicting(
        commands: &Path,
        db: &Path,
        idle_timeout: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve", "--listen", "127.0.0.1:0", "--commands"])
            .arg(commands)
            .arg("--timeline-db")
            .arg(db)
            .args(["--idle-timeout", idle_timeout])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start reel serve")?;
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let base = loop {
            let Some(line) = lines.next().transpose()? else {
                bail!("reel serve ended before it listened");
            };
            if let Some(at) = line.find("http://") {
                break line[at..].trim().to_owned();
            }
        };
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("{line}");
            }
        });
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Self { child, base, http })
    }

    /// The server's resident set, in KiB.
    pub fn rss_kib(&self) -> u64 {
        super::super::proc_status_kib(&self.child.id().to_string(), "VmRSS")
    }

    /// The CPU time the server has used, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        crate::cpu_time::cpu_seconds(self.child.id())
    }

    /// The server's open file descriptors.
    pub fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, Iterator::count)
    }

    /// Starts a Durable Streams long-poll of session `id` at its tail, which waits up to a
    /// minute; the task ends with the answer (or when aborted, closing the connection).
    pub fn long_poll(&self, id: &str) -> tokio::task::JoinHandle<()> {
        let url = format!(
            "{}/v1/sessions/{id}/stream?offset=now&live=long-poll&timeout=60",
            self.base
        );
        let http = self.http.clone();
        tokio::spawn(async move {
            let _ = http.get(url).send().await;
        })
    }

    /// Creates session `id` running command `command`.
    pub async fn create(&self, id: &str, command: &str) -> anyhow::Result<()> {
        let body = format!(r#"{{"id":"{id}","command":"{command}"}}"#);
        self.post("/v1/sessions", body, 201).await
    }

    /// Posts one request line to session `id`.
    pub async fn request(&self, id: &str, line: &str) -> anyhow::Result<()> {
        self.post(&format!("/v1/sessions/{id}/requests"), line.to_owned(), 202)
            .await
    }

    /// GETs `path` as JSON.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        let answer = self.http.get(format!("{}{path}", self.base)).send().await?;
        let status = answer.status().as_u16();
        if status != 200 {
            bail!("GET {path}: {status} {}", answer.text().await?);
        }
        Ok(serde_json::from_str(&answer.text().await?)?)
    }

    /// The value of the Prometheus gauge `name` on `/metrics`.
    pub async fn gauge(&self, name: &str) -> anyhow::Result<f64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .text()
            .await?;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .with_context(|| format!("/metrics has no {name}"))
    }

    async fn post(&self, path: &str, body: String, expected: u16) -> anyhow::Result<()> {
        let answer = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = answer.status().as_u16();
        if status != expected {
            bail!("POST {path}: {status} {}", answer.text().await?);
        }
        Ok(())
    }

    /// Subscribes to session `index`'s event stream (`id`), counting its frames into
    /// `frames` and reporting what [`Seen`] names on `seen`. Returns once the stream is open.
    pub async fn subscribe(
        &self,
        index: usize,
        id: &str,
        frames: Arc<AtomicU64>,
        seen: mpsc::UnboundedSender<Seen>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let answer = self
            .http
            .get(format!("{}/v1/sessions/{id}/events", self.base))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("GET events of {id}: {}", answer.status());
        }
        let mut body = answer.bytes_stream();
        Ok(tokio::spawn(async move {
            let mut lines = Lines::default();
            while let Some(Ok(chunk)) = body.next().await {
                lines.read(&chunk, |line| {
                    let Some(frame) = line.strip_prefix(b"data:") else {
                        return;
                    };
                    frames.fetch_add(1, Ordering::Relaxed);
                    if let Some(event) = Seen::of(index, frame) {
                        let _ = seen.send(event);
                    }
                });
            }
        }))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A moment a subscriber reports, with when it read it.
#[derive(Debug)]
pub enum Seen {
    /// The first text delta of a run of session `index`.
    FirstDelta(usize, Instant),
    /// A request of session `index` is done.
    Done(usize),
}

impl Seen {
    /// The moment `frame` (its JSON) is, if any: found by a look at its event's name (two
    /// memchr searches: the subscribers must not take the CPU the server is measured with).
    fn of(index: usize, frame: &[u8]) -> Option<Self> {
        let now = Instant::now();
        if frame.ends_with(b"}}") && memmem::rfind(frame, b"\"done\":{").is_some() {
            return Some(Self::Done(index));
        }
        let at = memmem::find(frame, b"\"name\":\"")? + 8;
        let name = &frame[at..];
        if name.starts_with(b"ChatTextPatch\"")
            && memmem::find(name, b"\"sequence\":\"1\",").is_some()
        {
            Some(Self::FirstDelta(index, now))
        } else {
            None
        }
    }
}

/// Splits a byte stream into lines (without their `\n`).
#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    fn read(&mut self, mut chunk: &[u8], mut line: impl FnMut(&[u8])) {
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            if self.partial.is_empty() {
                line(&chunk[..end]);
            } else {
                self.partial.extend_from_slice(&chunk[..end]);
                line(&self.partial);
                self.partial.clear();
            }
            chunk = &chunk[end + 1..];
        }
        self.partial.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_chunks_are_whole() {
        let mut lines = Lines::default();
        let mut seen = Vec::new();
        for chunk in [&b"data: a"[..], b"b\n\nda", b"ta: c\n"] {
            lines.read(chunk, |line| seen.push(line.to_vec()));
        }
        assert_eq!(
            seen,
            [b"data: ab".to_vec(), Vec::new(), b"data: c".to_vec()]
        );
    }

    #[test]
    fn the_timed_moments_are_recognised() {
        let done = br#"{"requestId":"r","done":{"status":"ok"}}"#;
        assert!(matches!(Seen::of(3, done), Some(Seen::Done(3))));
        let first = br#"{"uiEvent":{"ordinal":"4","name":"ChatTextPatch","payload":{"sequence":"1","text":"a"}}}"#;
        assert!(matches!(Seen::of(1, first), Some(Seen::FirstDelta(1, _))));
        let later = br#"{"uiEvent":{"ordinal":"5","name":"ChatTextPatch","payload":{"sequence":"12","text":"a"}}}"#;
        assert!(Seen::of(1, later).is_none());
    }
}
