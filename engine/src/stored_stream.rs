//! A stored session as the outputs its live client read: hello, the snapshot at the start, the
//! ui events of every event after it, the snapshot at the end, done.
//!
//! The outputs are made by the same projection a live session runs, from the log alone, so a
//! stored session handed to the same sinks renders as the live one did (`reel export --format
//! jsonl` is the live stream, byte for byte). Events come page by page ([`LogPages`]): memory
//! holds the timeline and one page, however long the log.

use std::sync::Arc;

use reel_proto::rpc::{DoneFrame, HelloFrame};

use crate::{
    catalog::SessionCatalog,
    fanout::Fanout,
    log::LogEntry,
    log_pages::LogPages,
    output::{CommittedEvent, Output, OutputKind, hello_frame},
    projection::Projection,
    store::StoreError,
    timeline::TimelineProjection,
    vocabulary::DoneStatus,
};

/// Events read per query. A page is held as outputs while the sinks take it, each event with
/// its ui events: smaller than a plain reader's page, so the memory in flight stays small
/// (measured: an export of a million events peaks 8 MB lower than with 2,048).
const OUTPUT_PAGE: u32 = 512;

/// A stored session read as outputs, from an ordinal on.
pub struct StoredStream {
    session_id: Arc<str>,
    /// Stored sessions are read outside any request.
    request_id: Arc<str>,
    timeline: TimelineProjection,
    /// Whether the timeline projects each event (off when only [`crate::Reads::LogOnly`] sinks read:
    /// events then carry no ui events and snapshots are empty).
    project: bool,
    pages: LogPages,
}

impl StoredStream {
    /// The session as it was at `from` (its newest snapshot at or before, then the events up to
    /// `from`), read on to `up_to`, or to whatever is stored at each page when `up_to` is
    /// `None` (following a session another process writes).
    pub async fn open<C: SessionCatalog + ?Sized>(
        catalog: &mut C,
        session_id: &str,
        from: u64,
        up_to: Option<u64>,
    ) -> Result<Self, StoreError> {
        let mut timeline = catalog.snapshot_at_most(session_id, from).await?.timeline;
        let mut catch_up = LogPages::new(session_id, timeline.last_ordinal(), from);
        loop {
            let page = catch_up.next(catalog).await?;
            if page.is_empty() {
                break;
            }
            for entry in &page {
                timeline.fold(entry);
            }
        }
        let pages = match up_to {
            Some(up_to) => LogPages::new(session_id, from, up_to),
            None => LogPages::following(session_id, from),
        }
        .page_size(OUTPUT_PAGE);
        Ok(Self {
            session_id: Arc::from(session_id),
            request_id: Arc::from(""),
            timeline,
            project: true,
            pages,
        })
    }

    /// A session whose log is read elsewhere (a JetStream stream), as it was at `timeline`:
    /// the caller hands each later entry to [`StoredStream::event`].
    pub fn of_timeline(session_id: &str, timeline: TimelineProjection) -> Self {
        let from = timeline.last_ordinal();
        Self {
            session_id: Arc::from(session_id),
            request_id: Arc::from(""),
            timeline,
            project: true,
            pages: LogPages::following(session_id, from),
        }
    }

    /// Reads for sinks that read the log alone ([`crate::Reads::LogOnly`]): the timeline is not
    /// projected, which saves its time and the memory of the session's text held twice.
    pub fn log_only(mut self) -> Self {
        self.project = false;
        self.timeline = TimelineProjection::new();
        self
    }

    /// The hello a client of a one-shot stream reads first.
    pub fn hello(&self) -> Output {
        let hello: HelloFrame = hello_frame(&[]);
        self.output(OutputKind::Hello(Arc::new(hello)))
    }

    /// The timeline as of the newest event read.
    pub fn snapshot(&self) -> Output {
        self.output(OutputKind::Snapshot(Arc::new(self.timeline.snapshot())))
    }

    pub fn done(&self, status: DoneStatus) -> Output {
        let done = DoneFrame {
            status: status.into(),
        };
        self.output(OutputKind::Done(Arc::new(done)))
    }

    /// The next page of events as outputs, each with the ui events the timeline projects from
    /// it; empty at the end.
    pub async fn next_page<C: SessionCatalog + ?Sized>(
        &mut self,
        catalog: &mut C,
    ) -> Result<Vec<Output>, StoreError> {
        let page = self.pages.next(catalog).await?;
        Ok(page.into_iter().map(|entry| self.event(entry)).collect())
    }

    /// `entry`, the next event, as an output with the ui events the timeline projects from it.
    pub fn event(&mut self, entry: LogEntry) -> Output {
        let ui_events = if self.project {
            self.timeline.apply(&entry)
        } else {
            Vec::new()
        };
        self.output(OutputKind::Event(Arc::new(CommittedEvent {
            entry: Arc::new(entry),
            ui_events,
            context: None,
        })))
    }

    fn output(&self, kind: OutputKind) -> Output {
        Output {
            session_id: Arc::clone(&self.session_id),
            request_id: Arc::clone(&self.request_id),
            kind,
        }
    }
}

/// Hands `fanout` the whole stream of a stored session from `from` to `up_to`: hello, the
/// snapshot at `from`, every event with its ui events, the snapshot at `up_to`, done (the ui
/// events and snapshots left empty when no attached sink reads them). `read` hears how many
/// events each page held (for progress). Stops early when every sink has failed; the caller
/// learns why from [`Fanout::close`].
pub async fn send_stored<C: SessionCatalog + ?Sized>(
    catalog: &mut C,
    session_id: &str,
    from: u64,
    up_to: u64,
    fanout: &mut Fanout,
    mut read: impl FnMut(u64),
) -> Result<(), StoreError> {
    let mut stream = StoredStream::open(catalog, session_id, from, Some(up_to)).await?;
    if !fanout.reads_frames() {
        stream = stream.log_only();
    }
    fanout.send(stream.hello()).await;
    fanout.send(stream.snapshot()).await;
    loop {
        let page = stream.next_page(catalog).await?;
        if page.is_empty() || fanout.is_empty() {
            break;
        }
        read(page.len() as u64);
        for output in page {
            fanout.send(output).await;
        }
    }
    fanout.send(stream.snapshot()).await;
    fanout.send(stream.done(DoneStatus::Ok)).await;
    fanout.flush().await;
    Ok(())
}
