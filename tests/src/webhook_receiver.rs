//! A webhook endpoint for tests: a real HTTP server (axum) on 127.0.0.1 that records every
//! POST (headers and body) and answers as a test plans: some failures first, then a status;
//! optionally holding every request until the test opens a gate.

use std::{
    collections::VecDeque,
    net::TcpListener,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use tokio::sync::watch;

/// One POST the endpoint received.
#[derive(Clone, Debug)]
pub struct Post {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status it was answered with.
    pub status: u16,
}

impl Post {
    /// A header's value, `""` when missing.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// How the endpoint answers.
#[derive(Clone, Debug)]
pub struct Plan {
    /// These statuses first, one per POST.
    pub first: Vec<u16>,
    /// Then this one.
    pub then: u16,
    /// Whether POSTs wait for [`WebhookReceiver::open`].
    pub held: bool,
    /// A `Location` every answer carries (for a redirect).
    pub location: Option<String>,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            first: Vec::new(),
            then: 200,
            held: false,
            location: None,
        }
    }
}

struct Endpoint {
    posts: Mutex<Vec<Post>>,
    first: Mutex<VecDeque<u16>>,
    then: u16,
    location: Option<String>,
    gate: watch::Receiver<bool>,
}

/// The running endpoint; it stops with the test process.
pub struct WebhookReceiver {
    port: u16,
    endpoint: Arc<Endpoint>,
    gate: watch::Sender<bool>,
}

impl WebhookReceiver {
    /// Serves on a free port.
    pub fn start(plan: Plan) -> Self {
        Self::start_on(0, plan)
    }

    /// Serves on `port` (0: a free one).
    pub fn start_on(port: u16, plan: Plan) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (gate, opened) = watch::channel(!plan.held);
        let endpoint = Arc::new(Endpoint {
            posts: Mutex::new(Vec::new()),
            first: Mutex::new(plan.first.into()),
            then: plan.then,
            location: plan.location,
            gate: opened,
        });
        let app = Router::new()
            .route("/{*path}", post(receive))
            .with_state(Arc::clone(&endpoint));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self {
            port,
            endpoint,
            gate,
        }
    }

    /// The URL of the endpoint's `/hook` path.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// Lets held POSTs through, and every later one.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// Every POST so far, in the order they arrived.
    pub fn posts(&self) -> Vec<Post> {
        self.endpoint.posts.lock().unwrap().clone()
    }

    /// Waits up to `timeout` for `count` POSTs.
    pub fn wait_for_posts(&self, count: usize, timeout: Duration) -> Vec<Post> {
        let started = std::time::Instant::now();
        loop {
            let posts = self.posts();
            if posts.len() >= count || started.elapsed() > timeout {
                return posts;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn receive(
    State(endpoint): State<Arc<Endpoint>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut gate = endpoint.gate.clone();
    let _ = gate.wait_for(|&open| open).await;
    let status = endpoint
        .first
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(endpoint.then);
    endpoint.posts.lock().unwrap().push(Post {
        headers,
        body,
        status,
    });
    let status = StatusCode::from_u16(status).unwrap();
    match &endpoint.location {
        Some(location) => (status, [(header::LOCATION, location.clone())]).into_response(),
        None => status.into_response(),
    }
}
