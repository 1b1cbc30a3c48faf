//! `reel export SESSION --format parquet -o FILE` and `reel export --all [--since DATE]
//! --format parquet -o DIR`: the log as analytics rows (see `reel_parquet` for the columns),
//! read page by page, so an export costs the memory of a row group, not of the log.

use std::{io::BufWriter, path::Path, sync::Arc};

use anyhow::Context;
use reel_engine::{LogEntry, LogPages, SessionCatalog};
use reel_parquet::{DayPartitions, EventFile, EventRow, ParquetError, RowMaker};
use reel_storage::TimelineStore;

use super::destination::{self, Output};
use crate::{same_file::InUse, stored::progress};

/// Events read per query. Small pages keep the rows the database hands over in memory the
/// allocator has at hand: with 4,096 an export of a million events touched twice as many new
/// pages (200,000) and took a tenth longer.
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
    let mut rows = Rows::new(file, 0);
    let bar = progress::events(at, "exporting");
    let written = read_session(store, id, at, &mut rows, &bar).await;
    bar.finish_and_clear();
    let file = rows.finish(written)?;
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
    let mut rows = Rows::new(DayPartitions::create(dir)?, since);
    let total = sessions.iter().map(|s| s.events).sum();
    let bar = progress::events(total, "exporting");
    let mut written = Ok(());
    for session in &sessions {
        written = read_session(store, &session.session_id, session.events, &mut rows, &bar).await;
        if written.is_err() {
            break;
        }
    }
    bar.finish_and_clear();
    let partitions = rows.finish(written)?;
    let (days, rows) = partitions.finish()?;
    Ok((sessions.len(), days, rows))
}

/// Writes the rows of the session's events up to `at`, page by page.
async fn read_session(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
    rows: &mut Rows<impl RowSink>,
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
        rows.page(&session, &page)?;
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
