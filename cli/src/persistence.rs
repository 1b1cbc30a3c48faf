//! Where a session is kept: opening the timeline database, starting or resuming the session in
//! it, and taking the session's lease.

use std::path::PathBuf;

use reel_engine::{EventLog, LogStore, SessionState, new_id};
use reel_storage::SqliteStore;

use crate::cli::RunCommandArgs;

/// A session opened in a timeline database.
pub struct Opened {
    pub store: SqliteStore,
    pub session_id: String,
    /// The stored session's state and log (empty for a new session).
    pub state: SessionState,
    pub log: EventLog,
    /// The ordinal the stored entities are as of.
    pub entities_ordinal: u64,
}

/// Opens the session the flags ask for; `None` when the run is not persisted.
pub async fn open(args: &RunCommandArgs) -> Result<Option<Opened>, String> {
    let path = match (&args.timeline_db, &args.session_id) {
        (Some(path), _) => path.clone(),
        (None, Some(_)) => {
            let path = default_timeline_db()?;
            tracing::info!("timeline database: {}", path.display());
            path
        }
        (None, None) => return Ok(None),
    };
    let mut store = SqliteStore::open(&path).await.map_err(|e| e.to_string())?;
    let session_id = args.session_id.clone().unwrap_or_else(new_id);
    let exists = store.exists(&session_id).await.map_err(|e| e.to_string())?;
    match (args.resume, exists) {
        (true, false) => {
            return Err(format!(
                "there is no session {session_id:?} in {} to resume (leave out --resume to start it)",
                path.display()
            ));
        }
        (false, true) => {
            return Err(format!(
                "session {session_id:?} already exists in {}; add --resume to continue it",
                path.display()
            ));
        }
        _ => {}
    }
    store.lease(&session_id).await.map_err(|e| e.to_string())?;
    let stored = store.load(&session_id).await.map_err(|e| e.to_string())?;
    let entities_ordinal = stored.entities_ordinal;
    let (state, log) = stored
        .replay()
        .map_err(|e| format!("session {session_id:?} in {}: {e}", path.display()))?;
    if args.resume {
        tracing::info!(
            "resuming session {session_id} at ordinal {}",
            log.last_ordinal()
        );
    }
    Ok(Some(Opened {
        store,
        session_id,
        state,
        log,
        entities_ordinal,
    }))
}

/// `$XDG_DATA_HOME/reel/timeline.db`, or `~/.local/share/reel/timeline.db`.
fn default_timeline_db() -> Result<PathBuf, String> {
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(data) => PathBuf::from(data),
        None => {
            let home = std::env::var_os("HOME")
                .ok_or("neither XDG_DATA_HOME nor HOME is set: pass --timeline-db")?;
            PathBuf::from(home).join(".local/share")
        }
    };
    Ok(data.join("reel").join("timeline.db"))
}
