//! What the commands on stored sessions share (`reel sessions`, `show`, `export`, `replay`,
//! `fork`, `tail`, `rm`, `verify`, and `reel serve`'s exports and forks): which database they
//! read, reading a session's events page by page, rendering it through a sink, copying it.
//!
//! Every view is derived from the log alone, page by page ([`LogPages`]), so it can be taken at
//! any ordinal and costs memory for the session's content, never for its number of events. A
//! view is the stored session's outputs (the ones its live run produced, [`send_stored`])
//! handed to the sink [`crate::outputs`] builds for it.

pub mod compare;
mod copy;
mod export_format;
pub mod progress;
pub mod turns;

pub use copy::{check_fork_point, copy_leased};
pub use export_format::Format;

use indicatif::ProgressBar;
use std::path::PathBuf;

use reel_engine::{
    Fanout, LogEntry, LogPages, LogStore, SessionCatalog, SessionSummary, Sink, StoreError,
    send_stored,
};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

/// How to pick another database, for messages about the one that was read.
const CHOOSE_ANOTHER: &str = "--timeline-db PATH or --timeline-dsn URL reads another database";

/// Which timeline database a command reads.
#[derive(clap::Args, Debug, Clone)]
pub struct Database {
    /// The timeline database (SQLite file). Default: timeline.db in the user's data folder
    /// ($XDG_DATA_HOME/reel or ~/.local/share/reel), where run-command --session-id keeps it.
    #[arg(long, value_name = "PATH", conflicts_with = "timeline_dsn")]
    pub timeline_db: Option<PathBuf>,
    /// The timeline database as a DSN: sqlite://PATH or postgres://USER@HOST:PORT/DATABASE.
    #[arg(long, value_name = "URL")]
    pub timeline_dsn: Option<String>,
}

/// The turns database a command changes beside the timeline database, if one is named.
#[derive(clap::Args, Debug, Clone)]
pub struct TurnsDatabase {
    /// Also change the session's turns in this turns database (SQLite file).
    #[arg(long, value_name = "PATH", conflicts_with = "turns_dsn")]
    pub turns_db: Option<PathBuf>,
    /// The turns database as a DSN.
    #[arg(long, value_name = "URL")]
    pub turns_dsn: Option<String>,
}

impl TurnsDatabase {
    /// The turns database opened for writing, if one is named.
    pub async fn open(&self) -> anyhow::Result<Option<TimelineStore>> {
        let location = match (&self.turns_dsn, &self.turns_db) {
            (Some(dsn), _) => Location::dsn(dsn)?,
            (None, Some(path)) => Location::path(path),
            (None, None) => return Ok(None),
        };
        Ok(Some(open_timeline(&location, Access::ReadWrite).await?))
    }
}

impl Database {
    /// Where the database is.
    pub fn location(&self) -> anyhow::Result<Location> {
        if let Some(dsn) = &self.timeline_dsn {
            return Ok(Location::dsn(dsn)?);
        }
        let path = match &self.timeline_db {
            Some(path) => path.clone(),
            None => crate::persistence::data_folder()?.join("timeline.db"),
        };
        Ok(Location::path(path))
    }

    /// Whether no flag chose the database (it is the user's default one).
    pub fn is_default(&self) -> bool {
        self.timeline_db.is_none() && self.timeline_dsn.is_none()
    }

    /// Opens an existing database for writing (fork, rm): it must be reel's already.
    pub async fn open_for_writing(&self) -> anyhow::Result<TimelineStore> {
        let location = self.location()?;
        if let Some(path) = location.sqlite_path().filter(|path| !path.exists()) {
            return Err(anyhow::anyhow!(
                "there is no timeline database at {} ({CHOOSE_ANOTHER})",
                path.display()
            ));
        }
        Ok(open_timeline(&location, Access::ReadWrite).await?)
    }

    /// Opens an existing database for writing and takes the lease of its session `id`, so no
    /// writer is in the middle of what the command does to it (`doing`, said when another
    /// process holds it). Release the lease when done.
    pub async fn lease_existing(&self, id: &str, doing: &str) -> anyhow::Result<TimelineStore> {
        let mut store = self.open_for_writing().await?;
        if !store.exists(id).await? {
            return Err(anyhow::anyhow!(
                "there is no session {id:?} in {}",
                self.location()?
            ));
        }
        store.lease(id).await.map_err(|e| {
            anyhow::anyhow!("{e}; stop that process (or wait for it to end) before {doing}")
        })?;
        Ok(store)
    }

    /// Opens the database for reading: it is never created, migrated or changed.
    pub async fn open(&self) -> anyhow::Result<Reader> {
        let location = self.location()?;
        match open_timeline(&location, Access::ReadOnly).await {
            Ok(store) => Ok(Reader { store, location }),
            Err(StoreError::NotFound(message)) if self.is_default() => Err(anyhow::anyhow!(
                "{message} (the default database; {CHOOSE_ANOTHER})"
            )),
            Err(error) => Err(error.into()),
        }
    }
}

/// A timeline database opened for reading, and where it is.
pub struct Reader {
    pub store: TimelineStore,
    pub location: Location,
}

impl Reader {
    /// The session's summary, or an error naming the database and how to choose another.
    pub async fn find_session(&mut self, session_id: &str) -> anyhow::Result<SessionSummary> {
        self.store.summary(session_id).await?.ok_or_else(|| {
            anyhow::anyhow!(
                "there is no session {session_id:?} in {} ({CHOOSE_ANOTHER})",
                self.location
            )
        })
    }
}

/// The ordinal a view is taken at: `at`, or the end of the log; past the end is an error.
pub fn resolve_at(summary: &SessionSummary, at: Option<u64>) -> anyhow::Result<u64> {
    match at {
        None => Ok(summary.events),
        Some(at) if at <= summary.events => Ok(at),
        Some(at) => Err(anyhow::anyhow!(
            "session {:?} has {} events; there is no ordinal {at}",
            summary.session_id,
            summary.events
        )),
    }
}

/// Hands every event of the session from `after` to `up_to` to `apply`, in order, with a
/// progress bar saying `what` on a terminal.
pub async fn each_event(
    store: &mut TimelineStore,
    session_id: &str,
    (after, up_to): (u64, u64),
    what: &str,
    mut apply: impl FnMut(&LogEntry) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut pages = LogPages::new(session_id, after, up_to);
    let bar = progress::events(pages.remaining(), what);
    loop {
        let page = pages.next(store).await?;
        if page.is_empty() {
            break;
        }
        page.iter().try_for_each(&mut apply)?;
        bar.inc(page.len() as u64);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Writes the stored session up to `at` through `sink`: its outputs, as its live run produced
/// them, counted on `bar`. A failed write is "cannot write `target`: why".
pub async fn render(
    store: &mut TimelineStore,
    session_id: &str,
    at: u64,
    sink: Box<dyn Sink>,
    (bar, target): (ProgressBar, &str),
) -> anyhow::Result<()> {
    let mut fanout = Fanout::new();
    fanout.attach(sink);
    let sent = send_stored(store, session_id, 0, at, &mut fanout, |read| bar.inc(read)).await;
    bar.finish_and_clear();
    let failures = fanout.close().await;
    sent?;
    match failures.first() {
        Some(failure) => Err(anyhow::anyhow!(
            "cannot write {target}: {}",
            failure.message
        )),
        None => Ok(()),
    }
}
