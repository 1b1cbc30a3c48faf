//! The search index follows each entity through the store's commits, on both backends: a new
//! entity is found, an entity a later commit changes is found as it now reads (and no longer as
//! it read), a tombstone hides it, and removing its session removes it. On SQLite, each of
//! these both while the entity's document waits for FTS5 and once a batch has put it there.

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

/// How many documents SQLite gathers before FTS5 takes them (migration 0010).
const BATCH: usize = 256;

/// Runs the story with `fillers` more calls committed after the first two: with enough of
/// them, SQLite's batch takes c1 and c2 into FTS5 before they change.
async fn the_index_follows_entities(location: Location, fillers: usize) {
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    let mut sqlite = match &location {
        Location::Sqlite(db) => Some(SqliteIndex::open(db).await),
        Location::Postgres(_) => None,
    };
    store.lease("s").await.unwrap();
    let first = vec![
        call("c1", "awaiting_approval", "umbrella"),
        call("c2", "completed", "scarf"),
    ];
    store.commit("s", &commit(1, first)).await.unwrap();
    let mut ordinal = 1;
    if fillers > 0 {
        ordinal += 1;
        let filled = (0..fillers).map(|n| call(&format!("f{n:03}"), "completed", "filler"));
        store
            .commit("s", &commit(ordinal, filled.collect()))
            .await
            .unwrap();
        // The newest ten come first, wherever each one waits.
        let newest: Vec<String> = (fillers - 10..fillers)
            .rev()
            .map(|n| format!("f{n:03}"))
            .collect();
        assert_eq!(found(&mut store, "filler", None).await, newest);
        // And the page after them, from the cursor of the last one.
        let mut page = SearchQuery {
            text: "filler".into(),
            limit: 10,
            ..SearchQuery::default()
        };
        let first = store.search(&page).await.unwrap();
        page.before = first.last().map(|hit| hit.doc);
        let second = store.search(&page).await.unwrap();
        let ids: Vec<String> = second.into_iter().map(|hit| hit.entity_id).collect();
        let next: Vec<String> = (fillers - 20..fillers - 10)
            .rev()
            .map(|n| format!("f{n:03}"))
            .collect();
        assert_eq!(ids, next);
    }
    if let Some(index) = &mut sqlite {
        let waiting = index.waiting().await;
        let batched = fillers + 2 >= BATCH;
        assert_eq!(waiting.contains(&"c1".to_owned()), !batched, "{waiting:?}");
        assert_eq!(waiting.len(), (fillers + 2) % BATCH, "{waiting:?}");
        index.check(false).await;
    }
    assert_eq!(
        found(&mut store, "umbrella", Some("awaiting_approval")).await,
        ["c1"]
    );
    assert_eq!(found(&mut store, "scarf", None).await, ["c2"]);

    // A later commit changes c1: its status and its words.
    let changed = vec![call("c1", "completed", "raincoat")];
    ordinal += 1;
    store.commit("s", &commit(ordinal, changed)).await.unwrap();
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
    store
        .commit("s", &commit(ordinal + 1, vec![covered]))
        .await
        .unwrap();
    assert!(found(&mut store, "scarf", None).await.is_empty());

    // Removing the session removes its documents, from FTS5 and from those waiting for it.
    store.remove("s").await.unwrap();
    store.release("s").await.unwrap();
    assert!(found(&mut store, "raincoat", None).await.is_empty());
    assert!(found(&mut store, "filler", None).await.is_empty());
    if let Some(index) = &mut sqlite {
        assert!(index.waiting().await.is_empty());
        index.check(true).await;
    }
}

/// A look into a SQLite file's index beside the store's own connection.
struct SqliteIndex(sqlx::SqliteConnection);

impl SqliteIndex {
    async fn open(db: &std::path::Path) -> Self {
        use sqlx::Connection;
        let url = format!("sqlite://{}", db.display());
        Self(sqlx::SqliteConnection::connect(&url).await.unwrap())
    }

    /// The entity ids whose documents wait for FTS5.
    async fn waiting(&mut self) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT d.entity_id FROM search_pending p JOIN search_docs d ON d.doc = p.doc \
             ORDER BY d.entity_id",
        )
        .fetch_all(&mut self.0)
        .await
        .unwrap()
    }

    /// `PRAGMA integrity_check` (which checks FTS5's index too) and FTS5's own check. With
    /// `against_documents`, FTS5 also checks its index holds exactly what `search_docs` does,
    /// which is true only while no document waits.
    async fn check(&mut self, against_documents: bool) {
        let sound: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut self.0)
            .await
            .unwrap();
        assert_eq!(sound, "ok");
        let check = "INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', $1)";
        let checked = sqlx::query(check)
            .bind(i64::from(against_documents))
            .execute(&mut self.0)
            .await;
        checked.unwrap();
    }
}

#[tokio::test]
async fn the_index_follows_entities_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let waiting = dir.path().join("waiting.db");
    the_index_follows_entities(Location::path(&waiting), 0).await;
    let batched = dir.path().join("batched.db");
    the_index_follows_entities(Location::path(&batched), BATCH + 10).await;
}

#[tokio::test]
async fn the_index_follows_entities_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    the_index_follows_entities(Location::dsn(&schema.dsn).unwrap(), BATCH + 10).await;
}

/// A new SQLite store at `db` holding session "s", and a look into its index.
async fn leased_sqlite(db: &std::path::Path) -> (crate::TimelineStore, SqliteIndex) {
    let mut store = open_timeline(&Location::path(db), Access::ReadWrite)
        .await
        .unwrap();
    store.lease("s").await.unwrap();
    (store, SqliteIndex::open(db).await)
}

/// A document reads the same to a search while it waits for FTS5 and once it is there: the
/// same words match (diacritics folded, prefixes), with the same snippet.
#[tokio::test]
async fn waiting_and_indexed_documents_are_found_alike_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut index) = leased_sqlite(&dir.path().join("t.db")).await;
    let dessert = call("c1", "completed", "Phở, crème brûlée, then coffee");
    store.commit("s", &commit(1, vec![dessert])).await.unwrap();
    assert_eq!(index.waiting().await, ["c1"]);
    let query = |text: &str| SearchQuery {
        text: text.into(),
        limit: 5,
        ..SearchQuery::default()
    };
    let mut waiting = Vec::new();
    for text in ["pho", "creme", "cof*", "\"creme brulee\""] {
        waiting.push(store.search(&query(text)).await.unwrap());
    }
    let fillers = (0..BATCH).map(|n| call(&format!("f{n:03}"), "completed", "filler"));
    store
        .commit("s", &commit(2, fillers.collect()))
        .await
        .unwrap();
    assert!(!index.waiting().await.contains(&"c1".to_owned()));
    for (text, before) in ["pho", "creme", "cof*", "\"creme brulee\""]
        .iter()
        .zip(waiting)
    {
        let now = store.search(&query(text)).await.unwrap();
        assert_eq!(now.len(), 1, "{text}: {now:?}");
        assert_eq!(now, before, "{text}");
    }
    index.check(false).await;
}

/// A large document does not wait: a batch goes into FTS5 once its text reaches 256 KiB, so
/// that no search has more than that to read anew.
#[tokio::test]
async fn a_large_document_goes_into_the_index_at_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut index) = leased_sqlite(&dir.path().join("t.db")).await;
    let small = call("c1", "completed", "small");
    store.commit("s", &commit(1, vec![small])).await.unwrap();
    assert_eq!(index.waiting().await, ["c1"]);
    let words: Vec<String> = (0..50_000).map(|n| format!("w{n}")).collect();
    let large = call("c2", "completed", &words.join(" "));
    store.commit("s", &commit(2, vec![large])).await.unwrap();
    assert!(index.waiting().await.is_empty());
    let hits = found(&mut store, "w49999", None).await;
    assert_eq!(hits, ["c2"]);
    assert_eq!(found(&mut store, "small", None).await, ["c1"]);
    index.check(true).await;
}

/// A search while batches move into FTS5 sees each document once and misses none: the newest
/// hits are always consecutive documents, whatever moved between its two reads. The reader
/// searches without pause; the writer commits again only once a search has ended since its
/// last commit, so that the two overlap throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_while_batches_move_sees_each_document_once_on_sqlite() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    };
    const COMMITS: usize = 60;
    const PER_COMMIT: usize = 64;
    const NEWEST: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = leased_sqlite(&dir.path().join("t.db")).await;
    let mut reader = store.reader().await.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let searches = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn({
        let (done, searches) = (done.clone(), searches.clone());
        async move {
            for at in 0..COMMITS {
                let calls = (0..PER_COMMIT).map(|n| {
                    let id = format!("t{:05}", at * PER_COMMIT + n);
                    call(&id, "completed", "tick")
                });
                let ordinal = at as u64 + 1;
                let seen = searches.load(Ordering::Acquire);
                store
                    .commit("s", &commit(ordinal, calls.collect()))
                    .await
                    .unwrap();
                while searches.load(Ordering::Acquire) < seen + 2 {
                    tokio::task::yield_now().await;
                }
            }
            done.store(true, Ordering::Release);
        }
    });
    let query = SearchQuery {
        text: "tick".into(),
        limit: NEWEST as u32,
        ..SearchQuery::default()
    };
    while !done.load(Ordering::Acquire) {
        let hits = reader.search(&query).await.unwrap();
        let numbers: Vec<usize> = (hits.iter())
            .map(|hit| hit.entity_id[1..].parse().unwrap())
            .collect();
        if let Some(&newest) = numbers.first() {
            let expected: Vec<usize> = (0..=newest).rev().take(NEWEST).collect();
            assert_eq!(numbers, expected);
        }
        searches.fetch_add(1, Ordering::AcqRel);
    }
    writer.await.unwrap();
}

/// Writing an entity builds no temporary table in the index's triggers: SQLite makes one for
/// `kind IN (three kinds)`, a page cache allocated and freed for every entity a commit writes
/// (2.6% of `reel serve`'s samples in a burst of replies).
#[tokio::test]
async fn writing_an_entity_builds_no_temporary_table_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, mut index) = leased_sqlite(&dir.path().join("t.db")).await;
    use sqlx::Row;
    // EXPLAIN's rows: address, opcode, operands; a trigger's program is listed after the
    // statement's own.
    let rows = sqlx::query(
        "EXPLAIN INSERT INTO entities (session_id, entity_id, kind, created_ordinal, \
         last_event_ordinal, tombstone, payload_json) VALUES ('s', 'e', 'ChatMessage', 1, 1, 0, '{}') \
         ON CONFLICT (session_id, entity_id) DO UPDATE SET payload_json = excluded.payload_json",
    )
    .fetch_all(&mut index.0)
    .await
    .unwrap();
    let program: Vec<String> = rows.iter().map(|row| row.get(1)).collect();
    assert!(program.iter().any(|op| op == "Program"), "{program:?}");
    assert!(
        !program.iter().any(|op| op == "OpenEphemeral"),
        "{program:?}"
    );
}
