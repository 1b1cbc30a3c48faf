//! The sessions a server has loaded: each one a writer task that owns the session and answers
//! its requests with the engine's `serve`, as one `--stdin-rpc` process would, and a broadcast
//! of its frames. A session loads on first use and unloads when its task ends (a `shutdown`
//! request, a storage failure, the server stopping).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use reel_engine::{Incoming, ServeConfig, serve};
use tokio::sync::{OnceCell, broadcast, mpsc};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    frames::{Frame, FramesSink},
    source::{OpenedSession, SessionSource, SourceError},
};

/// Frames a subscriber may fall behind by before it catches up from the store instead.
const BROADCAST_FRAMES: usize = 1024;

/// Requests queued for one session's writer.
const REQUEST_QUEUE: usize = 64;

/// One loaded session.
pub struct Hosted {
    requests: mpsc::Sender<Incoming>,
    /// Weak: the session's frames sink holds the channel, so that it closes, and every
    /// subscriber's stream ends, when the session does.
    frames: broadcast::WeakSender<Arc<Frame>>,
    last_ordinal: Arc<AtomicU64>,
}

impl Hosted {
    /// Hands the writer a request; `false` when the session has just unloaded.
    pub async fn send(&self, request: Incoming) -> bool {
        self.requests.send(request).await.is_ok()
    }

    /// A receiver of its frames; `None` once it has unloaded.
    pub fn subscribe(&self) -> Option<broadcast::Receiver<Arc<Frame>>> {
        self.frames.upgrade().map(|frames| frames.subscribe())
    }

    /// The newest ordinal among the frames it has broadcast.
    pub fn last_ordinal(&self) -> u64 {
        self.last_ordinal.load(Ordering::Acquire)
    }

    fn is_loaded(&self) -> bool {
        !self.requests.is_closed()
    }
}

/// The loaded sessions of one server.
pub struct Host {
    source: Arc<dyn SessionSource>,
    /// A slot per session asked for: loading one session waits for nothing but its own load.
    loaded: std::sync::Mutex<HashMap<String, Arc<Slot>>>,
    /// Stops every session (their running submits end with `ChatRunStopped`).
    stop: CancellationToken,
    writers: TaskTracker,
}

/// Where one session is loaded, once, however many requests ask for it at a time.
type Slot = OnceCell<Arc<Hosted>>;

impl Host {
    pub fn new(source: Arc<dyn SessionSource>) -> Self {
        Self {
            source,
            loaded: std::sync::Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            writers: TaskTracker::new(),
        }
    }

    pub fn source(&self) -> &dyn SessionSource {
        self.source.as_ref()
    }

    /// The loaded session `id`, loading it from the store when it is not.
    pub async fn session(&self, id: &str) -> Result<Arc<Hosted>, SourceError> {
        loop {
            let slot = Arc::clone(self.slots().entry(id.to_owned()).or_default());
            let hosted = slot.get_or_try_init(|| self.load(id)).await?;
            if hosted.is_loaded() {
                return Ok(Arc::clone(hosted));
            }
            // It has unloaded since: its slot goes (unless another request replaced it already).
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
        let (frames, _) = broadcast::channel(BROADCAST_FRAMES);
        let last_ordinal = Arc::new(AtomicU64::new(0));
        let weak = frames.downgrade();
        let sink = FramesSink::new(frames, Arc::clone(&last_ordinal));
        let opened = self.source.open(id, Box::new(sink)).await?;
        last_ordinal.store(opened.session.log().last_ordinal(), Ordering::Release);
        let (requests, incoming) = mpsc::channel(REQUEST_QUEUE);
        self.writers
            .spawn(write_session(opened, incoming, self.stop.child_token()));
        tracing::info!("session {id} loaded");
        Ok(Arc::new(Hosted {
            requests,
            frames: weak,
            last_ordinal,
        }))
    }

    /// Stops every session and waits until each has flushed and released its lease.
    pub async fn shut_down(&self) {
        self.stop.cancel();
        // Dropping the request senders ends each writer once its running submit is stopped.
        self.slots().clear();
        self.writers.close();
        self.writers.wait().await;
    }
}

/// A session's writer: answers its requests until they end, then closes its sinks (the store
/// releases the lease).
async fn write_session(
    opened: OpenedSession,
    incoming: mpsc::Receiver<Incoming>,
    stop: CancellationToken,
) {
    let OpenedSession { mut session, runs } = opened;
    let none: Arc<str> = Arc::from("");
    session.close_interrupted_run(&none).await;
    let id = session.id().to_owned();
    let config = ServeConfig {
        id_fixed: true,
        provider: runs.provider.as_ref(),
        system_prompt: runs.system_prompt,
        settings: runs.settings,
        tools: &runs.tools,
        budgets: runs.budgets,
        context_policy: runs.context_policy,
    };
    let (session, end) = serve(session, config, incoming, stop).await;
    for failure in session.close().await {
        tracing::error!(
            "session {id}: output {} failed: {}",
            failure.sink,
            failure.message
        );
    }
    tracing::info!("session {id} unloaded ({end:?})");
}
