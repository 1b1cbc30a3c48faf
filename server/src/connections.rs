//! The server's connections, each bounded in number, in time and at the end.
//!
//! * At most `--max-connections` at once (by default a quarter below the process's descriptor
//!   limit, so that sessions, databases and sinks keep theirs): one more is answered 503
//!   `server_busy` and closed, so a flood of connections cannot take the descriptors the
//!   server needs nor keep `/healthz` from answering.
//! * A request's head must arrive within [`HEADER_TIMEOUT`] of the connection's start or of the
//!   previous response: a connection that sends nothing, or half a request, is closed then.
//! * A write that makes no progress for [`WRITE_STALL`] (a client that stopped reading)
//!   closes the connection (see [`crate::guarded_io`]); streams that are read go on for as
//!   long as they are read, with heartbeats keeping them busy.
//! * When the server stops, it takes no new connection, lets each finish its request, and
//!   after the grace period closes every one that is left, WebSockets included.
//!
//! axum's own `serve` offers none of these, so the connections are served here with hyper's
//! HTTP/1 connection, as axum does underneath.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, body::Body, extract::Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

use crate::guarded_io::GuardedIo;

/// How long a client has to send a request's head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a write may wait for a client to read before the connection is closed.
pub const WRITE_STALL: Duration = Duration::from_secs(60);

/// Connections being told "busy" at once at most; more are closed without a word.
const REFUSING_AT_ONCE: usize = 16;

/// How long the "busy" answer may take to go out.
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// How long a refused client's request is read (and dropped) after the answer.
const REFUSAL_DRAIN: Duration = Duration::from_millis(250);

/// The connection limit when none is given: a quarter of the descriptor limit (at least 64)
/// stays for sessions, databases, sinks and tools.
pub fn default_max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(65_536)
        .min(1 << 20) as usize;
    limit.saturating_sub((limit / 4).max(64)).max(1)
}

/// The connections of one server.
pub struct Connections {
    app: Router,
    slots: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    max: usize,
    tasks: TaskTracker,
    /// Asks every connection to end after its request (hyper's graceful shutdown).
    finishing: CancellationToken,
    /// Closes every connection at once.
    closing: CancellationToken,
    /// When the limit was last said to be reached, and an accept last said to fail.
    full: Mutex<Option<Instant>>,
    accept_failed: Mutex<Option<Instant>>,
}

impl Connections {
    pub fn new(app: Router, max: usize) -> Arc<Self> {
        Arc::new(Self {
            app,
            slots: Arc::new(Semaphore::new(max)),
            refusing: Arc::new(Semaphore::new(REFUSING_AT_ONCE)),
            max,
            tasks: TaskTracker::new(),
            finishing: CancellationToken::new(),
            closing: CancellationToken::new(),
            full: Mutex::new(None),
            accept_failed: Mutex::new(None),
        })
    }

    /// Accepts connections until `stop` is cancelled, then asks each to finish its request.
    pub async fn accept(self: &Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => self.take(stream),
                // Out of descriptors (or memory): the connections that end give theirs back.
                Err(error) => {
                    if once_a_minute(&self.accept_failed) {
                        tracing::warn!("cannot accept a connection: {error}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(listener);
        self.finishing.cancel();
        self.tasks.close();
    }

    /// Closes every connection that is left.
    pub fn close_all(&self) {
        self.closing.cancel();
    }

    /// Resolves once every connection has ended.
    pub async fn ended(&self) {
        self.tasks.wait().await;
    }

    fn take(self: &Arc<Self>, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => {
                let io = GuardedIo::new(stream, slot, self.closing.clone());
                let this = Arc::clone(self);
                self.tasks.spawn(async move { this.serve(io).await });
            }
            Err(_) => {
                self.warn_full();
                if let Ok(refusing) = Arc::clone(&self.refusing).try_acquire_owned() {
                    self.tasks.spawn(async move {
                        refuse_busy(stream).await;
                        drop(refusing);
                    });
                }
            }
        }
    }

    /// Serves one connection's requests until it ends, the server asks it to finish, or the
    /// server closes it.
    async fn serve(&self, io: GuardedIo) {
        let app = self.app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let request = request.map(Body::new);
            let app = app.clone();
            async move { app.oneshot(request).await }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        let connection = builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        tokio::pin!(connection);
        tokio::select! {
            () = self.closing.cancelled() => return,
            ended = connection.as_mut() => return log_end(ended),
            () = self.finishing.cancelled() => {}
        }
        connection.as_mut().graceful_shutdown();
        tokio::select! {
            () = self.closing.cancelled() => {}
            ended = connection.as_mut() => log_end(ended),
        }
    }

    /// Says on stderr that the limit was reached, once a minute at most.
    fn warn_full(&self) {
        if once_a_minute(&self.full) {
            tracing::warn!(
                "{} connections are open, the most this server takes (--max-connections): new ones get 503 until some close",
                self.max
            );
        }
    }
}

/// Whether a minute has passed since `last` (which is then now): a flood of connections is
/// said on stderr once a minute, not once a connection.
fn once_a_minute(last: &Mutex<Option<Instant>>) -> bool {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    let due = last.is_none_or(|at| at.elapsed() > Duration::from_secs(60));
    if due {
        *last = Some(Instant::now());
    }
    due
}

fn log_end(ended: Result<(), hyper::Error>) {
    if let Err(error) = ended {
        tracing::debug!("a connection ended: {error}");
    }
}

/// Answers 503 `server_busy` without reading the request, and closes.
async fn refuse_busy(mut stream: TcpStream) {
    const BODY: &str = r#"{"error":{"code":"server_busy","message":"the server holds as many connections as it may (--max-connections); retry shortly"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let answered = tokio::time::timeout(REFUSAL_TIME, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(answered, Ok(Ok(()))) {
        return;
    }
    // Reading what the client sent before closing keeps the kernel from resetting the
    // connection, which could lose the answer before the client reads it.
    let _ = tokio::time::timeout(REFUSAL_DRAIN, async {
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
