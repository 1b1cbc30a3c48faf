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

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    sync::Arc,
};

use reel_engine::{Fanout, LogStore, Session};
use reel_proto::{
    Any,
    rpc::{RpcLine, rpc_line::Frame},
};
use reel_sinks::{TimelineDbSink, TurnsDbSink};
use reel_storage::open_timeline;

use super::progress;

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

/// What a capture holds, found by the first pass.
struct Capture {
    session_id: String,
    first: u64,
    events: u64,
    /// Lines to read: a torn last line is not among them.
    lines: usize,
}

pub async fn run(args: ReplayArgs) -> Result<(), String> {
    let capture = scan(&args.capture)?;
    let timeline_at = args
        .timeline_dsn
        .clone()
        .or_else(|| args.timeline_db.as_ref().map(|p| p.display().to_string()))
        .expect("clap requires a timeline database");
    let mut timeline = open_timeline(&timeline_at)
        .await
        .map_err(|e| e.to_string())?;
    let id = capture.session_id.clone();
    timeline.lease(&id).await.map_err(|e| e.to_string())?;
    let stored = timeline.load(&id).await.map_err(|e| e.to_string())?;
    let entities_ordinal = stored.entities_ordinal;
    let (state, log) = stored.replay()?;
    if capture.first != log.last_ordinal() + 1 {
        let _ = timeline.release(&id).await;
        return Err(match log.last_ordinal() {
            0 => format!(
                "the capture starts at ordinal {}: it continues a session this database does not hold",
                capture.first
            ),
            last => format!(
                "session {id:?} is in the database up to ordinal {last}; the capture starts at {}",
                capture.first
            ),
        });
    }
    let mut fanout = Fanout::new();
    let (sink, committed) =
        TimelineDbSink::new(timeline, id.clone(), state.clone(), entities_ordinal);
    fanout.attach_durable(Box::new(sink), committed);
    let turns_at = args
        .turns_dsn
        .clone()
        .or_else(|| args.turns_db.as_ref().map(|p| p.display().to_string()));
    if let Some(location) = turns_at {
        let turns = open_timeline(&location).await.map_err(|e| e.to_string())?;
        let (sink, committed) =
            TurnsDbSink::new(turns, id.clone(), state.context.clone(), log.last_ordinal());
        fanout.attach_durable(Box::new(sink), committed);
    }
    let mut session = Session::resume(id.clone(), fanout, state, log);
    let appended = append(&mut session, &args.capture, &capture).await;
    let failures = session.close().await;
    appended?;
    if let Some(failure) = failures.first() {
        return Err(format!(
            "writing {} failed: {}",
            failure.sink, failure.message
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

/// The log events of one line, if it is a backend event frame.
fn backend_event(line: &RpcLine) -> Option<(u64, &Any)> {
    match &line.frame {
        Some(Frame::BackendEvent(event)) => Some((event.ordinal, event.payload.as_ref()?)),
        _ => None,
    }
}

/// First pass: checks the capture and finds its session, ordinals and usable lines.
fn scan(path: &Path) -> Result<Capture, String> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the capture {}: {e}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = progress::bytes(size, "checking");
    let mut reader = BufReader::new(file);
    let mut raw = Vec::new();
    let mut found: Option<Capture> = None;
    let mut number = 0;
    loop {
        raw.clear();
        let read = reader
            .read_until(b'\n', &mut raw)
            .map_err(|e| format!("cannot read the capture: {e}"))?;
        if read == 0 {
            break;
        }
        number += 1;
        bar.inc(read as u64);
        let complete = raw.ends_with(b"\n");
        let text = std::str::from_utf8(&raw).ok().map(str::trim);
        if text.is_some_and(str::is_empty) {
            continue;
        }
        let parsed = text.and_then(|t| serde_json::from_str::<RpcLine>(t).ok());
        let Some(line) = parsed else {
            if !complete {
                tracing::warn!(
                    "the capture's last line is cut short ({} bytes): left out",
                    raw.len()
                );
                break;
            }
            return Err(format!(
                "line {number} of the capture is not a frame; only the last line of a capture may be incomplete"
            ));
        };
        let Some((ordinal, _)) = backend_event(&line) else {
            continue;
        };
        match &mut found {
            None => {
                found = Some(Capture {
                    session_id: line.session_id.clone(),
                    first: ordinal,
                    events: 1,
                    lines: number,
                })
            }
            Some(capture) => {
                if line.session_id != capture.session_id {
                    return Err(format!(
                        "line {number} belongs to session {:?}, not {:?}: one session per capture",
                        line.session_id, capture.session_id
                    ));
                }
                let expected = capture.first + capture.events;
                if ordinal != expected {
                    return Err(format!(
                        "line {number}: ordinal {ordinal} where {expected} was due (the capture has a gap)"
                    ));
                }
                capture.events += 1;
                capture.lines = number;
            }
        }
    }
    bar.finish_and_clear();
    found.ok_or_else(|| {
        "the capture holds no backendEvent frames: capture with --debug-events-jsonl, or with --rpc --include-backend-events".to_owned()
    })
}

/// Second pass: appends the capture's events to the session.
async fn append(session: &mut Session, path: &Path, capture: &Capture) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the capture: {e}"))?;
    let bar = progress::events(capture.events, "replaying");
    let reader = BufReader::new(file);
    let rid: Arc<str> = Arc::from("");
    for (at, line) in reader.split(b'\n').enumerate().take(capture.lines) {
        let raw = line.map_err(|e| format!("cannot read the capture: {e}"))?;
        let Ok(text) = std::str::from_utf8(&raw) else {
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let frame: RpcLine =
            serde_json::from_str(text.trim()).map_err(|e| format!("line {}: {e}", at + 1))?;
        if let Some((ordinal, event)) = backend_event(&frame) {
            let appended = session.append(&rid, event.clone()).await;
            debug_assert_eq!(appended, ordinal);
            bar.inc(1);
        }
        if session.storage_failed() {
            return Err("the database failed; see above".into());
        }
    }
    session.flush().await;
    bar.finish_and_clear();
    Ok(())
}
