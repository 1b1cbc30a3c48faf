//! The durable benchmark: a scripted reply through the session into the SQLite timeline
//! database, with the run's done waiting for the commit, as `run-command --session-id` does.
//!
//! * committed events per second;
//! * database bytes per delta, for a reply and one ten times longer: the ratio must stay near 1
//!   (events are compact deltas; no row re-stores accumulated text), or the command fails;
//! * resume time (open, load the newest snapshot and the events after it, replay) for a log and
//!   one ten times longer.

use std::{path::Path, sync::Arc, time::Instant};

use reel_engine::{
    Fanout, LogStore, ModelSettings, RunRequest, Script, ScriptedProvider, Session, SessionState,
    Step, done_status, scripted::Repeat,
};
use reel_sinks::TimelineDbSink;
use reel_storage::SqliteStore;
use tokio_util::sync::CancellationToken;

const SESSION: &str = "bench";

pub async fn run(deltas: usize, resume_events: usize) -> Result<bool, String> {
    println!(
        "reel bench: a scripted reply into the SQLite timeline database (done waits for the commit)"
    );
    println!(
        "{:>10} {:>10} {:>16} {:>14}",
        "deltas", "seconds", "events/s stored", "DB bytes/delta"
    );
    let mut per_delta = Vec::new();
    for deltas in [deltas / 10, deltas] {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("timeline.db");
        let (events, seconds) = store_reply(&path, deltas as u64).await?;
        let bytes = database_bytes(&path);
        let bytes_per_delta = bytes as f64 / deltas as f64;
        println!(
            "{deltas:>10} {seconds:>10.3} {:>16.0} {bytes_per_delta:>14.1}",
            events as f64 / seconds
        );
        per_delta.push(bytes_per_delta);
    }
    let ratio = per_delta[1] / per_delta[0];
    println!("database bytes per delta, long / short reply: {ratio:.3} (must stay below 1.10)");

    println!("resume: open the database, load the newest snapshot and the events after it, replay");
    println!(
        "{:>10} {:>16} {:>16} {:>10}",
        "events", "snapshot at", "events replayed", "seconds"
    );
    for events in [resume_events / 10, resume_events] {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("timeline.db");
        store_reply(&path, events as u64).await?;
        let started = Instant::now();
        let mut store = SqliteStore::open(&path).await.map_err(|e| e.to_string())?;
        let stored = store.load(SESSION).await.map_err(|e| e.to_string())?;
        let (snapshot_at, replayed) = (stored.state.ordinal(), stored.events.len());
        let (state, log) = stored.replay()?;
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(state.ordinal(), log.last_ordinal());
        println!(
            "{:>10} {snapshot_at:>16} {replayed:>16} {seconds:>10.3}",
            log.last_ordinal()
        );
    }
    Ok(ratio < 1.10)
}

/// Streams a reply of `deltas` text deltas into a new timeline database; returns the events
/// stored and the seconds from the prompt to the commit of its last event.
async fn store_reply(path: &Path, deltas: u64) -> Result<(u64, f64), String> {
    let mut store = SqliteStore::open(path).await.map_err(|e| e.to_string())?;
    store.lease(SESSION).await.map_err(|e| e.to_string())?;
    let (sink, committed) = TimelineDbSink::new(store, SESSION, SessionState::default(), 0);
    let mut fanout = Fanout::new();
    fanout.attach_durable(Box::new(sink), committed);
    let mut session = Session::new(SESSION, fanout);
    let repeat = Repeat {
        times: deltas,
        steps: vec![Step::Text("tok ".into())],
    };
    let provider = ScriptedProvider::new(Script {
        turns: vec![vec![Step::Repeat(repeat)]],
    });
    let rid: Arc<str> = Arc::from("");
    let started = Instant::now();
    let request = RunRequest {
        request_id: Arc::clone(&rid),
        prompt: "bench".into(),
        system_prompt: None,
        settings: ModelSettings::default(),
        provider: &provider,
    };
    session.run(request, &CancellationToken::new()).await;
    session.emit_done(&rid, done_status::OK).await;
    let seconds = started.elapsed().as_secs_f64();
    let events = session.log().last_ordinal();
    let failed = session.storage_failed();
    let failures = session.close().await;
    if failed || !failures.is_empty() {
        return Err(format!("storing the reply failed: {failures:?}"));
    }
    Ok((events, seconds))
}

/// The database file and its WAL, in bytes.
fn database_bytes(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    size(path) + size(&path.with_extension("db-wal"))
}
