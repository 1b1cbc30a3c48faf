//! `reel export SESSION --format parquet -o FILE` and `reel export --all [--since DATE]
//! --format parquet -o DIR`: the log as analytics rows (see `reel_parquet` for the columns),
//! read page by page, so an export costs the memory of a row group, not of the log.
//!
//! Reading a page (the database, then decoding each event) costs about what making and
//! writing its rows does, so the rows are made and written on a thread of their own while the
//! next page is read.

use std::{
    io::BufWriter,
    path::Path,
    sync::{Arc, mpsc},
};

use anyhow::Context;
use reel_engine::{LogEntry, LogPages, SessionCatalog};
use reel_parquet::{DayPartitions, EventFile, EventRow, ParquetError, RowMaker};
use reel_storage::TimelineStore;

use super::destination::{self, Output};
use crate::{same_file::InUse, stored::progress};

/// Events read per query. Small pages keep the rows the database hands over in memory the
/// allocator has at hand: 4,096 made the export touch 200,000 new pages (a third slower).
const PAGE: u32 = 512;

/// Writes session `id`'s events up to `at` into the Parquet file `path`.
pub async fn one_session(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
    path: &Path,
    in_use: &[InUse],
) -> anyhow::Result<()> {
    let output = Output::create(destination::choose(path, in_use)?)?;
    let writer = output
        .writer()
        .with_context(|| format!("cannot write {}", path.display()))?;
    let file = EventFile::new(BufWriter::new(writer))?;
    let rows = RowThread::start(file, 0);
    let bar = progress::events(at, "exporting");
    let read = read_session(store, id, at, &rows, &bar).await;
    bar.finish_and_clear();
    let file = rows.finish(read)?;
    file.finish()
        .with_context(|| format!("cannot write {}", path.display()))?;
    output.finish()
}

/// Writes every session's events appended at or after `since` (all of them without it) into
/// `dir`, a file per UTC day. Returns (sessions, days, rows).
pub async fn all_sessions(
    store: &mut TimelineStore,
    since: Option<u64>,
    dir: &Path,
) -> anyhow::Result<(usize, usize, u64)> {
    let since = since.unwrap_or(0);
    let sessions: Vec<_> = store
        .sessions()
        .await?
        .into_iter()
        .filter(|s| u64::try_from(s.updated_at_ms).unwrap_or(0) >= since)
        .collect();
    let rows = RowThread::start(DayPartitions::create(dir)?, since);
    let total = sessions.iter().map(|s| s.events).sum();
    let bar = progress::events(total, "exporting");
    let mut read = Ok(());
    for session in &sessions {
        read = read_session(store, &session.session_id, session.events, &rows, &bar).await;
        if read.is_err() {
            break;
        }
    }
    bar.finish_and_clear();
    let partitions = rows.finish(read)?;
    let (days, rows) = partitions.finish()?;
    Ok((sessions.len(), days, rows))
}

/// Hands the session's events up to `at` to the row thread, page by page.
async fn read_session(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
    rows: &RowThread<impl RowSink>,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let session: Arc<str> = Arc::from(id);
    let mut pages = LogPages::new(id, 0, at).page_size(PAGE);
    loop {
        let page = pages.next(store).await?;
        if page.is_empty() {
            return Ok(());
        }
        bar.inc(page.len() as u64);
        if rows.pages.send((session.clone(), page)).is_err() {
            // The thread stopped at a failure, which `finish` reports.
            return Ok(());
        }
    }
}

/// Where rows go: one file, or a directory of days.
trait RowSink: Send + 'static {
    fn push(&mut self, row: EventRow) -> Result<(), ParquetError>;
    /// Removes what was written, after a failure.
    fn abandon(self);
}

impl<W: std::io::Write + Send + 'static> RowSink for EventFile<W> {
    fn push(&mut self, row: EventRow) -> Result<(), ParquetError> {
        EventFile::push(self, row)
    }

    /// The file is a temporary one its `Output` drops.
    fn abandon(self) {}
}

impl RowSink for DayPartitions {
    fn push(&mut self, row: EventRow) -> Result<(), ParquetError> {
        DayPartitions::push(self, row)
    }

    fn abandon(self) {
        DayPartitions::abandon(self);
    }
}

/// The thread that makes each page's rows and writes them into its sink.
struct RowThread<S> {
    pages: mpsc::SyncSender<(Arc<str>, Vec<LogEntry>)>,
    thread: std::thread::JoinHandle<(S, Result<(), ParquetError>)>,
}

impl<S: RowSink> RowThread<S> {
    /// Starts it; rows of events appended before `since` (ms) are left out (they are made, so
    /// the ones kept know their run and model).
    fn start(mut sink: S, since: u64) -> Self {
        // Two pages in flight: one being read, one being written.
        let (pages, received) = mpsc::sync_channel::<(Arc<str>, Vec<LogEntry>)>(2);
        let thread = std::thread::spawn(move || {
            let mut maker: Option<RowMaker> = None;
            let mut session: Option<Arc<str>> = None;
            for (id, page) in received {
                if session.as_ref() != Some(&id) {
                    maker = Some(RowMaker::new(&id));
                    session = Some(id);
                }
                let maker = maker.as_mut().expect("made above");
                for entry in &page {
                    let row = maker.row(entry);
                    if entry.recorded_at_ms >= since
                        && let Err(error) = sink.push(row)
                    {
                        return (sink, Err(error));
                    }
                }
            }
            (sink, Ok(()))
        });
        Self { pages, thread }
    }

    /// Waits for the rows of every page sent; the sink to finish, or the first failure (of the
    /// reading, `read`, or of the writing), after removing what was written.
    fn finish(self, read: anyhow::Result<()>) -> anyhow::Result<S> {
        drop(self.pages);
        let (sink, written) = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the Parquet writer panicked"))?;
        match (read, written) {
            (Ok(()), Ok(())) => Ok(sink),
            (Err(error), _) => {
                sink.abandon();
                Err(error)
            }
            (Ok(()), Err(error)) => {
                sink.abandon();
                Err(error.into())
            }
        }
    }
}
