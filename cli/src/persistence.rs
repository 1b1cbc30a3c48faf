//! Where a session is kept: opening the timeline and turns databases, starting or resuming the
//! session in them, and taking the session's lease.
//!
//! With `--session-id` and no database flag, both databases live in the user's data folder.
//! With only a turns database, a resumed session starts from its latest turn (it has no log to
//! replay) and its ordinals start again at 1, as the anchor does.

use std::path::PathBuf;

use reel_engine::{EventLog, LogStore, SessionState, TurnStore, new_id};
use reel_storage::{TimelineStore, open_timeline};

use crate::cli::RunCommandArgs;

/// A session opened in its databases.
pub struct Opened {
    pub session_id: String,
    pub timeline: Option<TimelineStore>,
    pub turns: Option<TimelineStore>,
    /// The stored session's state and log (empty for a new session).
    pub state: SessionState,
    pub log: EventLog,
    /// The ordinal the stored entities are as of.
    pub entities_ordinal: u64,
}

/// Opens the session the flags ask for; `None` when the run is not persisted.
pub async fn open(args: &RunCommandArgs) -> Result<Option<Opened>, String> {
    let Some(Locations {
        timeline: timeline_at,
        turns: turns_at,
    }) = locations(args)?
    else {
        return Ok(None);
    };
    let session_id = args.session_id.clone().unwrap_or_else(new_id);
    let mut timeline = match &timeline_at {
        Some(location) => Some(open_timeline(location).await.map_err(|e| e.to_string())?),
        None => None,
    };
    let mut turns = match &turns_at {
        Some(location) => Some(open_timeline(location).await.map_err(|e| e.to_string())?),
        None => None,
    };
    let shown = without_password(
        timeline_at
            .as_ref()
            .or(turns_at.as_ref())
            .expect("one database at least"),
    );

    let exists = match (&mut timeline, &mut turns) {
        (Some(store), _) => store.exists(&session_id).await,
        (None, Some(store)) => store
            .latest_turn(&session_id)
            .await
            .map(|turn| turn.is_some()),
        (None, None) => unreachable!("one database at least"),
    }
    .map_err(|e| e.to_string())?;
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

    let (state, log, entities_ordinal) = match (&mut timeline, &mut turns) {
        (Some(store), _) => {
            store.lease(&session_id).await.map_err(|e| e.to_string())?;
            let stored = store.load(&session_id).await.map_err(|e| e.to_string())?;
            let entities_ordinal = stored.entities_ordinal;
            let (state, log) = stored
                .replay()
                .map_err(|e| format!("session {session_id:?} in {shown}: {e}"))?;
            (state, log, entities_ordinal)
        }
        (None, Some(store)) => {
            let turn = store
                .latest_turn(&session_id)
                .await
                .map_err(|e| e.to_string())?;
            let mut state = SessionState::default();
            let mut log = EventLog::new();
            if let Some(turn) = turn {
                state.context =
                    reel_engine::ModelContextProjection::from_turn(turn.context, turn.model_calls);
                state.usage = reel_engine::UsageProjection::from_session_total(turn.session_usage);
                // Ordinals go on from the turn's, so the next turn sorts after it.
                log = EventLog::continuing(turn.last_ordinal, Vec::new())?;
            }
            (state, log, 0)
        }
        (None, None) => unreachable!("one database at least"),
    };
    if args.resume {
        tracing::info!(
            "resuming session {session_id} at ordinal {}",
            log.last_ordinal()
        );
    }
    Ok(Some(Opened {
        session_id,
        timeline,
        turns,
        state,
        log,
        entities_ordinal,
    }))
}

/// Where the timeline and the turns are kept (a path or a DSN each; at least one).
struct Locations {
    timeline: Option<String>,
    turns: Option<String>,
}

/// The databases the flags name; `None` when nothing is persisted.
fn locations(args: &RunCommandArgs) -> Result<Option<Locations>, String> {
    let timeline = args
        .timeline_dsn
        .clone()
        .or_else(|| args.timeline_db.as_ref().map(|p| p.display().to_string()));
    let turns = args
        .turns_dsn
        .clone()
        .or_else(|| args.turns_db.as_ref().map(|p| p.display().to_string()));
    Ok(match (timeline, turns, &args.session_id) {
        (None, None, None) => None,
        (None, None, Some(_)) => {
            let folder = data_folder()?;
            let (timeline, turns) = (folder.join("timeline.db"), folder.join("turns.db"));
            tracing::info!(
                "timeline database: {}; turns database: {}",
                timeline.display(),
                turns.display()
            );
            Some(Locations {
                timeline: Some(timeline.display().to_string()),
                turns: Some(turns.display().to_string()),
            })
        }
        (timeline, turns, _) => Some(Locations { timeline, turns }),
    })
}

/// `$XDG_DATA_HOME/reel`, or `~/.local/share/reel`.
pub fn data_folder() -> Result<PathBuf, String> {
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(data) => PathBuf::from(data),
        None => {
            let home = std::env::var_os("HOME")
                .ok_or("neither XDG_DATA_HOME nor HOME is set: pass --timeline-db")?;
            PathBuf::from(home).join(".local/share")
        }
    };
    Ok(data.join("reel"))
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
