//! One subscriber of a session's frames: the frames after its cursor from the store, then the
//! live ones, with no gap and no duplicate.
//!
//! It subscribes to the live broadcast before it reads the store, so nothing emitted after it
//! started can be missed; frames the store has already given are dropped by their position.
//! Whenever a live frame skips ahead of what it has sent (frames emitted before it subscribed
//! and committed since, or frames lost because it fell behind its queue), it reads the
//! missing ones from the store first. A subscriber that cannot keep up therefore never slows
//! the session: it reads from the store until it is current again.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use reel_engine::{ErrorCode, SessionCatalog, StoreError, StoredStream, hello_frame};
use reel_proto::rpc::{ErrorFrame, rpc_line};

use crate::{
    frame_channel::{Live, LiveFrames},
    frame_queue::{FrameReceiver, FrameSender, SUBSCRIBER_BYTES, frame_queue},
    frames::{Frame, Position, frames_of},
    host::Hosted,
};

/// How long a subscriber waits for the store to hold events it saw live before it gives up
/// (its client then reconnects with its cursor).
const STORE_WAIT: Duration = Duration::from_secs(30);

/// How often a subscriber waiting for the store looks again.
const STORE_POLL: Duration = Duration::from_millis(20);

/// Starts streaming session `id`'s frames after `cursor` (with none: its whole timeline as one
/// snapshot, then what follows), `live` being its broadcast. The receiver ends when the session unloads or the stream
/// fails; a cursor past the session's end gets hello and a terminal error.
pub async fn subscribe(
    hosted: Arc<Hosted>,
    live: LiveFrames,
    mut catalog: Box<dyn SessionCatalog>,
    id: &str,
    cursor: Option<Position>,
) -> Result<FrameReceiver, StoreError> {
    // Every frame of an event up to here went out before this subscriber listened: it reads
    // them from the store (waiting for their commit), the later ones come live.
    let broadcast = hosted.last_ordinal();
    let stored = stored_events(catalog.as_mut(), id).await?;
    let last = stored.max(hosted.last_ordinal());
    let (mut stream, rx) = Stream::new(id);
    // The stream starts on its own task: its first frames may be more than its queue holds
    // (a snapshot of megabytes), so they wait for the receiver this returns.
    let task = async move {
        let started = match cursor {
            // Subscribers without a cursor share one encoding of the timeline.
            None => {
                // Boxed, as every catch-up is: a subscriber's task holds only what following
                // live needs, not room for the store's reads (4.6 KB a subscriber unboxed).
                let shared = Box::pin(hosted.snapshot.shared(catalog.as_mut(), &stream.id, stored));
                match shared.await {
                    Ok(snapshot) => {
                        stream.start_with(&snapshot, stored).await;
                        Ok(true)
                    }
                    Err(error) => Err(error),
                }
            }
            Some(_) => Box::pin(stream.start(catalog.as_mut(), cursor, stored, last)).await,
        };
        match started {
            Ok(true) => stream.follow(catalog, live, broadcast).await,
            Ok(false) => {}
            Err(error) => stream.fail(error).await,
        }
    };
    tokio::spawn(task);
    Ok(rx)
}

/// The frames of a hosted session's whole timeline as of one ordinal, encoded once for the
/// subscribers that start from it: a session whose snapshot is megabytes is not copied per
/// subscriber. Held weakly: it lives while a subscriber's queue holds it.
#[derive(Default)]
pub struct SharedSnapshot(tokio::sync::Mutex<(u64, Vec<Weak<Frame>>)>);

impl SharedSnapshot {
    /// The timeline's frames as of event `ordinal`: the ones still held, or new ones.
    async fn shared(
        &self,
        catalog: &mut dyn SessionCatalog,
        id: &str,
        ordinal: u64,
    ) -> Result<Vec<Arc<Frame>>, StoreError> {
        let mut cached = self.0.lock().await;
        let held: Option<Vec<Arc<Frame>>> = cached.1.iter().map(Weak::upgrade).collect();
        if let Some(held) = held.filter(|held| cached.0 == ordinal && !held.is_empty()) {
            return Ok(held);
        }
        let whole = StoredStream::open(catalog, id, ordinal, Some(ordinal)).await?;
        let frames: Vec<Arc<Frame>> = frames_of(&whole.snapshot())
            .into_iter()
            .map(|frame| {
                Arc::new(Frame {
                    position: Some(Position::through(ordinal)),
                    json: frame.json,
                })
            })
            .collect();
        *cached = (ordinal, frames.iter().map(Arc::downgrade).collect());
        Ok(frames)
    }
}

/// Starts streaming session `id`'s frames after `cursor` from the store alone, for a session
/// another process writes (a node of a scale-out, a `run-command`): each commit is read once
/// the store tells of it (PostgreSQL's LISTEN/NOTIFY; SQLite is looked at again every
/// [`COMMIT_POLL`]). Frames of requests (their errors, closing snapshots and `done`) are not
/// in the store: such a stream carries the log's frames only.
pub async fn follow_store(
    mut catalog: Box<dyn SessionCatalog>,
    id: &str,
    cursor: Option<Position>,
) -> Result<FrameReceiver, StoreError> {
    let stored = stored_events(catalog.as_mut(), id).await?;
    let (mut stream, rx) = Stream::new(id);
    tokio::spawn(async move {
        match Box::pin(stream.start(catalog.as_mut(), cursor, stored, stored)).await {
            Ok(true) => stream.follow_commits(catalog).await,
            Ok(false) => {}
            Err(error) => stream.fail(error).await,
        }
    });
    Ok(rx)
}

/// Waits until the store holds session `id`'s events through `ordinal` (a frame sent live
/// can be ahead of its commit), for [`STORE_WAIT`] at most.
async fn stored_through(
    catalog: &mut dyn SessionCatalog,
    id: &str,
    ordinal: u64,
) -> Result<(), StoreError> {
    let waited = tokio::time::Instant::now();
    loop {
        let stored = stored_events(catalog, id).await?;
        if stored >= ordinal {
            return Ok(());
        }
        if waited.elapsed() > STORE_WAIT {
            return Err(StoreError::NotFound(format!(
                "event {ordinal} of session {id} is not in the store after {} s (it holds {stored})",
                STORE_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(STORE_POLL).await;
    }
}

/// How many events the store holds of session `id`.
async fn stored_events(catalog: &mut dyn SessionCatalog, id: &str) -> Result<u64, StoreError> {
    Ok(catalog
        .summary(id)
        .await?
        .map_or(0, |summary| summary.events))
}

/// Live frames after which a subscriber that has kept up lets its stored stream go: one that
/// lags in bursts keeps its place in the store, one that keeps up does not hold a copy of the
/// session's timeline.
const LET_GO_AFTER: usize = 4 * 1024;

/// How often a stream of a session written elsewhere looks at a store that cannot tell it of
/// commits.
const COMMIT_POLL: Duration = Duration::from_millis(100);

/// What one subscriber has been sent.
struct Stream {
    id: String,
    tx: FrameSender,
    /// The position of the newest frame sent.
    sent: Position,
    /// The store's events, read as far as the last catch-up went: the next catch-up goes on
    /// from there. It holds the session's timeline, so a subscriber that has kept up for
    /// [`LET_GO_AFTER`] live frames lets it go (a later catch-up opens the store again).
    /// Boxed: a subscriber that keeps up holds none, and its task is the smaller for it.
    stored: Option<Box<StoredStream>>,
    /// Live frames sent since the last catch-up.
    live_since_catch_up: usize,
}

impl Stream {
    fn new(id: &str) -> (Self, FrameReceiver) {
        let (tx, rx) = frame_queue(SUBSCRIBER_BYTES);
        let stream = Stream {
            id: id.to_owned(),
            tx,
            sent: Position::through(0),
            stored: None,
            live_since_catch_up: 0,
        };
        (stream, rx)
    }

    /// Sends hello, then the whole timeline as of `stored` when there is no cursor; a cursor
    /// past `last` gets a terminal error instead, and `false` (the stream ends there).
    async fn start(
        &mut self,
        catalog: &mut dyn SessionCatalog,
        cursor: Option<Position>,
        stored: u64,
        last: u64,
    ) -> Result<bool, StoreError> {
        self.send_line(rpc_line::Frame::Hello(hello_frame(&[])))
            .await;
        match cursor {
            Some(cursor) if cursor.ordinal > last => {
                let message = format!(
                    "the cursor {} is past session {}'s last event, {last}",
                    cursor.id(),
                    self.id
                );
                self.send_error(ErrorCode::CursorOutOfRange, message).await;
                return Ok(false);
            }
            Some(cursor) => self.sent = cursor,
            None => {
                let whole = StoredStream::open(catalog, &self.id, stored, Some(stored)).await?;
                for frame in frames_of(&whole.snapshot()) {
                    let frame = Frame {
                        position: Some(Position::through(stored)),
                        json: frame.json,
                    };
                    self.send(Arc::new(frame)).await;
                }
                self.sent = Position::through(stored);
            }
        }
        Ok(true)
    }

    /// Sends hello, then `snapshot`, the whole timeline as of event `ordinal`.
    async fn start_with(&mut self, snapshot: &[Arc<Frame>], ordinal: u64) {
        self.send_line(rpc_line::Frame::Hello(hello_frame(&[])))
            .await;
        for frame in snapshot {
            self.send(Arc::clone(frame)).await;
        }
        self.sent = Position::through(ordinal);
    }

    /// Sends every commit of the store as it comes, until the client goes away.
    async fn follow_commits(mut self, mut catalog: Box<dyn SessionCatalog>) {
        loop {
            if let Err(error) = Box::pin(self.catch_up(catalog.as_mut(), None)).await {
                return self.fail(error).await;
            }
            if self.tx.is_closed() {
                return;
            }
            tokio::select! {
                heard = catalog.wait_for_commits(&self.id, COMMIT_POLL) => {
                    if let Err(error) = heard {
                        return self.fail(error).await;
                    }
                }
                () = self.tx.closed() => return,
            }
        }
    }

    /// Sends what the store holds after the cursor, through `broadcast` at least (what went
    /// out before it subscribed), then the live frames.
    async fn follow(
        mut self,
        mut catalog: Box<dyn SessionCatalog>,
        mut live: LiveFrames,
        broadcast: u64,
    ) {
        if let Err(error) = Box::pin(self.catch_up(catalog.as_mut(), Some(broadcast))).await {
            return self.fail(error).await;
        }
        loop {
            // A client that went away while the session is quiet lets go of it at once (its
            // receiver would keep the session from ever counting as idle).
            let received = tokio::select! {
                received = live.recv() => received,
                () = self.tx.closed() => return,
            };
            let frame = match received {
                Live::Frame(frame) => frame,
                Live::Lagged(through) => {
                    tracing::debug!(
                        "a subscriber of {} missed frames through {through}",
                        self.id
                    );
                    // Through the newest it missed, waiting for its commit: a frame of the
                    // request queued after them (its `done`) must not pass them.
                    match Box::pin(self.catch_up(catalog.as_mut(), Some(through))).await {
                        Ok(()) => continue,
                        Err(error) => return self.fail(error).await,
                    }
                }
                // The session unloaded: its stream ends here; the client resumes later.
                Live::Closed => return,
            };
            match frame.position {
                Some(position) if position <= self.sent => continue,
                Some(position) if !self.follows(position) => {
                    let before = position.ordinal - 1;
                    if let Err(error) =
                        Box::pin(self.catch_up(catalog.as_mut(), Some(before))).await
                    {
                        return self.fail(error).await;
                    }
                    if position <= self.sent {
                        continue;
                    }
                }
                _ => {}
            }
            if !self.send(frame).await {
                return;
            }
            self.live_since_catch_up += 1;
            if self.live_since_catch_up == LET_GO_AFTER {
                self.stored = None;
            }
        }
    }

    /// Whether `position` comes right after what was sent.
    fn follows(&self, position: Position) -> bool {
        if self.sent.index == Position::LAST {
            position.ordinal == self.sent.ordinal + 1
        } else {
            position.ordinal == self.sent.ordinal
        }
    }

    /// Sends the stored frames after what was sent: to the store's end, or (`through`) up to
    /// that ordinal, waiting for the store to commit it. The stored stream is opened once and
    /// read on at each catch-up, so catching up costs the events it reads, not the session's
    /// age.
    async fn catch_up(
        &mut self,
        catalog: &mut dyn SessionCatalog,
        through: Option<u64>,
    ) -> Result<(), StoreError> {
        self.live_since_catch_up = 0;
        // Nothing to read: no copy of the timeline is made for a subscriber that is current.
        if self.stored.is_none()
            && self.sent.index == Position::LAST
            && through.is_some_and(|through| self.sent.ordinal >= through)
        {
            return Ok(());
        }
        let mut stored = match self.stored.take() {
            Some(stored) => stored,
            None => {
                // A cursor inside an event's frames starts from the event itself.
                let from = match self.sent.index {
                    Position::LAST => self.sent.ordinal,
                    _ => self.sent.ordinal - 1,
                };
                // What was sent live can be ahead of the store: the stored stream starts once
                // the store holds it.
                stored_through(catalog, &self.id, from).await?;
                Box::new(StoredStream::open(catalog, &self.id, from, None).await?)
            }
        };
        let waited = tokio::time::Instant::now();
        loop {
            loop {
                let page = stored.next_page(catalog).await?;
                if page.is_empty() {
                    break;
                }
                for output in &page {
                    for frame in frames_of(output) {
                        if frame.position.is_some_and(|p| p > self.sent)
                            && !self.send(Arc::new(frame)).await
                        {
                            return Ok(());
                        }
                    }
                }
            }
            let caught_up = through.is_none_or(|through| self.sent.ordinal >= through);
            if caught_up {
                self.stored = Some(stored);
                return Ok(());
            }
            if waited.elapsed() > STORE_WAIT {
                return Err(StoreError::NotFound(format!(
                    "event {} of session {} is not in the store after {} s",
                    through.unwrap_or_default(),
                    self.id,
                    STORE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(STORE_POLL).await;
        }
    }

    /// Queues `frame` (a marker only moves the position on); `false` when the client has gone.
    async fn send(&mut self, frame: Arc<Frame>) -> bool {
        if let Some(position) = frame.position {
            self.sent = self.sent.max(position);
        }
        frame.is_marker() || self.tx.send(frame).await.is_ok()
    }

    async fn send_line(&mut self, frame: rpc_line::Frame) -> bool {
        match Frame::of_line(&self.id, "", frame) {
            Some(frame) => self.send(Arc::new(frame)).await,
            None => false,
        }
    }

    async fn send_error(&mut self, code: ErrorCode, message: String) {
        let error = ErrorFrame {
            code: code.into(),
            message,
            terminal: true,
            ..Default::default()
        };
        self.send_line(rpc_line::Frame::Error(error)).await;
    }

    /// Ends the stream with the store's failure; the client may resume from its cursor.
    async fn fail(mut self, error: StoreError) {
        tracing::warn!("a subscriber of {} stops: {error}", self.id);
        let message = format!("{error}; reconnect with the last event id to go on");
        self.send_error(ErrorCode::StorageFailed, message).await;
    }
}
