//! A model server for tests: HTTP/1.1 on 127.0.0.1, one scripted reply per connection, in the
//! order given, written piece by piece with pauses, as a real streaming API would. It records
//! every request it receives.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
    time::Duration,
};

/// One reply of the server.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `200` with `text/event-stream`: the pieces are written as they are, with a pause after
    /// each; the connection closes after the last one.
    Stream { pieces: Vec<(Vec<u8>, Duration)> },
    /// A status with a JSON body, e.g. 429 or 400.
    Status { status: u16, body: String },
    /// These bytes exactly (status line and headers included), then the connection closes:
    /// for replies no well-behaved server sends, such as a chunked body cut in the middle.
    Raw(Vec<u8>),
}

/// A received request: its head (request line and headers) and body.
#[derive(Clone, Debug)]
pub struct Received {
    pub head: String,
    pub body: String,
}

pub struct SseServer {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl SseServer {
    /// Starts serving `replies`, one per connection, in order.
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        thread::spawn(move || {
            for (reply, stream) in replies.into_iter().zip(listener.incoming()) {
                let Ok(stream) = stream else { break };
                let log = Arc::clone(&log);
                thread::spawn(move || serve(stream, &reply, &log));
            }
        });
        Self { port, received }
    }

    /// The base URL to give reel: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The server's bare address, `http://127.0.0.1:PORT` (as Anthropic's SDKs take a base URL).
    pub fn host_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, reply: &Reply, log: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    log.lock().unwrap().push(Received {
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    });

    let mut stream = stream;
    match reply {
        Reply::Status { status, body } => {
            let response = format!(
                "HTTP/1.1 {status} Status\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
        Reply::Raw(bytes) => {
            let _ = stream.write_all(bytes);
        }
        Reply::Stream { pieces } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            for (piece, pause) in pieces {
                if stream
                    .write_all(piece)
                    .and_then(|()| stream.flush())
                    .is_err()
                {
                    return;
                }
                thread::sleep(*pause);
            }
        }
    }
}

/// A 200 stream of `pieces`, 2 ms apart.
pub fn quick(pieces: Vec<Vec<u8>>) -> Reply {
    Reply::Stream {
        pieces: pieces
            .into_iter()
            .map(|p| (p, Duration::from_millis(2)))
            .collect(),
    }
}

/// `data: JSON\n\n` for a chat.completion.chunk whose choice has `delta`.
pub fn delta_event(delta: serde_json::Value, finish_reason: Option<&str>) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    });
    format!("data: {chunk}\n\n").into_bytes()
}

/// A chunk streaming a piece of tool call `index`: its id and name come with its first piece,
/// then its arguments arrive in pieces.
pub fn tool_call_delta(
    index: u32,
    id: Option<&str>,
    name: Option<&str>,
    arguments: &str,
) -> Vec<u8> {
    let mut function = serde_json::json!({"arguments": arguments});
    if let Some(name) = name {
        function["name"] = serde_json::json!(name);
    }
    let mut call = serde_json::json!({"index": index, "type": "function", "function": function});
    if let Some(id) = id {
        call["id"] = serde_json::json!(id);
    }
    delta_event(serde_json::json!({"tool_calls": [call]}), None)
}

/// The usage chunk sent with `stream_options.include_usage`.
pub fn usage_event(prompt: u32, completion: u32) -> Vec<u8> {
    let chunk = serde_json::json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}});
    format!("data: {chunk}\n\n").into_bytes()
}

pub fn done_event() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

/// `event: TYPE\ndata: JSON\n\n` for an Anthropic Messages stream event; the type is the
/// object's own `type`.
pub fn anthropic_event(event: serde_json::Value) -> Vec<u8> {
    let kind = event["type"].as_str().expect("an event type").to_owned();
    format!("event: {kind}\ndata: {event}\n\n").into_bytes()
}
