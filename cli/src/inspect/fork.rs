//! `reel fork SESSION --at ORDINAL --new-session ID`: a new session whose history is the first
//! ORDINAL events of another. Resuming it continues from there; the parent is only read.
//!
//! The events are copied page by page (one transaction each), then the new session gets its
//! entities and a snapshot as of the fork point, so it resumes without replaying anything. A
//! fork taken in the middle of a run holds that run open: resuming it closes the run as
//! interrupted, as after a crash.

use anyhow::Context;
use std::sync::Arc;

use reel_engine::{Commit, LogStore, SessionState};
use reel_proto::Any;
use reel_storage::TimelineStore;

use reel_engine::LogPages;

use super::{Database, progress};

#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// The session to fork.
    pub session_id: String,
    /// The new session holds the events up to and including this ordinal.
    #[arg(long, value_name = "ORDINAL")]
    pub at: u64,
    /// The new session's id.
    #[arg(long, value_name = "ID")]
    pub new_session: String,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: ForkArgs) -> anyhow::Result<()> {
    // The writer first: it brings a database an older reel wrote up to date.
    let mut writer = args.database.open_for_writing().await?;
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(&args.session_id).await?;
    let mut reader = reader.store;
    if args.at > summary.events {
        return Err(anyhow::anyhow!(
            "session {:?} has {} events; it cannot be forked at {}",
            args.session_id,
            summary.events,
            args.at
        ));
    }
    check_fork_point(args.at)?;
    let new = args.new_session.as_str();
    reel_engine::check_session_id(new).context("--new-session")?;
    if writer.exists(new).await? {
        return Err(anyhow::anyhow!(
            "there is a session {new:?} already; pick another id"
        ));
    }
    copy_leased(&mut reader, &mut writer, &args.session_id, new, args.at).await?;
    tracing::info!(
        "forked session {} at ordinal {} as {new}",
        args.session_id,
        args.at
    );
    Ok(())
}

/// A fork holds at least one event: an empty one has nothing to resume from (nor, for a
/// session `reel serve` made, the command it runs).
pub fn check_fork_point(at: u64) -> anyhow::Result<()> {
    match at {
        0 => Err(anyhow::anyhow!(
            "a fork holds at least one event: fork at ordinal 1 or later"
        )),
        _ => Ok(()),
    }
}

/// Copies session `from`'s first `at` events into the new session `to` under `to`'s lease,
/// released whether or not the copy succeeds. `reel serve`'s forks are made here too.
pub async fn copy_leased(
    reader: &mut TimelineStore,
    writer: &mut TimelineStore,
    from: &str,
    to: &str,
    at: u64,
) -> anyhow::Result<()> {
    writer.lease(to).await?;
    let copied = copy(reader, writer, from, to, at).await;
    let released = writer.release(to).await;
    copied?;
    Ok(released?)
}

async fn copy(
    reader: &mut TimelineStore,
    writer: &mut TimelineStore,
    from: &str,
    to: &str,
    at: u64,
) -> anyhow::Result<()> {
    let bar = progress::events(at, "forking");
    let mut state = SessionState::default();
    let mut title = None;
    let mut pages = LogPages::new(from, 0, at);
    loop {
        let page = pages.next(reader).await?;
        if page.is_empty() {
            break;
        }
        let mut events = Vec::with_capacity(page.len());
        for entry in page {
            if let (None, Any::ChatUserMessageAccepted(m)) = (&title, &entry.event) {
                title = Some(reel_engine::session_title(&m.text));
            }
            state.apply(&entry);
            events.push(Arc::new(entry));
        }
        bar.inc(events.len() as u64);
        let commit = Commit {
            events,
            title: title.clone(),
            ..Commit::default()
        };
        writer.commit(to, &commit).await?;
    }
    bar.finish_and_clear();
    let snapshot = serde_json::to_string(&state)?;
    let commit = Commit {
        entities: state.timeline.snapshot().entities,
        entities_ordinal: Some(at),
        snapshot: Some((at, snapshot)),
        title,
        ..Commit::default()
    };
    Ok(writer.commit(to, &commit).await?)
}
