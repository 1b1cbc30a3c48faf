//! Where a session is kept: opening the timeline and turns databases, starting or resuming the
//! session in them, and taking the session's lease.
//!
//! With `--session-id` and no database flag, both databases live in the user's data folder.
//! With only a turns database, a resumed session starts from its latest turn (it has no log to
//! replay) and its ordinals start again at 1, as the anchor does.

use anyhow::Context;
use std::path::PathBuf;

use reel_engine::{
    EventLog, Fanout, LogStore, Session, SessionState, TurnStore, check_session_id, new_id,
};
use reel_sinks::{TimelineDbSink, TurnsDbSink};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

use crate::run_args::RunCommandArgs;

/// A session opened in its databases.
pub struct Opened {
    pub session_id: String,
    pub timeline: Option<TimelineStore>,
    /// A second, reading connection to the timeline database: where the session finds the
    /// entities it let go, for whole snapshots.
    pub archive: Option<TimelineStore>,
    pub turns: Option<TimelineStore>,
    /// The stored session's state and log (empty for a new session).
    pub state: SessionState,
    pub log: EventLog,
    /// The ordinal the stored entities are as of.
    pub entities_ordinal: u64,
}

/// Opens the session the flags ask for; `None` when the run is not persisted.
pub async fn open(args: &RunCommandArgs) -> anyhow::Result<Option<Opened>> {
    let Some(Locations {
        timeline: timeline_at,
        turns: turns_at,
    }) = locations(args)?
    else {
        return Ok(None);
    };
    if args.timeline_db.is_none()
        && args.timeline_dsn.is_none()
        && args.turns_db.is_none()
        && args.turns_dsn.is_none()
    {
        let shown = |at: &Option<Location>| at.as_ref().map(Location::shown).unwrap_or_default();
        tracing::info!(
            "timeline database: {}; turns database: {}",
            shown(&timeline_at),
            shown(&turns_at)
        );
    }
    let session_id = args.session_id.clone().unwrap_or_else(new_id);
    check_session_id(&session_id)?;
    let timeline = match &timeline_at {
        Some(location) => Some(open_timeline(location, Access::ReadWrite).await?),
        None => None,
    };
    let turns = match (&turns_at, &timeline) {
        // The same SQLite file for both: a second connection beside the first, never a second
        // open (which looks at the file and, closing it, drops the first connection's locks).
        (Some(location), Some(store)) if same_sqlite_file(location, timeline_at.as_ref()) => {
            Some(store.sibling().await?)
        }
        (Some(location), _) => Some(open_timeline(location, Access::ReadWrite).await?),
        (None, _) => None,
    };
    let shown = timeline_at
        .as_ref()
        .or(turns_at.as_ref())
        .expect("one database at least")
        .shown();
    let stores = Stores {
        timeline,
        turns,
        shown,
    };
    let opened = open_in(stores, session_id, args.resume, args.steal_lease).await?;
    if args.resume {
        tracing::info!(
            "resuming session {} at ordinal {}",
            opened.session_id,
            opened.log.last_ordinal()
        );
    }
    Ok(Some(opened))
}

/// The databases a session is kept in, open.
pub struct Stores {
    pub timeline: Option<TimelineStore>,
    pub turns: Option<TimelineStore>,
    /// How the databases are named in messages.
    pub shown: String,
}

/// Starts (`resume` false) or resumes session `session_id` in `stores`, taking its lease
/// (from a live holder too with `steal`).
pub async fn open_in(
    stores: Stores,
    session_id: String,
    resume: bool,
    steal: bool,
) -> anyhow::Result<Opened> {
    let Stores {
        mut timeline,
        mut turns,
        shown,
    } = stores;
    let exists = match (&mut timeline, &mut turns) {
        (Some(store), _) => store.exists(&session_id).await,
        (None, Some(store)) => store
            .latest_turn(&session_id)
            .await
            .map(|turn| turn.is_some()),
        (None, None) => unreachable!("one database at least"),
    }?;
    match (resume, exists) {
        (true, false) => {
            return Err(anyhow::anyhow!(
                "there is no session {session_id:?} in {shown} to resume (leave out --resume to start it)"
            ));
        }
        (false, true) => {
            return Err(anyhow::anyhow!(
                "session {session_id:?} already exists in {shown}; add --resume to continue it"
            ));
        }
        _ => {}
    }

    let (state, log, entities_ordinal) = match (&mut timeline, &mut turns) {
        (Some(store), _) => {
            take_lease(store, &session_id, steal).await?;
            let stored = store.load(&session_id).await?;
            let entities_ordinal = stored.entities_ordinal;
            let (state, log) = stored
                .replay()
                .with_context(|| format!("session {session_id:?} in {shown}"))?;
            (state, log, entities_ordinal)
        }
        (None, Some(store)) => {
            let turn = store.latest_turn(&session_id).await?;
            let mut state = SessionState::default();
            let mut log = EventLog::new();
            if let Some(turn) = turn {
                state.context = reel_engine::ModelContextProjection::from_turn(
                    turn.context,
                    turn.model_calls,
                    turn.last_ordinal,
                );
                state.usage = reel_engine::UsageProjection::from_session_total(
                    turn.session_usage,
                    turn.model_calls,
                );
                // Ordinals go on from the turn's, so the next turn sorts after it.
                log = EventLog::after(turn.last_ordinal);
            }
            (state, log, 0)
        }
        (None, None) => unreachable!("one database at least"),
    };
    let archive = match &timeline {
        Some(store) => Some(store.reader().await?),
        None => None,
    };
    Ok(Opened {
        session_id,
        timeline,
        archive,
        turns,
        state,
        log,
        entities_ordinal,
    })
}

/// The session `opened` holds, its database sinks attached to `fanout` beside the outputs
/// there already, holding only the entities that can still change when a timeline database
/// keeps the rest.
pub fn session_of(opened: Opened, mut fanout: Fanout) -> Session {
    let ordinal = opened.log.last_ordinal();
    if let Some(store) = opened.timeline {
        fanout.attach(Box::new(TimelineDbSink::new(
            store,
            opened.session_id.clone(),
            opened.state.clone(),
            opened.entities_ordinal,
        )));
    }
    if let Some(store) = opened.turns {
        fanout.attach(Box::new(TurnsDbSink::new(
            store,
            opened.session_id.clone(),
            opened.state.context.clone(),
            ordinal,
        )));
    }
    let mut session = Session::resume(opened.session_id, fanout, opened.state, opened.log);
    if let Some(archive) = opened.archive {
        session.keep_entities_in(Box::new(archive));
    }
    session
}

/// Whether `location` and `other` are one SQLite file (by its resolved path: resolving looks
/// the file up without opening it).
pub fn same_sqlite_file(location: &Location, other: Option<&Location>) -> bool {
    let resolved = |at: &Location| match at {
        Location::Sqlite(path) => std::fs::canonicalize(path).ok(),
        Location::Postgres(_) => None,
    };
    match (resolved(location), other.and_then(resolved)) {
        (Some(one), Some(two)) => one == two,
        _ => false,
    }
}

/// Takes the session's lease; with `steal`, also from a process that seems alive, saying so.
async fn take_lease(
    store: &mut TimelineStore,
    session_id: &str,
    steal: bool,
) -> anyhow::Result<()> {
    if !steal {
        return Ok(store.lease(session_id).await?);
    }
    let overruled = store.steal_lease(session_id).await?;
    if let Some(holder) = overruled {
        tracing::warn!(
            "--steal-lease: took session {session_id} over from {holder}; if that process still runs, its next write fails and it stops"
        );
    }
    Ok(())
}

/// Where the timeline and the turns are kept (at least one).
pub struct Locations {
    pub timeline: Option<Location>,
    pub turns: Option<Location>,
}

/// The databases the flags name; `None` when nothing is persisted.
pub fn locations(args: &RunCommandArgs) -> anyhow::Result<Option<Locations>> {
    let chosen =
        |dsn: &Option<String>, path: &Option<PathBuf>| -> anyhow::Result<Option<Location>> {
            match (dsn, path) {
                (Some(dsn), _) => Ok(Some(Location::dsn(dsn)?)),
                (None, Some(path)) => Ok(Some(Location::path(path))),
                (None, None) => Ok(None),
            }
        };
    let timeline = chosen(&args.timeline_dsn, &args.timeline_db)?;
    let turns = chosen(&args.turns_dsn, &args.turns_db)?;
    Ok(match (timeline, turns, &args.session_id) {
        (None, None, None) => None,
        (None, None, Some(_)) => {
            let folder = data_folder()?;
            let (timeline, turns) = (folder.join("timeline.db"), folder.join("turns.db"));
            Some(Locations {
                timeline: Some(Location::path(timeline)),
                turns: Some(Location::path(turns)),
            })
        }
        (timeline, turns, _) => Some(Locations { timeline, turns }),
    })
}

/// `$XDG_DATA_HOME/reel`, or `~/.local/share/reel`.
pub fn data_folder() -> anyhow::Result<PathBuf> {
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(data) => PathBuf::from(data),
        None => {
            let home = std::env::var_os("HOME")
                .context("neither XDG_DATA_HOME nor HOME is set: pass --timeline-db")?;
            PathBuf::from(home).join(".local/share")
        }
    };
    Ok(data.join("reel"))
}
