//! Where a session is kept: opening the timeline database, starting or resuming the session in
//! it, and taking the session's lease.

use std::path::PathBuf;

use reel_engine::{EventLog, LogStore, SessionState, new_id};
use reel_storage::{TimelineStore, open_timeline};

use crate::cli::RunCommandArgs;

/// A session opened in a timeline database.
pub struct Opened {
    pub store: TimelineStore,
    pub session_id: String,
    /// The stored session's state and log (empty for a new session).
    pub state: SessionState,
    pub log: EventLog,
    /// The ordinal the stored entities are as of.
    pub entities_ordinal: u64,
}

/// Opens the session the flags ask for; `None` when the run is not persisted.
pub async fn open(args: &RunCommandArgs) -> Result<Option<Opened>, String> {
    let location = match (&args.timeline_dsn, &args.timeline_db, &args.session_id) {
        (Some(dsn), _, _) => dsn.clone(),
        (None, Some(path), _) => path.display().to_string(),
        (None, None, Some(_)) => {
            let path = default_timeline_db()?;
            tracing::info!("timeline database: {}", path.display());
            path.display().to_string()
        }
        (None, None, None) => return Ok(None),
    };
    let mut store = open_timeline(&location).await.map_err(|e| e.to_string())?;
    let shown = without_password(&location);
    let session_id = args.session_id.clone().unwrap_or_else(new_id);
    let exists = store.exists(&session_id).await.map_err(|e| e.to_string())?;
    match (args.resume, exists) {
        (true, false) => {
            return Err(format!(
                "there is no session {session_id:?} in {shown} to resume (leave out --resume to start it)"
            ));
        }
        (false, true) => {
            return Err(format!(
                "session {session_id:?} already exists in {shown}; add --resume to continue it"
            ));
        }
        _ => {}
    }
    store.lease(&session_id).await.map_err(|e| e.to_string())?;
    let stored = store.load(&session_id).await.map_err(|e| e.to_string())?;
    let entities_ordinal = stored.entities_ordinal;
    let (state, log) = stored
        .replay()
        .map_err(|e| format!("session {session_id:?} in {shown}: {e}"))?;
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

/// `location` as it may appear in messages: a DSN's password is left out.
fn without_password(location: &str) -> String {
    let Some((scheme, rest)) = location.split_once("://") else {
        return location.to_owned();
    };
    match rest.split_once('@') {
        Some((credentials, host)) => {
            let user = credentials
                .split_once(':')
                .map_or(credentials, |(user, _)| user);
            format!("{scheme}://{user}@{host}")
        }
        None => location.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            without_password("postgres://me:secret@db:5432/x"),
            "postgres://me@db:5432/x"
        );
        assert_eq!(without_password("postgres://me@db/x"), "postgres://me@db/x");
        assert_eq!(without_password("/tmp/t.db"), "/tmp/t.db");
    }
}
