//! One subscriber of a session's frames: the frames after its cursor from the store, then the
//! live ones, with no gap and no duplicate, made as its connection asks for them.
//!
//! A subscription holds no task and no queue of its own. Its connection (an SSE body, a
//! WebSocket) pulls the next frame, and the subscription takes it from the session's live
//! queue ([`LiveFrames`]) or reads it from the store: a subscriber that keeps up costs the
//! session one queue and one wake-up a burst of frames, and copies no frame of its own. A
//! subscriber whose connection stops pulling lets that queue fill; the session never waits for
//! it, drops the log's frames past the 1,024 its queue holds, and the subscriber reads them
//! from the store once it pulls again.
//!
//! It subscribes to the live broadcast before it reads the store, so nothing emitted after it
//! started can be missed; frames the store has already given are dropped by their position.
//! Whenever a live frame skips ahead of what it has sent (frames emitted before it subscribed
//! and committed since, or frames lost because it fell behind), it reads the missing ones from
//! the store first.
//!
//! Every step records what it learnt in the subscription before it waits again, so a
//! [`Subscription::recv`] dropped at any await loses no frame: a catch-up cut short goes on
//! from what was sent. Connections wait with [`next_frame`], which is never cut short.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use reel_engine::{ErrorCode, SessionCatalog, StoreError, StoredStream, hello_frame};
use reel_proto::rpc::{ErrorFrame, rpc_line};
use tokio::time::Instant;

use crate::{
    frame_channel::{Live, LiveFrames},
    frames::{Frame, Position, frames_of},
    host::Hosted,
    shared_snapshot::snapshot_frames,
};

/// How long a subscriber waits for the store to hold events it saw live before it gives up
/// (its client then reconnects with its cursor).
const STORE_WAIT: Duration = Duration::from_secs(30);

/// How often a subscriber waiting for the store looks again.
const STORE_POLL: Duration = Duration::from_millis(20);

/// Live frames after which a subscriber that has kept up lets its stored stream go: one that
/// lags in bursts keeps its place in the store, one that keeps up does not hold a copy of the
/// session's timeline.
const LET_GO_AFTER: usize = 4 * 1024;

/// Frames' room kept in a subscription's ready queue once it has been emptied.
const READY_KEPT: usize = 16;

/// How often a stream of a session written elsewhere looks at a store that cannot tell it of
/// commits.
const COMMIT_POLL: Duration = Duration::from_millis(100);

/// Session `id`'s frames after `cursor` (with none: its whole timeline as one snapshot, then
/// what follows), `live` being its broadcast. It ends when the session unloads or the store
/// fails; a cursor past the session's end gets hello and a terminal error.
pub async fn subscribe(
    hosted: Arc<Hosted>,
    live: LiveFrames,
    mut catalog: Box<dyn SessionCatalog>,
    id: &str,
    cursor: Option<Position>,
) -> Result<Subscription, StoreError> {
    // Every frame of an event up to here went out before this subscriber listened: it reads
    // them from the store (waiting for their commit), the later ones come live.
    let broadcast = hosted.last_ordinal();
    let stored = stored_events(catalog.as_mut(), id).await?;
    let last = stored.max(hosted.last_ordinal());
    let source = Source::Live { hosted, live };
    let start = Start::new(cursor, stored, last);
    Ok(Subscription::new(
        id,
        catalog,
        source,
        start,
        Some(broadcast),
    ))
}

/// Session `id`'s frames after `cursor` from the store alone, for a session another process
/// writes (a node of a scale-out, a `run-command`): each commit is read once the store tells
/// of it (PostgreSQL's LISTEN/NOTIFY; SQLite is looked at again every [`COMMIT_POLL`]). Frames
/// of requests (their errors, closing snapshots and `done`) are not in the store: such a
/// stream carries the log's frames only.
pub async fn follow_store(
    mut catalog: Box<dyn SessionCatalog>,
    id: &str,
    cursor: Option<Position>,
) -> Result<Subscription, StoreError> {
    let stored = stored_events(catalog.as_mut(), id).await?;
    let start = Start::new(cursor, stored, stored);
    Ok(Subscription::new(id, catalog, Source::Store, start, None))
}

/// Where the frames after the store's come from.
enum Source {
    /// A session loaded here: its live frames.
    Live {
        /// Held for its shared snapshot, and so that the session's slot outlives the stream.
        hosted: Arc<Hosted>,
        live: LiveFrames,
    },
    /// A session another process writes: its store's commits, as they come.
    Store,
}

/// What a subscription sends first.
#[derive(Clone, Copy)]
enum Start {
    /// The whole timeline as of event `stored`, as one snapshot.
    Snapshot { stored: u64 },
    /// Nothing before `cursor`; a cursor past `last`, the session's newest event, is an error.
    After { cursor: Position, last: u64 },
}

impl Start {
    fn new(cursor: Option<Position>, stored: u64, last: u64) -> Self {
        match cursor {
            None => Self::Snapshot { stored },
            Some(cursor) => Self::After { cursor, last },
        }
    }
}

/// A catch-up from the store that comes before any further live frame.
struct CatchUp {
    /// Through this ordinal, waiting for its commit; `None`: whatever the store holds.
    through: Option<u64>,
    /// When it first waited for the store (it waits [`STORE_WAIT`] at most).
    since: Option<Instant>,
}

impl CatchUp {
    fn through(through: Option<u64>) -> Self {
        Self {
            through,
            since: None,
        }
    }
}

/// One subscriber's frames (see the module's doc).
pub struct Subscription {
    id: String,
    catalog: Box<dyn SessionCatalog>,
    source: Source,
    /// What to send first, until it has been.
    start: Option<Start>,
    /// The position of the newest frame sent.
    sent: Position,
    /// The store's events, read as far as the last catch-up went: the next catch-up goes on
    /// from there. It holds the session's timeline, so a subscriber that has kept up for
    /// [`LET_GO_AFTER`] live frames lets it go (a later catch-up opens the store again).
    /// Boxed: a subscriber that keeps up holds none.
    stored: Option<Box<StoredStream>>,
    /// Live frames sent since the last catch-up.
    live_since_catch_up: usize,
    /// Frames made and not yet taken: a snapshot, or one page of the store, at most.
    ready: VecDeque<Arc<Frame>>,
    /// A catch-up to finish before the next live frame.
    due: Option<CatchUp>,
    /// The live frame that made the catch-up due: it goes after it, unless the store gave it.
    held: Option<Arc<Frame>>,
    /// No frame comes after `ready`'s.
    ended: bool,
}

impl Subscription {
    /// Starts with hello; `catch_up_through` is the ordinal the store must give (through the
    /// live frames that went out before the subscriber listened), `None` following the store.
    fn new(
        id: &str,
        catalog: Box<dyn SessionCatalog>,
        source: Source,
        start: Start,
        catch_up_through: Option<u64>,
    ) -> Self {
        let mut subscription = Self {
            id: id.to_owned(),
            catalog,
            source,
            start: Some(start),
            sent: Position::through(0),
            stored: None,
            live_since_catch_up: 0,
            ready: VecDeque::new(),
            due: Some(CatchUp::through(catch_up_through)),
            held: None,
            ended: false,
        };
        subscription.push_line(rpc_line::Frame::Hello(hello_frame(&[])));
        subscription
    }

    /// The next frame; `None` once the stream has ended (the session unloaded, or the store
    /// failed after saying so in a terminal error frame). Dropping the future loses no frame,
    /// but a wait it had begun (a snapshot being read, the store waited for) begins again:
    /// a connection that wakes for other things between frames waits with [`next_frame`].
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        loop {
            if let Some(frame) = self.try_recv() {
                return Some(frame);
            }
            if self.ended {
                return None;
            }
            if let Err(error) = self.step().await {
                self.fail(error);
            }
        }
    }

    /// The next frame if one can be had without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Frame>> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                // The room a snapshot or a page of the store took is not kept for live frames,
                // which pass one at a time.
                if self.ready.is_empty() && self.ready.capacity() > READY_KEPT {
                    self.ready = VecDeque::new();
                }
                return Some(frame);
            }
            if self.ended || self.start.is_some() || self.due.is_some() {
                return None;
            }
            let Source::Live { live, .. } = &mut self.source else {
                return None;
            };
            let received = live.try_recv()?;
            self.take_live(received);
        }
    }

    /// How many frames are ready or queued live now.
    pub fn queued(&self) -> usize {
        let live = match &self.source {
            Source::Live { live, .. } => live.queued(),
            Source::Store => 0,
        };
        self.ready.len() + live
    }

    /// One step that waits: the start, a page of a catch-up that is due, or the next live
    /// frame (the next commit, following the store).
    async fn step(&mut self) -> Result<(), StoreError> {
        if let Some(start) = self.start {
            self.begin(start).await?;
            self.start = None;
            return Ok(());
        }
        if let Some(due) = &mut self.due {
            let through = due.through;
            let since = *due.since.get_or_insert_with(Instant::now);
            if self.catch_up_page(through, since).await? {
                self.caught_up();
            }
            return Ok(());
        }
        match &mut self.source {
            Source::Live { live, .. } => {
                let received = live.recv().await;
                self.take_live(received);
            }
            Source::Store => {
                self.catalog.wait_for_commits(&self.id, COMMIT_POLL).await?;
                self.due = Some(CatchUp::through(None));
            }
        }
        Ok(())
    }

    /// Sends what comes first. Nothing is sent before its reads are done, so that a start cut
    /// short is begun again as if it had not been.
    async fn begin(&mut self, start: Start) -> Result<(), StoreError> {
        match start {
            Start::After { cursor, last } if cursor.ordinal > last => {
                let message = format!(
                    "the cursor {} is past session {}'s last event, {last}",
                    cursor.id(),
                    self.id
                );
                self.push_error(ErrorCode::CursorOutOfRange, message);
                self.ended = true;
            }
            Start::After { cursor, .. } => self.sent = cursor,
            Start::Snapshot { stored } => {
                let snapshot = match &self.source {
                    // Subscribers without a cursor share one encoding of the timeline. Boxed,
                    // as every read of the store is: a subscription holds only what following
                    // live needs, not room for the store's reads.
                    Source::Live { hosted, .. } => {
                        let shared =
                            hosted
                                .snapshot
                                .shared(self.catalog.as_mut(), &self.id, stored);
                        Box::pin(shared).await?
                    }
                    Source::Store => {
                        let whole = StoredStream::open(
                            self.catalog.as_mut(),
                            &self.id,
                            stored,
                            Some(stored),
                        );
                        snapshot_frames(&Box::pin(whole).await?, stored)
                    }
                };
                self.ready.extend(snapshot);
                self.sent = Position::through(stored);
            }
        }
        Ok(())
    }

    /// A live frame, a gap or the end, as the live queue gave it.
    fn take_live(&mut self, received: Live) {
        match received {
            Live::Frame(frame) => match frame.position {
                Some(position) if position <= self.sent => {}
                // Frames between are missing: the store gives them first (through the one
                // before this frame's event, waiting for their commit), then this one.
                Some(position) if !self.follows(position) => {
                    self.due = Some(CatchUp::through(Some(position.ordinal - 1)));
                    self.held = Some(frame);
                }
                _ => self.push_live(frame),
            },
            Live::Lagged(through) => {
                tracing::debug!(
                    "a subscriber of {} missed frames through {through}",
                    self.id
                );
                // Through the newest it missed, waiting for its commit: a frame of the
                // request queued after them (its `done`) must not pass them.
                self.due = Some(CatchUp::through(Some(through)));
            }
            // The session unloaded: its stream ends here; the client resumes later.
            Live::Closed => self.ended = true,
        }
    }

    /// Sends a live frame.
    fn push_live(&mut self, frame: Arc<Frame>) {
        self.push(frame);
        self.live_since_catch_up += 1;
        if self.live_since_catch_up == LET_GO_AFTER {
            self.stored = None;
        }
    }

    /// A catch-up is done: the live frame that was held for it goes now, unless the store gave
    /// it.
    fn caught_up(&mut self) {
        self.due = None;
        self.live_since_catch_up = 0;
        if let Some(frame) = self.held.take()
            && frame.position.is_none_or(|position| position > self.sent)
        {
            self.push_live(frame);
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

    /// Reads the next page of a catch-up after what was sent: to the store's end, or
    /// (`through`) up to that ordinal, waiting for the store to commit it (since `since`, for
    /// [`STORE_WAIT`] at most). Returns whether the catch-up is done. The stored stream is
    /// opened once and read on at each catch-up, so catching up costs the events it reads,
    /// not the session's age.
    async fn catch_up_page(
        &mut self,
        through: Option<u64>,
        since: Instant,
    ) -> Result<bool, StoreError> {
        let caught_up = |sent: Position| through.is_none_or(|through| sent.ordinal >= through);
        // Nothing to read: no copy of the timeline is made for a subscriber that is current.
        if self.stored.is_none()
            && self.sent.index == Position::LAST
            && through.is_some()
            && caught_up(self.sent)
        {
            return Ok(true);
        }
        // Taken while it reads: a read cut short leaves none, and the next opens it again at
        // what was sent.
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
                stored_through(self.catalog.as_mut(), &self.id, from, since).await?;
                let opened = StoredStream::open(self.catalog.as_mut(), &self.id, from, None);
                Box::new(Box::pin(opened).await?)
            }
        };
        let page = Box::pin(stored.next_page(self.catalog.as_mut())).await?;
        self.stored = Some(stored);
        if !page.is_empty() {
            for output in &page {
                for frame in frames_of(output) {
                    if frame.position.is_some_and(|position| position > self.sent) {
                        self.push(Arc::new(frame));
                    }
                }
            }
            return Ok(false);
        }
        if caught_up(self.sent) {
            return Ok(true);
        }
        if since.elapsed() > STORE_WAIT {
            return Err(StoreError::NotFound(format!(
                "event {} of session {} is not in the store after {} s",
                through.unwrap_or_default(),
                self.id,
                STORE_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(STORE_POLL).await;
        Ok(false)
    }

    /// Sends `frame` (a marker only moves the position on).
    fn push(&mut self, frame: Arc<Frame>) {
        if let Some(position) = frame.position {
            self.sent = self.sent.max(position);
        }
        if !frame.is_marker() {
            self.ready.push_back(frame);
        }
    }

    fn push_line(&mut self, frame: rpc_line::Frame) {
        if let Some(frame) = Frame::of_line(&self.id, "", frame) {
            self.push(Arc::new(frame));
        }
    }

    fn push_error(&mut self, code: ErrorCode, message: String) {
        let error = ErrorFrame {
            code: code.into(),
            message,
            terminal: true,
            ..Default::default()
        };
        self.push_line(rpc_line::Frame::Error(error));
    }

    /// Ends the stream with the store's failure; the client may resume from its cursor.
    fn fail(&mut self, error: StoreError) {
        tracing::warn!("a subscriber of {} stops: {error}", self.id);
        let message = format!("{error}; reconnect with the last event id to go on");
        self.push_error(ErrorCode::StorageFailed, message);
        self.ended = true;
    }
}

/// Waits until the store holds session `id`'s events through `ordinal` (a frame sent live
/// can be ahead of its commit), until [`STORE_WAIT`] after `since` at most.
async fn stored_through(
    catalog: &mut dyn SessionCatalog,
    id: &str,
    ordinal: u64,
    since: Instant,
) -> Result<(), StoreError> {
    loop {
        let stored = stored_events(catalog, id).await?;
        if stored >= ordinal {
            return Ok(());
        }
        if since.elapsed() > STORE_WAIT {
            return Err(StoreError::NotFound(format!(
                "event {ordinal} of session {id} is not in the store after {} s (it holds {stored})",
                STORE_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(STORE_POLL).await;
    }
}

/// The next frame of `subscription`, which the future owns meanwhile and hands back. A
/// connection keeps this one future across its heartbeats and other wake-ups (boxed once, set
/// anew for each frame), so that a long wait is never cut short and begun again: a snapshot of
/// megabytes is read once, and a store that does not commit fails the stream after
/// [`STORE_WAIT`], whatever the heartbeat.
pub async fn next_frame(mut subscription: Subscription) -> (Subscription, Option<Arc<Frame>>) {
    let frame = subscription.recv().await;
    (subscription, frame)
}

/// How many events the store holds of session `id`.
async fn stored_events(catalog: &mut dyn SessionCatalog, id: &str) -> Result<u64, StoreError> {
    Ok(catalog
        .summary(id)
        .await?
        .map_or(0, |summary| summary.events))
}

#[cfg(test)]
#[path = "subscription_tests.rs"]
mod tests;
