//! `GET /metrics`: the server's figures in the Prometheus exposition format (OpenMetrics
//! text), made with the Prometheus project's own Rust client.
//!
//! Counters and histograms are kept as things happen; the figures about what is loaded now
//! (sessions, runs, subscribers, queued frames) are counted from the host at each scrape, so
//! they cannot drift from what is there.

use std::time::Duration;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What is loaded at one moment.
#[derive(Default)]
pub struct Census {
    pub sessions_loaded: i64,
    pub runs_active: i64,
    pub subscribers: i64,
    /// Frames broadcast and not yet taken by every subscriber, over all sessions.
    pub queued_frames: i64,
}

/// Durable Streams reads in progress (long-polls waiting, SSE responses open): kept as they
/// start and end, since they belong to no loaded session.
#[derive(Clone, Default)]
pub struct StreamReaders(Gauge);

impl StreamReaders {
    /// Counts one reader until the guard drops.
    pub fn reading(&self) -> ReaderGuard {
        self.0.inc();
        ReaderGuard(self.0.clone())
    }
}

/// One reader counted in [`StreamReaders`].
pub struct ReaderGuard(Gauge);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    /// The route's pattern (`/v1/sessions/{id}`), never the path: one series per route.
    route: String,
    status: u16,
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    sessions_loaded: Gauge,
    runs_active: Gauge,
    subscribers: Gauge,
    queued_frames: Gauge,
    pub stream_readers: StreamReaders,
    tasks_alive: Gauge,
    events_appended: Counter,
    requests: Family<RequestLabels, Histogram>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("reel");
        let sessions_loaded = Gauge::default();
        let runs_active = Gauge::default();
        let subscribers = Gauge::default();
        let queued_frames = Gauge::default();
        let stream_readers = StreamReaders::default();
        let tasks_alive = Gauge::default();
        let events_appended = Counter::default();
        // 1 ms to about 33 s.
        let requests = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "sessions_loaded",
            "Sessions loaded (each with its writer and its lease)",
            sessions_loaded.clone(),
        );
        registry.register(
            "runs_active",
            "Runs started and not ended",
            runs_active.clone(),
        );
        registry.register(
            "subscribers",
            "Event streams and WebSockets following a session live",
            subscribers.clone(),
        );
        registry.register(
            "queued_frames",
            "Frames broadcast to subscribers and not yet taken by all of them",
            queued_frames.clone(),
        );
        registry.register(
            "stream_readers",
            "Durable Streams reads in progress: long-polls waiting and SSE responses open",
            stream_readers.0.clone(),
        );
        registry.register(
            "tasks_alive",
            "Tasks of the server's runtime (a loaded idle session should add none)",
            tasks_alive.clone(),
        );
        registry.register(
            "events_appended",
            "Events appended to the logs of the sessions this server wrote",
            events_appended.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time from a request's arrival to its response's start",
            requests.clone(),
        );
        Self {
            registry,
            sessions_loaded,
            runs_active,
            subscribers,
            queued_frames,
            stream_readers,
            tasks_alive,
            events_appended,
            requests,
        }
    }

    /// The counter of appended events, for the sessions' frames sinks.
    pub fn events_appended(&self) -> Counter {
        self.events_appended.clone()
    }

    /// A request to `route` answered with `status` after `took`.
    pub fn observe_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let labels = RequestLabels {
            method: method.to_owned(),
            route: route.to_owned(),
            status,
        };
        self.requests
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Every metric as OpenMetrics text, with `census` as the figures of now.
    pub fn render(&self, census: &Census) -> String {
        self.sessions_loaded.set(census.sessions_loaded);
        self.runs_active.set(census.runs_active);
        self.subscribers.set(census.subscribers);
        self.queued_frames.set(census.queued_frames);
        // Every task of the runtime: what a loaded idle session costs in tasks shows here.
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        self.tasks_alive
            .set(i64::try_from(tasks).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}
