//! The search index follows each entity through the store's commits, on both backends: a new
//! entity is found, an entity a later commit changes is found as it now reads (and no longer as
//! it read), a tombstone hides it, and removing its session removes it.

use reel_engine::{Commit, LogStore, SearchQuery, SessionCatalog};
use reel_proto::{Any, chat::ToolCallEntity, rpc::SnapshotEntity};

use crate::{Access, Location, open_timeline, sql_store_tests::prompt};

/// Tool call `id` in `status`, its input naming `word`.
fn call(id: &str, status: &str, word: &str) -> SnapshotEntity {
    SnapshotEntity {
        id: id.into(),
        kind: "ChatToolCall".into(),
        created_ordinal: 1,
        last_event_ordinal: 1,
        payload: Some(Any::ToolCallEntity(Box::new(ToolCallEntity {
            tool_call_id: id.into(),
            tool_name: "pack".into(),
            input: format!("{{\"item\": \"{word}\"}}"),
            status: status.into(),
            ..Default::default()
        }))),
        ..Default::default()
    }
}

/// A commit of one prompt at `ordinal` with `entities` as of it.
fn commit(ordinal: u64, entities: Vec<SnapshotEntity>) -> Commit {
    Commit {
        events: vec![prompt(ordinal)],
        entities,
        entities_ordinal: Some(ordinal),
        ..Commit::default()
    }
}

/// The ids of the calls `text` finds in `status` (any status with none).
async fn found(store: &mut crate::TimelineStore, text: &str, status: Option<&str>) -> Vec<String> {
    let query = SearchQuery {
        text: text.into(),
        status: status.map(str::to_owned),
        limit: 10,
        ..SearchQuery::default()
    };
    let hits = store.search(&query).await.unwrap();
    hits.into_iter().map(|hit| hit.entity_id).collect()
}

async fn the_index_follows_entities(location: Location) {
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    store.lease("s").await.unwrap();
    let first = vec![
        call("c1", "awaiting_approval", "umbrella"),
        call("c2", "completed", "scarf"),
    ];
    store.commit("s", &commit(1, first)).await.unwrap();
    assert_eq!(
        found(&mut store, "umbrella", Some("awaiting_approval")).await,
        ["c1"]
    );
    assert_eq!(found(&mut store, "scarf", None).await, ["c2"]);

    // A later commit changes c1: its status and its words.
    let changed = vec![call("c1", "completed", "raincoat")];
    store.commit("s", &commit(2, changed)).await.unwrap();
    assert!(found(&mut store, "umbrella", None).await.is_empty());
    assert_eq!(
        found(&mut store, "raincoat", Some("completed")).await,
        ["c1"]
    );
    assert!(
        found(&mut store, "raincoat", Some("awaiting_approval"))
            .await
            .is_empty()
    );
    assert_eq!(
        found(&mut store, "scarf", None).await,
        ["c2"],
        "c2 is untouched"
    );

    // A tombstone hides what it covers.
    let mut covered = call("c2", "completed", "scarf");
    covered.tombstone = true;
    store.commit("s", &commit(3, vec![covered])).await.unwrap();
    assert!(found(&mut store, "scarf", None).await.is_empty());

    // Removing the session removes its documents.
    store.remove("s").await.unwrap();
    store.release("s").await.unwrap();
    assert!(found(&mut store, "raincoat", None).await.is_empty());
}

#[tokio::test]
async fn the_index_follows_entities_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    the_index_follows_entities(Location::path(dir.path().join("t.db"))).await;
}

#[tokio::test]
async fn the_index_follows_entities_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    the_index_follows_entities(Location::dsn(&schema.dsn).unwrap()).await;
}
