//! A subscription read from a real SQLite store, its `recv` dropped at every await.

use futures::FutureExt;
use reel_engine::{Commit, EventLog, LogStore};
use reel_proto::chat::{ChatTextDelta, ChatTextSegmentStarted};
use reel_storage::{Access, Location, open_timeline};

use super::*;

/// Events stored: more than a page of the store (512), so a catch-up takes several reads.
const EVENTS: u64 = 1_300;

/// A store holding session `s`: a text segment and its deltas.
async fn stored_session(dir: &std::path::Path) -> Location {
    let at = Location::path(dir.join("t.db"));
    let mut store = open_timeline(&at, Access::ReadWrite).await.unwrap();
    store.lease("s").await.unwrap();
    let mut log = EventLog::new();
    let started = ChatTextSegmentStarted {
        message_id: "m".into(),
        role: "assistant".into(),
        ..Default::default()
    };
    let mut events = vec![log.append(started.into())];
    for n in 1..EVENTS {
        let delta = ChatTextDelta {
            message_id: "m".into(),
            text: format!("{n} "),
        };
        events.push(log.append(delta.into()));
    }
    let commit = Commit {
        events,
        ..Commit::default()
    };
    store.commit("s", &commit).await.unwrap();
    at
}

/// The frames of the session after `cursor`, through its last event.
async fn read(at: &Location, cursor: Option<Position>, interrupted: bool) -> Vec<String> {
    let catalog = open_timeline(at, Access::ReadOnly).await.unwrap();
    let mut subscription = follow_store(Box::new(catalog), "s", cursor).await.unwrap();
    let mut frames = Vec::new();
    while frames
        .last()
        .is_none_or(|(position, _)| *position != Some(Position::through(EVENTS)))
    {
        // Polled once and dropped: whatever it waited for is asked again by the next recv.
        let frame = match interrupted
            .then(|| subscription.recv().now_or_never())
            .flatten()
        {
            Some(frame) => frame,
            None => subscription.recv().await,
        };
        let frame = frame.expect("the stream goes on");
        frames.push((frame.position, frame.json.to_string()));
    }
    frames.into_iter().map(|(_, json)| json).collect()
}

#[tokio::test]
async fn a_recv_dropped_while_it_waits_for_the_store_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let at = stored_session(dir.path()).await;
    for cursor in [
        None,
        Some(Position::through(0)),
        Some(Position::through(700)),
    ] {
        let whole = read(&at, cursor, false).await;
        let interrupted = read(&at, cursor, true).await;
        assert_eq!(interrupted, whole, "from {cursor:?}");
    }
    let from_start = read(&at, Some(Position::through(0)), false).await;
    // Hello, then a frame of each event (the segment's start and each delta).
    assert_eq!(from_start.len() as u64, 1 + EVENTS);
    assert!(from_start[1].contains("\"m\""), "{}", from_start[1]);
    assert!(
        from_start
            .last()
            .unwrap()
            .contains(&format!("{} ", EVENTS - 1))
    );
}

#[tokio::test]
async fn a_cursor_past_the_end_gets_hello_a_terminal_error_and_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let at = stored_session(dir.path()).await;
    let catalog = open_timeline(&at, Access::ReadOnly).await.unwrap();
    let cursor = Some(Position::through(EVENTS + 1));
    let mut subscription = follow_store(Box::new(catalog), "s", cursor).await.unwrap();
    assert!(subscription.recv().await.unwrap().json.contains("hello"));
    let error = subscription.recv().await.unwrap();
    assert!(error.json.contains("cursor_out_of_range"), "{}", error.json);
    assert!(subscription.recv().await.is_none());
}
