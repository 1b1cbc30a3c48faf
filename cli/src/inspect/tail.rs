//! `reel tail SESSION`: follows a session another process is writing, printing its frames as
//! they are committed: hello, a snapshot of the session so far, then the ui events of every
//! newly committed event, and done when the writer has gone (its lease released or its process
//! dead) and everything it committed has been printed. On a session nobody writes, tail prints
//! the snapshot and ends.
//!
//! SQLite is polled (a cheap indexed query); PostgreSQL wakes tail with LISTEN/NOTIFY, every
//! commit notifying the `reel_events` channel, and is polled once a second besides, to notice a
//! writer that died.

use std::time::Duration;

use reel_engine::{Projection, SessionCatalog, TimelineProjection};
use reel_storage::{NOTIFY_CHANNEL, TimelineStore};
use sqlx::postgres::PgListener;

use super::{Database, LogPages, PAGE, frames::FrameWriter};

#[derive(clap::Args, Debug)]
pub struct TailArgs {
    /// The session to follow.
    pub session_id: String,
    /// How often to look for new events in a SQLite database, in ms.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub poll_ms: u64,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: TailArgs) -> Result<(), String> {
    let mut reader = args.database.open().await?;
    let id = args.session_id.as_str();
    let summary = reader.find_session(id).await?;
    let location = reader.location.clone();
    let mut store = reader.store;
    let mut timeline = timeline_at(&mut store, id, summary.events).await?;
    let mut listener = match &store {
        TimelineStore::Postgres(_) => match &location {
            reel_storage::Location::Postgres(dsn) => Some(listen(dsn).await?),
            reel_storage::Location::Sqlite(_) => None,
        },
        TimelineStore::Sqlite(_) => None,
    };
    let failed = |e: std::io::Error| format!("cannot write: {e}");
    let mut frames = FrameWriter::new(std::io::stdout().lock(), id);
    frames.hello().map_err(failed)?;
    frames.snapshot(timeline.snapshot()).map_err(failed)?;
    frames.flush().map_err(failed)?;
    let mut after = summary.events;
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let page = store
            .events_page(id, after, PAGE)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(last) = page.last() {
            after = last.ordinal;
            for entry in &page {
                for event in timeline.apply(entry) {
                    frames.ui_event(event).map_err(failed)?;
                }
            }
            frames.flush().map_err(failed)?;
            continue;
        }
        if store.writer(id).await.map_err(|e| e.to_string())?.is_none() {
            // The writer may have committed its last events just before it let go.
            let rest = store
                .events_page(id, after, 1)
                .await
                .map_err(|e| e.to_string())?;
            if rest.is_empty() {
                break;
            }
            continue;
        }
        let wait = async {
            match &mut listener {
                Some(listener) => {
                    let _ = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await;
                }
                None => tokio::time::sleep(Duration::from_millis(args.poll_ms)).await,
            }
        };
        tokio::select! {
            _ = &mut interrupted => {
                frames.done("stopped").map_err(failed)?;
                return frames.flush().map_err(failed);
            }
            () = wait => {}
        }
    }
    frames.snapshot(timeline.snapshot()).map_err(failed)?;
    frames.done("ok").map_err(failed)?;
    frames.flush().map_err(failed)
}

/// The timeline up to `at`: from the newest snapshot at or before it, then its later events.
async fn timeline_at(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
) -> Result<TimelineProjection, String> {
    let state = store
        .snapshot_at_most(id, at)
        .await
        .map_err(|e| e.to_string())?;
    let mut timeline = state.timeline;
    let from = timeline.last_ordinal();
    LogPages::new(store, id, from, at)
        .each("reading", |entry| {
            timeline.apply(entry);
            Ok(())
        })
        .await?;
    Ok(timeline)
}

async fn listen(dsn: &str) -> Result<PgListener, String> {
    let mut listener = PgListener::connect(dsn)
        .await
        .map_err(|e| format!("cannot listen for commits: {e}"))?;
    listener
        .listen(NOTIFY_CHANNEL)
        .await
        .map_err(|e| format!("cannot listen for commits: {e}"))?;
    Ok(listener)
}
