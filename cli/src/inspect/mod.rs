//! Views of stored sessions, and operations on them: `reel sessions`, `show`, `export`,
//! `replay`, `fork` and `tail`.
//!
//! Every view is derived from the log alone, page by page ([`LogPages`]), so it can be taken at
//! any ordinal and costs memory for the session's content, never for its number of events.

mod capture;
pub mod export;
pub mod fork;
pub mod frames;
mod printable;
pub mod progress;
pub use remove::RmArgs;
mod remove;
pub mod replay;
pub mod sessions;
pub mod show;
pub mod tail;
mod tail_text;
pub mod transcript;

use std::path::PathBuf;

pub use printable::{is_bidi_control, one_line, printable};

use reel_engine::{LogEntry, SessionCatalog, SessionSummary, StoreError, ordinal_error};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

/// Events read per query: large enough that paging costs little, small enough to stay flat.
const PAGE: u32 = 4096;

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

impl Database {
    /// Where the database is.
    pub fn location(&self) -> Result<Location, String> {
        if let Some(dsn) = &self.timeline_dsn {
            return Location::dsn(dsn).map_err(|e| e.to_string());
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
    pub async fn open_for_writing(&self) -> Result<TimelineStore, String> {
        let location = self.location()?;
        if let Some(path) = location.sqlite_path().filter(|path| !path.exists()) {
            return Err(format!(
                "there is no timeline database at {} ({CHOOSE_ANOTHER})",
                path.display()
            ));
        }
        open_timeline(&location, Access::ReadWrite)
            .await
            .map_err(|e| e.to_string())
    }

    /// Opens the database for reading: it is never created, migrated or changed.
    pub async fn open(&self) -> Result<Reader, String> {
        let location = self.location()?;
        match open_timeline(&location, Access::ReadOnly).await {
            Ok(store) => Ok(Reader { store, location }),
            Err(StoreError::NotFound(message)) if self.is_default() => Err(format!(
                "{message} (the default database; {CHOOSE_ANOTHER})"
            )),
            Err(error) => Err(error.to_string()),
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
    pub async fn find_session(&mut self, session_id: &str) -> Result<SessionSummary, String> {
        self.store
            .summary(session_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "there is no session {session_id:?} in {} ({CHOOSE_ANOTHER})",
                    self.location
                )
            })
    }
}

/// The ordinal a view is taken at: `at`, or the end of the log; past the end is an error.
pub fn resolve_at(summary: &SessionSummary, at: Option<u64>) -> Result<u64, String> {
    match at {
        None => Ok(summary.events),
        Some(at) if at <= summary.events => Ok(at),
        Some(at) => Err(format!(
            "session {:?} has {} events; there is no ordinal {at}",
            summary.session_id, summary.events
        )),
    }
}

/// A session's log from `after` up to `up_to`, page by page.
pub struct LogPages<'a> {
    store: &'a mut TimelineStore,
    session_id: String,
    after: u64,
    up_to: u64,
}

impl<'a> LogPages<'a> {
    pub fn new(store: &'a mut TimelineStore, session_id: &str, after: u64, up_to: u64) -> Self {
        Self {
            store,
            session_id: session_id.to_owned(),
            after,
            up_to,
        }
    }

    /// The next page (empty at the end). A gap in the stored ordinals is an error: a view of
    /// a damaged log would be wrong without saying so.
    pub async fn next(&mut self) -> Result<Vec<LogEntry>, String> {
        if self.after >= self.up_to {
            return Ok(Vec::new());
        }
        let mut page = self
            .store
            .events_page(&self.session_id, self.after, PAGE)
            .await
            .map_err(|e| e.to_string())?;
        page.retain(|entry| entry.ordinal <= self.up_to);
        for entry in &page {
            if entry.ordinal != self.after + 1 {
                return Err(format!(
                    "session {:?}: {}",
                    self.session_id,
                    ordinal_error(entry.ordinal, self.after + 1)
                ));
            }
            self.after = entry.ordinal;
        }
        if page.is_empty() && self.after < self.up_to {
            return Err(format!(
                "session {:?}: the log ends at ordinal {}, before {}",
                self.session_id, self.after, self.up_to
            ));
        }
        Ok(page)
    }

    /// Hands every event to `apply`, in order, with a progress bar saying `what` on a terminal.
    pub async fn each(
        mut self,
        what: &str,
        mut apply: impl FnMut(&LogEntry) -> Result<(), String>,
    ) -> Result<(), String> {
        let bar = progress::events(self.up_to - self.after.min(self.up_to), what);
        loop {
            let page = self.next().await?;
            if page.is_empty() {
                break;
            }
            for entry in &page {
                apply(entry)?;
            }
            bar.inc(page.len() as u64);
        }
        bar.finish_and_clear();
        Ok(())
    }
}

/// Runs one of the session commands; the exit status.
pub async fn run(action: crate::cli::Action) -> u8 {
    use crate::cli::Action;
    let result = match action {
        Action::Sessions(args) => sessions::run(args).await,
        Action::Show(args) => show::run(args).await,
        Action::Export(args) => export::run(args).await,
        Action::Replay(args) => replay::run(args).await,
        Action::Fork(args) => fork::run(args).await,
        Action::Tail(args) => tail::run(args).await,
        Action::Rm(args) => remove::run(args).await,
        Action::RunCommand(_) | Action::Bench(_) | Action::Verify(_) => {
            unreachable!("dispatched in main")
        }
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            tracing::error!("{error}");
            1
        }
    }
}
