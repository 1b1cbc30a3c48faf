//! The sessions a server has loaded: each one a writer task that owns the session and answers
//! its requests with the engine's `serve`, as one `--stdin-rpc` process would, and a broadcast
//! of its frames. A session loads on first use and unloads when its task ends (a `shutdown`
//! request, a storage failure, the server stopping).

use std::{
    collections::HashMap,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use reel_engine::Incoming;
use reel_proto::rpc::{
    PROTOCOL_VERSION, RpcRequestLine, ShutdownRequest, rpc_request_line::Request,
};
use tokio::{
    sync::{Notify, OnceCell, RwLock, mpsc, watch},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    frame_channel::{FrameChannel, LiveFrames},
    frames::FramesSink,
    idle::{self, Activity},
    idle_queue::IdleQueue,
    metrics::{Census, Metrics},
    parked_writer::ParkedWriter,
    shared_snapshot::SharedSnapshot,
    source::{SessionSource, SourceError},
};

/// The request id of the shutdown the server sends each session when it stops.
pub const SHUTDOWN_REQUEST_ID: &str = "server-stopping";

/// The request id of the shutdown that evicts an idle session.
pub const IDLE_REQUEST_ID: &str = "server-idle";

/// Requests queued for one session's writer.
const REQUEST_QUEUE: usize = 64;

/// The longest a loaded session waits for a look from the idle sweep: one that ended by
/// itself (a `shutdown` request, a storage failure) leaves its slot within this.
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// One loaded session.
pub struct Hosted {
    /// `None` once it is being evicted: a request that got in before is answered before the
    /// session ends, and one after is told to wait for the reload.
    requests: RwLock<Option<mpsc::Sender<Incoming>>>,
    /// Weak: the session's frames sink holds the channel, so that it closes, and every
    /// subscriber's stream ends, when the session does.
    frames: Weak<FrameChannel>,
    last_ordinal: Arc<AtomicU64>,
    /// The newest ordinal its store has committed (what a Durable Streams reader may see);
    /// closed when the session ends.
    committed: Option<watch::Receiver<u64>>,
    activity: Arc<Activity>,
    evicting: AtomicBool,
    /// Cancelled once its writer has ended and its lease is released.
    ended: CancellationToken,
    /// Its writer, which holds no task while it waits for a request.
    writer: Arc<ParkedWriter>,
    /// Its timeline's frames, shared by the subscribers that start from it.
    pub snapshot: SharedSnapshot,
}

impl Hosted {
    /// Hands the writer a request; gives it back when the session is unloading (wait for
    /// [`Hosted::unloaded`] and load it again).
    pub async fn send(&self, request: Incoming) -> Result<(), Incoming> {
        self.activity.touch();
        let requests = self.requests.read().await;
        match requests.as_ref() {
            Some(requests) => {
                requests.send(request).await.map_err(|e| e.0)?;
                self.writer.knock();
                Ok(())
            }
            None => Err(request),
        }
    }

    /// A receiver of its frames; `None` once it has unloaded.
    pub fn subscribe(&self) -> Option<LiveFrames> {
        self.activity.touch();
        self.frames.upgrade().map(|frames| frames.subscribe())
    }

    /// The newest ordinal among the frames it has broadcast.
    pub fn last_ordinal(&self) -> u64 {
        self.last_ordinal.load(Ordering::Acquire)
    }

    /// Resolves once the session has unloaded (its lease released).
    pub async fn unloaded(&self) {
        self.ended.cancelled().await;
    }

    fn is_loaded(&self) -> bool {
        !self.ended.is_cancelled() && !self.evicting.load(Ordering::Acquire)
    }

    /// When it may next be idle (nobody has used it for `timeout`, nobody listens to it and
    /// no run is going), to be looked at again then; `None` when it is idle now. A session
    /// listened to, busy or unloading is looked at again after `recheck`: a subscriber
    /// leaving or a run ending does not say so here.
    fn idle_at(&self, timeout: Duration, now: Instant, recheck: Duration) -> Option<Instant> {
        let listeners = self.frames.upgrade().map_or(0, |f| f.receiver_count());
        if !self.is_loaded() || listeners > 0 || self.activity.is_busy() {
            return Some(now + recheck);
        }
        let idle_for = self.activity.idle_for();
        (idle_for < timeout).then(|| now + (timeout - idle_for).min(LOOK_AT_LEAST_EVERY))
    }

    /// Asks the session to end after what it was sent so far; nothing more is taken.
    async fn evict(&self, request_id: &str) {
        self.evicting.store(true, Ordering::Release);
        if let Some(requests) = self.requests.write().await.take() {
            let _ = requests
                .send(Incoming::Request(Box::new(shutdown_request(request_id))))
                .await;
            self.writer.knock();
        }
    }
}

/// The loaded sessions of one server.
pub struct Host {
    source: Arc<dyn SessionSource>,
    /// A slot per session asked for: loading one session waits for nothing but its own load.
    loaded: std::sync::Mutex<HashMap<String, Arc<Slot>>>,
    /// Stops every session (their running submits end with `ChatRunStopped`).
    stop: CancellationToken,
    /// Set when the server starts stopping: no session loads after.
    stopping: AtomicBool,
    writers: TaskTracker,
    /// Per session some reader waits on while nobody writes it here: told when it loads, so
    /// the reader learns at once that someone does now (and no other reader wakes).
    loads: std::sync::Mutex<HashMap<String, Weak<Notify>>>,
    pub metrics: Metrics,
    /// Every loaded session, by when the idle sweep looks at it next.
    due: IdleQueue<(String, Weak<Hosted>)>,
    /// Forwards writes to the node that writes a session (scale-out; see [`crate::forward`]).
    pub forwarder: crate::forward::Forwarder,
}

/// Where one session is loaded, once, however many requests ask for it at a time.
type Slot = OnceCell<Arc<Hosted>>;

impl Host {
    pub fn new(source: Arc<dyn SessionSource>, cluster_token: Option<String>) -> Self {
        Self {
            source,
            loaded: std::sync::Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            stopping: AtomicBool::new(false),
            writers: TaskTracker::new(),
            loads: std::sync::Mutex::new(HashMap::new()),
            metrics: Metrics::new(),
            due: IdleQueue::default(),
            forwarder: crate::forward::Forwarder::new(cluster_token),
        }
    }

    pub fn source(&self) -> &dyn SessionSource {
        self.source.as_ref()
    }

    /// Hands session `id` a request, loading the session when it is not loaded (or is
    /// unloading: then once it has).
    pub async fn send(&self, id: &str, mut request: Incoming) -> Result<(), SourceError> {
        loop {
            let hosted = self.session(id).await?;
            match hosted.send(request).await {
                Ok(()) => return Ok(()),
                Err(back) => request = back,
            }
        }
    }

    /// The loaded session `id`, loading it from the store when it is not.
    pub async fn session(&self, id: &str) -> Result<Arc<Hosted>, SourceError> {
        loop {
            if self.is_stopping() {
                return Err(SourceError::Stopping(format!(
                    "the server is stopping; session {id} is not taking requests"
                )));
            }
            let slot = Arc::clone(self.slots().entry(id.to_owned()).or_default());
            let mut loaded_now = false;
            let load = || {
                loaded_now = true;
                self.load(id)
            };
            let hosted = slot.get_or_try_init(load).await?;
            if loaded_now {
                // The next sweep sets when it is due.
                self.due
                    .push(Instant::now(), (id.to_owned(), Arc::downgrade(hosted)));
                // Once it is in its slot, where a waiting reader looks.
                let told = self.load_notices().remove(id).and_then(|n| n.upgrade());
                if let Some(told) = told {
                    told.notify_waiters();
                }
            }
            if hosted.is_loaded() {
                return Ok(Arc::clone(hosted));
            }
            // It is unloading: it is loaded again once it has released its lease, and its
            // slot goes (unless another request replaced it already).
            hosted.unloaded().await;
            let mut slots = self.slots();
            if slots.get(id).is_some_and(|now| Arc::ptr_eq(now, &slot)) {
                slots.remove(id);
            }
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        // A panic while the lock was held left the map whole (inserts and removals only).
        self.loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens session `id` and starts its writer.
    async fn load(&self, id: &str) -> Result<Arc<Hosted>, SourceError> {
        let frames = Arc::new(FrameChannel::default());
        let last_ordinal = Arc::new(AtomicU64::new(0));
        let activity = Arc::new(Activity::new());
        let weak = Arc::downgrade(&frames);
        let sink = FramesSink::new(
            frames,
            Arc::clone(&last_ordinal),
            Arc::clone(&activity),
            self.metrics.events_appended(),
        );
        let opened = self.source.open(id, Box::new(sink)).await?;
        last_ordinal.store(opened.session.log().last_ordinal(), Ordering::Release);
        let committed = opened.session.store_committed();
        let (requests, incoming) = mpsc::channel(REQUEST_QUEUE);
        let ended = CancellationToken::new();
        let idle = opened.idle_signal();
        let writer = opened.write(incoming, self.stop.child_token());
        let writer = ParkedWriter::start(writer, idle, self.writers.clone(), ended.clone());
        // Thousands of sessions load and unload in a server's day: not news for its log.
        tracing::debug!("session {id} loaded");
        let hosted = Arc::new(Hosted {
            requests: RwLock::new(Some(requests)),
            frames: weak,
            last_ordinal,
            committed,
            activity,
            evicting: AtomicBool::new(false),
            ended,
            writer,
            snapshot: SharedSnapshot::default(),
        });
        Ok(hosted)
    }

    /// Prunes session `id` unless it is loaded here: while it is pruned, a request that would
    /// load it waits (the session's slot is taken), then finds it gone. True when it was
    /// pruned; false when it is loaded here or another process holds it.
    pub async fn prune_unless_loaded(&self, id: &str) -> Result<bool, SourceError> {
        let slot = Arc::clone(self.slots().entry(id.to_owned()).or_default());
        let pruned = slot
            .get_or_try_init(|| async {
                self.source.prune_session(id).await?;
                // No session to hold: the slot stays empty, and the next load finds it gone.
                Err(SourceError::Pruned(format!("session {id} was pruned")))
            })
            .await;
        if slot.get().is_none() {
            let mut slots = self.slots();
            if slots.get(id).is_some_and(|now| Arc::ptr_eq(now, &slot)) {
                slots.remove(id);
            }
        }
        match pruned {
            Ok(_) | Err(SourceError::Busy(_)) => Ok(false),
            Err(SourceError::Pruned(_)) => Ok(true),
            Err(error) => Err(error),
        }
    }

    /// Whether session `id` is loaded here now.
    pub fn is_loaded(&self, id: &str) -> bool {
        self.slots()
            .get(id)
            .and_then(|slot| slot.get())
            .is_some_and(|hosted| hosted.is_loaded())
    }

    /// What session `id`'s store has committed, when the session is loaded here (without
    /// loading it: reading a session takes no lease).
    pub fn committed(&self, id: &str) -> Option<watch::Receiver<u64>> {
        self.slots()
            .get(id)
            .and_then(|slot| slot.get())
            .filter(|hosted| hosted.is_loaded())
            .and_then(|hosted| hosted.committed.clone())
    }

    /// What tells of session `id`'s next load: wait on its `notified()`, made before looking
    /// whether the session is loaded, so that a load between the look and the wait is not
    /// missed.
    pub fn load_notice(&self, id: &str) -> Arc<Notify> {
        let mut notices = self.load_notices();
        if let Some(notice) = notices.get(id).and_then(Weak::upgrade) {
            return notice;
        }
        // Notices nobody waits on any more go as the map doubles: it stays within twice the
        // sessions waited on.
        if notices.len() >= 64 && notices.len().is_power_of_two() {
            notices.retain(|_, notice| notice.strong_count() > 0);
        }
        let notice = Arc::new(Notify::new());
        notices.insert(id.to_owned(), Arc::downgrade(&notice));
        notice
    }

    fn load_notices(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Notify>>> {
        // Inserts and removals only: a panic while it was held left the map whole.
        self.loads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is loaded now, for the metrics.
    pub fn census(&self) -> Census {
        let slots = self.slots();
        let mut census = Census::default();
        for hosted in slots.values().filter_map(|slot| slot.get()) {
            if !hosted.is_loaded() {
                continue;
            }
            census.sessions_loaded += 1;
            census.runs_active += i64::from(hosted.activity.is_running());
            if let Some(frames) = hosted.frames.upgrade() {
                census.subscribers += frames.receiver_count() as i64;
                census.queued_frames += frames.len() as i64;
            }
        }
        census
    }

    /// Every `--idle-timeout`'s sweep: among the sessions due a look, evicts the ones idle
    /// for `timeout` and forgets the ones that have unloaded; the others are due again when
    /// they may next be idle.
    pub async fn evict_idle(&self, timeout: Duration) {
        let now = Instant::now();
        let recheck = idle::sweep_interval(timeout);
        let mut idle = Vec::new();
        for (id, weak) in self.due.take_due(now) {
            let Some(hosted) = weak.upgrade() else {
                continue;
            };
            if hosted.ended.is_cancelled() {
                self.forget(&id, &hosted);
                continue;
            }
            match hosted.idle_at(timeout, now, recheck) {
                Some(at) => self.due.push(at, (id, weak)),
                None => {
                    // Looked at again once it has unloaded, to forget it.
                    self.due.push(now + recheck, (id, weak));
                    idle.push(hosted);
                }
            }
        }
        for hosted in idle {
            hosted.evict(IDLE_REQUEST_ID).await;
        }
    }

    /// Removes the slot of session `id` if it still holds `hosted` (which has unloaded).
    fn forget(&self, id: &str, hosted: &Arc<Hosted>) {
        let mut slots = self.slots();
        let holds = slots
            .get(id)
            .and_then(|slot| slot.get())
            .is_some_and(|now| Arc::ptr_eq(now, hosted));
        if holds {
            slots.remove(id);
        }
    }

    /// Evicts idle sessions until the server stops.
    pub async fn evict_idle_until_stopped(&self, timeout: Duration) {
        let mut sweeps = tokio::time::interval(idle::sweep_interval(timeout));
        sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.is_stopping() {
            sweeps.tick().await;
            self.evict_idle(timeout).await;
        }
    }

    /// Whether the server is stopping: no session loads any more.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Stops every session and waits until each has flushed and released its lease: each is
    /// asked to shut down as a `shutdown` request would (its running submit goes on, nothing
    /// more starts); a submit still running after `grace` is stopped (`ChatRunStopped`).
    pub async fn shut_down(&self, grace: Duration) {
        self.stopping.store(true, Ordering::Release);
        let loaded: Vec<Arc<Hosted>> = self
            .slots()
            .drain()
            .filter_map(|(_, slot)| slot.get().cloned())
            .collect();
        self.writers.close();
        let drained = async {
            for hosted in &loaded {
                hosted.evict(SHUTDOWN_REQUEST_ID).await;
            }
            self.writers.wait().await;
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                "still running after the {grace:?} grace period: stopping every session's run"
            );
            self.stop.cancel();
            self.writers.wait().await;
        }
    }
}

/// The request that asks a session to end once its running submit has: the server's own, so
/// its `done` (status `shutdown`) under `request_id` ends every stream of the session.
fn shutdown_request(request_id: &str) -> RpcRequestLine {
    RpcRequestLine {
        version: PROTOCOL_VERSION,
        session_id: String::new(),
        request_id: request_id.to_owned(),
        request: Some(Request::Shutdown(ShutdownRequest {})),
    }
}
