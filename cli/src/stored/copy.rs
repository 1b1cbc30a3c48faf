//! Copying the first events of a stored session into a new one: `reel fork`'s and `reel
//! serve`'s forks.
//!
//! The events are copied page by page (one transaction each), then the new session gets its
//! entities and a snapshot as of the fork point, so it resumes without replaying anything.

use std::sync::Arc;

use reel_engine::{Commit, LogPages, LogStore, SessionState};
use reel_proto::Any;
use reel_storage::TimelineStore;

use super::progress;

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
