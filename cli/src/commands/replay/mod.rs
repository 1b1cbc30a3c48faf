//! `reel replay CAPTURE.jsonl --timeline-db ... [--turns-db ...]`: rebuilds a session's
//! databases from a capture of its frames: a `--debug-events-jsonl` file (which always holds
//! the log's events) or the stdout of a `--rpc --include-backend-events` run.
//!
//! The capture's `backendEvent` frames are the log. They go through a [`Session`] with the
//! same durable sinks a live run has, so the databases end up as the live run would have left
//! them. The capture is checked whole before anything is written: ordinals must run without a
//! gap, and only the very last line may be cut short (a capture of a process that was killed
//! ends mid-line; that line is left out, with a warning). A capture that continues a session
//! already in the database (its first ordinal follows the stored last one) is appended to it.

mod capture;

use anyhow::Context;
use std::{path::PathBuf, sync::Arc};

use reel_engine::{Fanout, LogStore, Session};
use reel_sinks::{TimelineDbSink, TurnsDbSink};
use reel_storage::{Access, Location, open_timeline};

use crate::stored::progress;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The capture: a debug file, or a stdout capture made with --include-backend-events.
    pub capture: PathBuf,
    /// The timeline database (SQLite file) to write.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "timeline_dsn",
        required_unless_present = "timeline_dsn"
    )]
    pub timeline_db: Option<PathBuf>,
    /// The timeline database as a DSN: sqlite://PATH or postgres://...
    #[arg(long, value_name = "URL")]
    pub timeline_dsn: Option<String>,
    /// Also write the turns database (SQLite file).
    #[arg(long, value_name = "PATH", conflicts_with = "turns_dsn")]
    pub turns_db: Option<PathBuf>,
    /// The turns database as a DSN.
    #[arg(long, value_name = "URL")]
    pub turns_dsn: Option<String>,
}

/// The database a pair of flags names.
fn location(dsn: &Option<String>, path: &Option<PathBuf>) -> anyhow::Result<Option<Location>> {
    match (dsn, path) {
        (Some(dsn), _) => Ok(Some(Location::dsn(dsn)?)),
        (None, Some(path)) => Ok(Some(Location::path(path))),
        (None, None) => Ok(None),
    }
}

pub async fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let capture = capture::scan(&args.capture)?;
    let timeline_at = location(&args.timeline_dsn, &args.timeline_db)?
        .expect("clap requires a timeline database");
    let turns_at = location(&args.turns_dsn, &args.turns_db)?;
    let new_file = timeline_at.sqlite_path().is_some_and(|path| !path.exists());
    if new_file && capture.first != 1 {
        return Err(anyhow::anyhow!(
            "the capture starts at ordinal {}: it continues a session, and there is no database at {timeline_at}",
            capture.first
        ));
    }
    let mut timeline = open_timeline(&timeline_at, Access::ReadWrite).await?;
    let id = capture.session_id.clone();
    reel_engine::check_session_id(&id).context("the capture's session")?;
    // A capture that does not start a session must continue a stored one: say so before
    // taking anything, so a refused replay leaves the database as it was.
    let exists = timeline.exists(&id).await?;
    if !exists && capture.first != 1 {
        return Err(anyhow::anyhow!(
            "the capture starts at ordinal {}: it continues a session {timeline_at} does not hold",
            capture.first
        ));
    }
    timeline.lease(&id).await?;
    let stored = match timeline.load(&id).await {
        Ok(stored) => stored,
        Err(error) => {
            let _ = timeline.release(&id).await;
            return Err(error.into());
        }
    };
    let entities_ordinal = stored.entities_ordinal;
    let (state, log) = stored.replay()?;
    if capture.first != log.last_ordinal() + 1 {
        let _ = timeline.release(&id).await;
        return Err(anyhow::anyhow!(
            "session {id:?} is in {timeline_at} up to ordinal {}; the capture starts at {}",
            log.last_ordinal(),
            capture.first
        ));
    }
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(TimelineDbSink::new(
        timeline,
        id.clone(),
        state.clone(),
        entities_ordinal,
    )));
    if let Some(location) = turns_at {
        let turns = open_timeline(&location, Access::ReadWrite).await?;
        fanout.attach(Box::new(TurnsDbSink::new(
            turns,
            id.clone(),
            state.context.clone(),
            log.last_ordinal(),
        )));
    }
    let mut session = Session::resume(id.clone(), fanout, state, log);
    let appended = append(&mut session, &args.capture, &capture).await;
    let failures = session.close().await;
    appended?;
    if let Some(failure) = failures.first() {
        return Err(anyhow::anyhow!(
            "writing {} failed: {}",
            failure.sink,
            failure.message
        ));
    }
    tracing::info!(
        "replayed {} events of session {id} (ordinals {} to {})",
        capture.events,
        capture.first,
        capture.first + capture.events - 1
    );
    Ok(())
}

/// Second pass: appends the capture's events to the session.
async fn append(
    session: &mut Session,
    path: &std::path::Path,
    capture: &capture::Capture,
) -> anyhow::Result<()> {
    let bar = progress::events(capture.events, "replaying");
    let rid: Arc<str> = Arc::from("");
    capture::each_event(path, capture, async |ordinal, event| {
        let appended = session.append(&rid, event).await;
        debug_assert_eq!(appended, ordinal);
        bar.inc(1);
        if session.storage_failed() {
            return Err(anyhow::anyhow!("the database failed; see above"));
        }
        Ok(())
    })
    .await?;
    session.flush().await;
    bar.finish_and_clear();
    Ok(())
}
