//! `reel export SESSION --format parquet -o FILE` and `reel export --all [--since DATE]
//! --format parquet -o DIR`: the log as analytics rows (see `reel_parquet` for the columns),
//! read page by page, so an export costs the memory of a row group, not of the log.

use std::{io::BufWriter, path::Path, sync::Arc};

use anyhow::Context;
use reel_engine::{LogEntry, LogPages, SessionCatalog};
use reel_parquet::{DayPartitions, EventFile, EventRow, ParquetError, RowMaker};
use reel_storage::TimelineStore;
use tokio::{sync::mpsc, task::JoinHandle};

use super::destination::{self, Output};
use crate::{same_file::InUse, stored::progress};

/// Events read per query. Small pages keep the rows the database hands over in memory the
/// allocator has at hand: with 4,096 an export of a million events touched twice as many new
/// pages (200,000) and took a tenth longer.
const PAGE: u32 = 512;

/// Pages read ahead of the rows being made: the store reads and decodes the next pages while
/// a blocking thread makes and encodes the rows of this one (each alone kept a core busy).
const PAGES_AHEAD: usize = 4;

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
    let rows = RowWriter::start(Rows::new(file, 0));
    let bar = progress::events(at, "exporting");
    let read = read_session(store, id, at, &rows, &bar).await;
    bar.finish_and_clear();
    let file = rows.finish(read).await?;
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
    let rows = RowWriter::start(Rows::new(DayPartitions::create(dir)?, since));
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
    let partitions = rows.finish(read).await?;
    let (days, rows) = partitions.finish()?;
    Ok((sessions.len(), days, rows))
}

/// Hands the session's events up to `at` to `rows`, page by page (stopping early, with its
/// error to come from [`RowWriter::finish`], when it has failed).
async fn read_session<S>(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
    rows: &RowWriter<S>,
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
        if rows.pages.send((session.clone(), page)).await.is_err() {
            return Ok(());
        }
    }
}

/// A page of one session's events.
type Page = (Arc<str>, Vec<LogEntry>);

/// [`Rows`] on a blocking thread, taking pages while the caller reads the next ones.
struct RowWriter<S> {
    pages: mpsc::Sender<Page>,
    thread: JoinHandle<(Rows<S>, Result<(), ParquetError>)>,
}

impl<S: RowSink + Send + 'static> RowWriter<S> {
    fn start(mut rows: Rows<S>) -> Self {
        let (pages, mut received) = mpsc::channel::<Page>(PAGES_AHEAD);
        let thread = tokio::task::spawn_blocking(move || {
            while let Some((session, page)) = received.blocking_recv() {
                if let Err(error) = rows.page(&session, &page) {
                    return (rows, Err(error));
                }
            }
            (rows, Ok(()))
        });
        Self { pages, thread }
    }

    /// The sink to finish once every page is written, or the first failure (writing's, then
    /// reading's), after removing what was written.
    async fn finish(self, read: anyhow::Result<()>) -> anyhow::Result<S> {
        drop(self.pages);
        let (rows, written) = self
            .thread
            .await
            .context("the thread making the Parquet rows failed")?;
        rows.finish(written.map_err(anyhow::Error::from).and(read))
    }
}

/// Where rows go: one file, or a directory of days.
trait RowSink {
    fn push(&mut self, row: EventRow) -> Result<(), ParquetError>;
    /// Removes what was written, after a failure.
    fn abandon(self);
}

impl<W: std::io::Write + Send> RowSink for EventFile<W> {
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

/// Makes each page's rows and writes them into its sink.
struct Rows<S> {
    sink: S,
    /// The session being read and the maker of its rows.
    maker: Option<(Arc<str>, RowMaker)>,
    /// Rows of events appended before this (ms) are left out (they are made, so the ones
    /// kept know their run and model).
    since: u64,
}

impl<S: RowSink> Rows<S> {
    fn new(sink: S, since: u64) -> Self {
        Self {
            sink,
            maker: None,
            since,
        }
    }

    fn page(&mut self, session: &Arc<str>, page: &[LogEntry]) -> Result<(), ParquetError> {
        if self.maker.as_ref().is_none_or(|(id, _)| id != session) {
            self.maker = Some((session.clone(), RowMaker::new(session)));
        }
        let (_, maker) = self.maker.as_mut().expect("made above");
        for entry in page {
            let row = maker.row(entry);
            if entry.recorded_at_ms >= self.since {
                self.sink.push(row)?;
            }
        }
        Ok(())
    }

    /// The sink to finish, or the failure, after removing what was written.
    fn finish(self, written: anyhow::Result<()>) -> anyhow::Result<S> {
        match written {
            Ok(()) => Ok(self.sink),
            Err(error) => {
                self.sink.abandon();
                Err(error)
            }
        }
    }
}
