//! A `reel serve` process on 127.0.0.1 for tests, and an HTTP client of it: reqwest for the
//! requests, and eventsource-stream (the SSE parser reel's providers use) for event streams.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use reel_proto::rpc::rpc_line::Frame;

use crate::{reel_binary, repo_root};

mod events;
mod socket;
pub use events::{Events, StreamedFrame};
pub use socket::Socket;

/// A running `reel serve`; killed when dropped.
pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub client: reqwest::Client,
    /// stderr lines after the listening one, as they come.
    pub stderr: mpsc::Receiver<String>,
}

impl Served {
    /// Starts `reel serve --listen 127.0.0.1:0 --command COMMAND --timeline-db DB` with `extra`
    /// flags and `env`, and waits until it listens.
    pub fn start(command: &str, db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let db = db.to_str().expect("a UTF-8 path");
        Self::start_on(command, &["--timeline-db", db], extra, env)
    }

    /// Starts `reel serve` with `flags` choosing its commands (`--command`, `--commands`),
    /// on the SQLite database `db`, with `extra` flags.
    pub fn start_with(flags: &[&str], db: &Path, extra: &[&str]) -> Self {
        let db = db.to_str().expect("a UTF-8 path");
        let mut args = flags.to_vec();
        args.extend(["--timeline-db", db]);
        Self::spawn(&args, extra, &[])
    }

    /// As [`Served::start`], on a PostgreSQL timeline database.
    pub fn start_postgres(command: &str, dsn: &str) -> Self {
        Self::start_on(command, &["--timeline-dsn", dsn], &[], &[])
    }

    /// As [`Served::start_postgres`], with the turns in the same database.
    pub fn start_postgres_with_turns(command: &str, dsn: &str) -> Self {
        Self::start_on(
            command,
            &["--timeline-dsn", dsn, "--turns-dsn", dsn],
            &[],
            &[],
        )
    }

    /// A node of a scale-out on the PostgreSQL database `dsn`, listening on `port` and
    /// registered at `http://127.0.0.1:PORT`.
    pub fn start_node(command: &str, dsn: &str, port: u16) -> Self {
        Self::start_node_at(command, dsn, port, &format!("http://127.0.0.1:{port}"), &[])
    }

    /// A node listening on `port` and registered at `public_url` (a proxy in front of it),
    /// with `env`.
    pub fn start_node_at(
        command: &str,
        dsn: &str,
        port: u16,
        public_url: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let args = ["--command", command, "--timeline-dsn", dsn];
        let listen = format!("127.0.0.1:{port}");
        Self::spawn_on(&listen, &args, &["--public-url", public_url], env)
    }

    /// As [`Served::start`], in a process that may open at most `descriptors` files.
    pub fn start_limited(command: &str, db: &Path, extra: &[&str], descriptors: u32) -> Self {
        let db = db.to_str().expect("a UTF-8 path");
        let mut args = vec!["--command", command, "--timeline-db", db];
        args.extend(extra);
        Self::launch("127.0.0.1:0", &args, &[], Some(descriptors))
    }

    /// A node as [`Served::start_node`], with `extra` flags and `env`.
    pub fn start_node_with(
        command: &str,
        dsn: &str,
        port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let public_url = format!("http://127.0.0.1:{port}");
        let mut args = vec!["--command", command, "--timeline-dsn", dsn, "--public-url"];
        args.push(&public_url);
        Self::spawn_on(&format!("127.0.0.1:{port}"), &args, extra, env)
    }

    /// Its client presents `token` on every request from now on.
    pub fn with_token(mut self, token: &str) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        let value = format!("Bearer {token}").parse().expect("a header value");
        headers.insert(reqwest::header::AUTHORIZATION, value);
        self.client = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("a client");
        self
    }

    fn start_on(command: &str, store: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut args = vec!["--command", command];
        args.extend(store);
        Self::spawn(&args, extra, env)
    }

    fn spawn(args: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_on("127.0.0.1:0", args, extra, env)
    }

    fn spawn_on(listen: &str, args: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = args.to_vec();
        all.extend(extra);
        Self::launch(listen, &all, env, None)
    }

    /// Starts `reel serve --listen LISTEN ARGS`, under a descriptor limit when given (the
    /// shell's `ulimit`, then `exec`: the server keeps the shell's pid).
    fn launch(listen: &str, args: &[&str], env: &[(&str, &str)], descriptors: Option<u32>) -> Self {
        let mut command = match descriptors {
            Some(limit) => {
                let mut shell = Command::new("sh");
                shell
                    .args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\"")])
                    .arg(reel_binary());
                shell
            }
            None => Command::new(reel_binary()),
        };
        let mut child = command
            .args(["serve", "--listen", listen])
            .args(args)
            .env_remove("REEL_LOG")
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("reel serve starts");
        let stderr = BufReader::new(child.stderr.take().expect("piped"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let base = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("reel serve says where it listens");
            if let Some(at) = line.find("http://127.0.0.1:") {
                break line[at..].trim().to_owned();
            }
        };
        Self {
            child,
            base,
            client: reqwest::Client::new(),
            stderr: rx,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs `body` to `path`; returns the status and the JSON answer.
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("the server answers");
        answer(response).await
    }

    /// POSTs to `path` a body that says it is `length` bytes long, sending only its first
    /// kilobyte, and reads the answer: what a server does with a body over its limit before
    /// it is read.
    pub async fn post_oversized(&self, path: &str, length: usize) -> (u16, Value) {
        let address = self.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("the server accepts");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(head.as_bytes())
            .await
            .expect("the head goes out");
        stream
            .write_all(&[b' '; 1024])
            .await
            .expect("a first kilobyte");
        let mut answer = Vec::new();
        // The server may close the connection before reading the rest: that is the point.
        let _ = stream.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let body = serde_json::from_str(body).unwrap_or(Value::String(answer.to_string()));
        (status, body)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        answer(self.send_get(path).await).await
    }

    async fn send_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the server answers")
    }

    /// Reads the server's stderr until a line contains `needle`; the lines read, that one
    /// last. Panics after a minute without it. It waits without blocking the test's runtime
    /// (whose tasks, closing the test's dropped connections, must go on meanwhile).
    pub async fn wait_for_log(&self, needle: &str) -> Vec<String> {
        let mut lines = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.stderr.try_recv() {
                Ok(line) => {
                    let found = line.contains(needle);
                    lines.push(line);
                    if found {
                        return lines;
                    }
                }
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => panic!("no {needle:?} on stderr; it said {lines:#?}"),
            }
        }
    }

    /// GETs `path`; returns the status, the `Content-Type` and the body as text.
    pub async fn get_text(&self, path: &str) -> (u16, String, String) {
        let response = self.send_get(path).await;
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.text().await.expect("a body"))
    }

    /// Creates session `id` with the other `fields` of its body (`"command": …`).
    pub async fn create_with(&self, id: &str, fields: &str) {
        let (status, body) = self
            .post("/v1/sessions", &format!(r#"{{"id":"{id}",{fields}}}"#))
            .await;
        assert_eq!(status, 201, "{body}");
    }

    /// Creates session `id`.
    pub async fn create(&self, id: &str) {
        let (status, body) = self
            .post("/v1/sessions", &format!(r#"{{"id":"{id}"}}"#))
            .await;
        assert_eq!(status, 201, "{body}");
    }

    /// Posts one request line to session `id`; returns its request id.
    pub async fn request(&self, id: &str, line: &str) -> String {
        let (status, body) = self
            .post(&format!("/v1/sessions/{id}/requests"), line)
            .await;
        assert_eq!(status, 202, "{body}");
        body["requestId"].as_str().expect("a request id").to_owned()
    }

    /// Submits `prompt` to session `id` and returns the reply's text, read from an event
    /// stream opened before the submit.
    pub async fn reply(&self, id: &str, prompt: &str) -> String {
        let mut events = self.events(id, None).await;
        let submit = serde_json::json!({ "submit": { "prompt": prompt } });
        let rid = self.request(id, &submit.to_string()).await;
        text_of(&events.until_done(&rid).await)
    }

    /// Opens session `id`'s event stream, from `cursor` (as `Last-Event-ID`) when given.
    pub async fn events(&self, id: &str, cursor: Option<&str>) -> Events {
        let mut request = self
            .client
            .get(self.url(&format!("/v1/sessions/{id}/events")));
        if let Some(cursor) = cursor {
            request = request.header("Last-Event-ID", cursor);
        }
        let response = request.send().await.expect("the server answers");
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Events::of(response.bytes_stream())
    }

    /// Opens session `id`'s event stream over a socket with a tiny receive buffer, as a client
    /// on a slow link: once it stops reading, the server soon cannot write to it. (HTTP/1.0, so
    /// the body is the event text itself.)
    pub async fn events_slowly(&self, id: &str) -> Events {
        let address: std::net::SocketAddr = self
            .base
            .trim_start_matches("http://")
            .parse()
            .expect("an address");
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_recv_buffer_size(4096).expect("a small buffer");
        let mut stream = socket.connect(address).await.expect("the server accepts");
        let request = format!("GET /v1/sessions/{id}/events HTTP/1.0\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("the request goes out");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.expect("the response's head"));
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        let body = futures::stream::unfold(stream, |mut stream| async move {
            let mut buffer = vec![0; 8192];
            match stream.read(&mut buffer).await {
                Ok(0) => None,
                Ok(read) => {
                    buffer.truncate(read);
                    Some((Ok(bytes::Bytes::from(buffer)), stream))
                }
                Err(error) => Some((Err(error), stream)),
            }
        });
        Events::of(body)
    }

    /// Opens a WebSocket on `path` (`/v1/sessions/{id}/ws...`).
    pub async fn websocket(&self, path: &str) -> Socket {
        let url = self.url(path).replacen("http://", "ws://", 1);
        let (socket, response) = tokio_tungstenite::connect_async(url)
            .await
            .expect("the server upgrades");
        assert_eq!(response.status().as_u16(), 101);
        Socket::new(socket)
    }

    /// Opens a WebSocket on `path` as a page at `origin` would (its `Origin` header); the
    /// refusal's status and body when the server refuses the handshake.
    pub async fn websocket_from(&self, path: &str, origin: &str) -> Result<Socket, (u16, String)> {
        use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
        let url = self.url(path).replacen("http://", "ws://", 1);
        let mut request = url.into_client_request().expect("a WebSocket URL");
        let origin = origin.parse().expect("an Origin header value");
        request.headers_mut().insert("origin", origin);
        match tokio_tungstenite::connect_async(request).await {
            Ok((socket, _)) => Ok(Socket::new(socket)),
            Err(tungstenite::Error::Http(response)) => {
                let body = response.body().as_deref().unwrap_or_default();
                let body = String::from_utf8_lossy(body).into_owned();
                Err((response.status().as_u16(), body))
            }
            Err(error) => panic!("the WebSocket handshake failed: {error}"),
        }
    }

    /// Kills the server at once, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// An echoing command (the scripted provider with no script echoes the prompt word by word).
pub fn echo_command() -> String {
    repo_root()
        .join("examples/echo.yaml")
        .to_string_lossy()
        .into_owned()
}

/// The ui events among `frames`, as (ordinal, name, payload): what a stream says whichever
/// request it was read under.
pub fn ui_events(frames: &[StreamedFrame]) -> Vec<(u64, String, Value)> {
    frames
        .iter()
        .filter_map(|f| match f.frame.frame() {
            Frame::UiEvent(ui) => Some((
                ui.ordinal,
                ui.name.clone(),
                f.frame.json["uiEvent"]["payload"].clone(),
            )),
            _ => None,
        })
        .collect()
}

/// The text of the finished text segments among `frames`.
pub fn text_of(frames: &[StreamedFrame]) -> String {
    ui_events(frames)
        .iter()
        .filter(|(_, name, _)| name == "ChatTextSegmentFinished")
        .map(|(_, _, payload)| payload["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}
