//! The shared SQL store, the same steps on both backends: commits that continue the log and
//! one that does not, pages of events, summaries, snapshots kept to the newest two, entities,
//! the writer a second connection sees, release and removal.

use std::sync::Arc;

use reel_engine::{Commit, LogEntry, LogStore, SessionCatalog, StoreError};
use reel_proto::{
    Any,
    chat::{
        ChatRunFinished, ChatRunStarted, ChatToolApprovalDecided, ChatToolApprovalRequested,
        ChatUserMessageAccepted, ToolCallEntity,
    },
    rpc::SnapshotEntity,
};

use crate::{Access, Location, open_timeline};

fn entry(ordinal: u64, event: impl Into<Any>) -> Arc<LogEntry> {
    Arc::new(LogEntry {
        ordinal,
        recorded_at_ms: 1_700_000_000_000 + ordinal,
        event: event.into(),
    })
}

/// A prompt at `ordinal` (the search tests' too).
pub(crate) fn prompt(ordinal: u64) -> Arc<LogEntry> {
    let text = format!("prompt {ordinal}");
    entry(
        ordinal,
        ChatUserMessageAccepted {
            text,
            ..Default::default()
        },
    )
}

/// The steps, on the store at `location`. `seen_writing` is whether another connection of this
/// same process sees it as the session's writer: PostgreSQL's lock belongs to a connection,
/// SQLite's lease to a process (which never waits for itself).
async fn the_shared_sql_works(location: Location, seen_writing: bool) {
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    assert!(!store.exists("s").await.unwrap());
    store.lease("s").await.unwrap();
    let first = Commit {
        events: vec![
            prompt(1),
            entry(2, ChatRunStarted::default()),
            entry(
                3,
                ChatRunFinished {
                    status: "finished".into(),
                    ..Default::default()
                },
            ),
        ],
        title: Some("prompt 1".into()),
        ..Commit::default()
    };
    store.commit("s", &first).await.unwrap();
    let summary = store
        .summary("s")
        .await
        .unwrap()
        .expect("the session's row");
    assert_eq!((summary.events, summary.runs), (3, 1));
    assert_eq!(
        (summary.title.as_str(), summary.last_run_status.as_str()),
        ("prompt 1", "finished")
    );

    // A commit that does not continue the log is refused, and changes nothing.
    let gap = Commit {
        events: vec![prompt(5)],
        ..Commit::default()
    };
    let refused = store.commit("s", &gap).await.unwrap_err();
    assert!(matches!(refused, StoreError::Damaged(_)), "{refused}");
    assert_eq!(store.summary("s").await.unwrap().unwrap().events, 3);
    // So is one that repeats stored events (its rows would collide), with the same words.
    let again = store.commit("s", &first).await.unwrap_err();
    assert!(
        matches!(&again, StoreError::Damaged(m) if m.contains("another writer")),
        "{again}"
    );

    // Three snapshots with entities: the newest two are kept.
    let entity = SnapshotEntity {
        id: "m1".into(),
        kind: "ChatMessageEntity".into(),
        created_ordinal: 1,
        last_event_ordinal: 4,
        ..Default::default()
    };
    for ordinal in 4..=6 {
        let commit = Commit {
            events: vec![prompt(ordinal)],
            entities: vec![entity.clone()],
            entities_ordinal: Some(ordinal),
            snapshot: Some((ordinal, "{}".into())),
            ..Commit::default()
        };
        store.commit("s", &commit).await.unwrap();
    }
    assert_eq!(
        store.snapshot_at_most("s", 4).await.unwrap().ordinal(),
        0,
        "pruned"
    );
    let page = store.events_page("s", 1, 2).await.unwrap();
    let ordinals: Vec<u64> = page.iter().map(|e| e.ordinal).collect();
    assert_eq!(ordinals, [2, 3]);
    assert_eq!(page[0].recorded_at_ms, 1_700_000_000_002);
    assert_eq!(store.events("s", 4).await.unwrap().len(), 2);
    let (ordinal, entities) = store.entities("s").await.unwrap();
    assert_eq!((ordinal, entities.len()), (6, 1));
    assert_eq!(store.sessions().await.unwrap().len(), 1);

    // A commit of many multi-row statements goes in whole.
    let large = Commit {
        events: (7..7 + 7_000).map(prompt).collect(),
        ..Commit::default()
    };
    store.commit("s", &large).await.unwrap();
    assert_eq!(store.summary("s").await.unwrap().unwrap().events, 7_006);
    assert_eq!(store.events("s", 7_000).await.unwrap().len(), 6);

    // Another connection sees the writer (see above), until it lets go.
    let mut reader = open_timeline(&location, Access::ReadOnly).await.unwrap();
    assert_eq!(reader.writer("s").await.unwrap().is_some(), seen_writing);
    store.release("s").await.unwrap();
    assert_eq!(reader.writer("s").await.unwrap(), None);
    store.lease("s").await.unwrap();
    store.remove("s").await.unwrap();
    store.release("s").await.unwrap();
    assert!(!reader.exists("s").await.unwrap());
    assert_eq!(reader.summary("s").await.unwrap(), None);
}

#[tokio::test]
async fn on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    the_shared_sql_works(Location::path(dir.path().join("t.db")), false).await;
}

#[tokio::test]
async fn on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    the_shared_sql_works(Location::dsn(&schema.dsn).unwrap(), true).await;
}

/// Stores sharing one connection ([`crate::TimelineStore::shared`]), as `reel serve`'s
/// sessions do, write at once: every transaction is whole (a refused commit of one session
/// rolls back nothing of another's), and every log is gap-free.
async fn shared_stores_take_turns(location: Location) {
    let base = open_timeline(&location, Access::ReadWrite).await.unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for session in 0..8 {
        let mut store = base.shared();
        writers.spawn(async move {
            let id = format!("c{session}");
            store.lease(&id).await.unwrap();
            for turn in 0..25 {
                let first = turn * 2 + 1;
                let commit = Commit {
                    events: vec![prompt(first), prompt(first + 1)],
                    ..Commit::default()
                };
                store.commit(&id, &commit).await.unwrap();
                if turn % 5 == 0 {
                    let gap = Commit {
                        events: vec![prompt(first + 5)],
                        ..Commit::default()
                    };
                    assert!(store.commit(&id, &gap).await.is_err());
                }
                tokio::task::yield_now().await;
            }
            store.release(&id).await.unwrap();
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let mut reader = base.reader().await.unwrap();
    for session in 0..8 {
        let events = reader.events(&format!("c{session}"), 0).await.unwrap();
        let ordinals: Vec<u64> = events.iter().map(|e| e.ordinal).collect();
        assert_eq!(ordinals, (1..=50).collect::<Vec<_>>(), "session c{session}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_stores_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    shared_stores_take_turns(Location::path(dir.path().join("t.db"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_stores_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    shared_stores_take_turns(Location::dsn(&schema.dsn).unwrap()).await;
}

/// A commit of a person's decision on call `call`, at `ordinal`.
fn decided(ordinal: u64, call: &str) -> Commit {
    let decision = ChatToolApprovalDecided {
        tool_call_id: call.into(),
        decision: "allow_once".into(),
        ..Default::default()
    };
    Commit {
        events: vec![entry(ordinal, decision)],
        ..Commit::default()
    }
}

/// A commit of a run's end, at `ordinal`.
fn run_ended(ordinal: u64) -> Commit {
    Commit {
        events: vec![entry(ordinal, ChatRunFinished::default())],
        ..Commit::default()
    }
}

/// The inbox: sessions whose run waits for a person, counted by every commit (+1 a question,
/// -1 a decision, 0 again at a run's end), read a page at a time with the calls that wait.
async fn the_inbox_pages_through_waiting_sessions(location: Location) {
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    let asked = |ordinal: u64, call: &str| {
        entry(
            ordinal,
            ChatToolApprovalRequested {
                tool_call_id: call.into(),
                ..Default::default()
            },
        )
    };
    let waiting_call = |call: &str| SnapshotEntity {
        id: format!("m-{call}"),
        kind: "ChatToolCall".into(),
        created_ordinal: 2,
        last_event_ordinal: 3,
        payload: Some(Any::ToolCallEntity(Box::new(ToolCallEntity {
            tool_call_id: call.into(),
            tool_name: "send".into(),
            status: "awaiting_approval".into(),
            approval_requested_at_ms: 1_700_000_000_003,
            ..Default::default()
        }))),
        ..Default::default()
    };
    for id in ["a", "b", "c", "quiet"] {
        store.lease(id).await.unwrap();
        let mut events = vec![prompt(1), entry(2, ChatRunStarted::default())];
        let mut entities = Vec::new();
        if id != "quiet" {
            events.push(asked(3, &format!("{id}1")));
            entities.push(waiting_call(&format!("{id}1")));
        }
        let commit = Commit {
            events,
            entities,
            entities_ordinal: Some(3),
            ..Commit::default()
        };
        store.commit(id, &commit).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Newest first, two at a time.
    let first = store.waiting("", 2).await.unwrap();
    let ids: Vec<&str> = first
        .iter()
        .map(|w| w.summary.session_id.as_str())
        .collect();
    assert_eq!(ids, ["c", "b"]);
    assert_eq!(first[0].pending[0].call_id, "c1");
    assert_eq!(first[0].pending[0].asked_at_ms, 1_700_000_000_003);
    let rest = store.waiting("b", 2).await.unwrap();
    let ids: Vec<&str> = rest.iter().map(|w| w.summary.session_id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    // A decision leaves the inbox; so does a run's end.
    store.commit("c", &decided(4, "c1")).await.unwrap();
    store.commit("b", &run_ended(4)).await.unwrap();
    let left = store.waiting("", 10).await.unwrap();
    let ids: Vec<&str> = left.iter().map(|w| w.summary.session_id.as_str()).collect();
    assert_eq!(ids, ["a"]);
}

#[tokio::test]
async fn the_inbox_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    the_inbox_pages_through_waiting_sessions(Location::path(dir.path().join("t.db"))).await;
}

#[tokio::test]
async fn the_inbox_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    the_inbox_pages_through_waiting_sessions(Location::dsn(&schema.dsn).unwrap()).await;
}

/// The deadlines of calls waiting for a person, kept by every commit: a question with a
/// timeout writes one, a decision or the run's end removes it, and `approvals_due` names the
/// sessions with one passed, the earliest first.
async fn deadlines_follow_the_questions(location: Location) {
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    let asked = |ordinal: u64, call: &str, until_ms: u64| {
        entry(
            ordinal,
            ChatToolApprovalRequested {
                tool_call_id: call.into(),
                expires_at_ms: until_ms,
                ..Default::default()
            },
        )
    };
    let started = |mut questions: Vec<Arc<LogEntry>>| {
        let mut events = vec![prompt(1), entry(2, ChatRunStarted::default())];
        events.append(&mut questions);
        Commit {
            events,
            ..Commit::default()
        }
    };
    let sessions = [
        ("a", vec![asked(3, "a1", 1_000), asked(4, "a2", 5_000)]),
        ("b", vec![asked(3, "b1", 2_000)]),
        // Waits as long as it takes.
        ("c", vec![asked(3, "c1", 0)]),
    ];
    for (id, questions) in sessions {
        store.lease(id).await.unwrap();
        store.commit(id, &started(questions)).await.unwrap();
    }
    assert_eq!(
        store.approvals_due(999, 10).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.approvals_due(1_500, 10).await.unwrap(), ["a"]);
    assert_eq!(
        store.approvals_due(u64::MAX >> 1, 10).await.unwrap(),
        ["a", "b"]
    );
    assert_eq!(store.approvals_due(u64::MAX >> 1, 1).await.unwrap(), ["a"]);
    // a1 decided: a's next deadline is a2's, after b's.
    store.commit("a", &decided(5, "a1")).await.unwrap();
    assert_eq!(
        store.approvals_due(1_500, 10).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.approvals_due(10_000, 10).await.unwrap(), ["b", "a"]);
    // b's run ended; a is removed with its rows.
    store.commit("b", &run_ended(4)).await.unwrap();
    store.remove("a").await.unwrap();
    assert_eq!(
        store.approvals_due(10_000, 10).await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn deadlines_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    deadlines_follow_the_questions(Location::path(dir.path().join("t.db"))).await;
}

#[tokio::test]
async fn deadlines_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    deadlines_follow_the_questions(Location::dsn(&schema.dsn).unwrap()).await;
}

/// Two deployments in two schemas of one PostgreSQL database each lease their own session of
/// the same id (an advisory lock is the database's, so its key names the schema), while a
/// second store of the same schema is still refused it.
#[tokio::test]
async fn schemas_of_one_database_lease_sessions_of_the_same_id_apart_on_postgres() {
    let (Some(first), Some(second)) = (reel_tests::postgres(), reel_tests::postgres()) else {
        return;
    };
    let open = async |dsn: &str| {
        let location = Location::dsn(dsn).unwrap();
        open_timeline(&location, Access::ReadWrite).await.unwrap()
    };
    let mut here = open(&first.dsn).await;
    let mut there = open(&second.dsn).await;
    here.lease("leased-in-two-schemas").await.unwrap();
    there.lease("leased-in-two-schemas").await.unwrap();

    let mut rival = open(&first.dsn).await;
    let refused = rival.lease("leased-in-two-schemas").await;
    assert!(matches!(refused, Err(StoreError::Busy(_))), "{refused:?}");
    here.release("leased-in-two-schemas").await.unwrap();
    rival.lease("leased-in-two-schemas").await.unwrap();
}
