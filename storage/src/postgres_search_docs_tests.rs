//! PostgreSQL's store writes the search documents SQLite's triggers write for the same
//! entities, through every kind of change a commit makes, and each document's stored
//! `tsvector` is the one of its body as it reads now.

use reel_engine::{Commit, LogStore};
use reel_proto::{
    Any,
    chat::{ChatMessageEntity, QueuedPromptEntity, ToolCallEntity, ToolResultEntity},
    rpc::SnapshotEntity,
};
use sqlx::{Connection, Row};

use crate::{
    Access, Location, TimelineStore, open_timeline, postgres_search_docs::DocumentWriting,
    simple_tsvector::TsVector, sql_store_tests::prompt,
};

/// Entity `id` of `kind` holding `payload`, made at `ordinal`.
fn entity(id: &str, kind: &str, ordinal: u64, payload: Option<Any>) -> SnapshotEntity {
    SnapshotEntity {
        id: id.into(),
        kind: kind.into(),
        created_ordinal: ordinal,
        last_event_ordinal: ordinal,
        tombstone: false,
        payload,
    }
}

fn message(id: &str, ordinal: u64, role: &str, text: &str, status: &str) -> SnapshotEntity {
    let payload = Any::from(ChatMessageEntity {
        message_id: id.into(),
        role: role.into(),
        text: text.into(),
        status: status.into(),
        ..Default::default()
    });
    entity(id, "ChatMessage", ordinal, Some(payload))
}

fn tool_call(id: &str, ordinal: u64, input: &str, status: &str) -> SnapshotEntity {
    let payload = Any::from(ToolCallEntity {
        message_id: id.into(),
        tool_name: "weather".into(),
        input: input.into(),
        status: status.into(),
        ..Default::default()
    });
    entity(id, "ChatToolCall", ordinal, Some(payload))
}

/// Three commits: new entities of every kind with a document, and one without; then a reply
/// that grows, a call whose status alone changes, a message covered by a tombstone; then an
/// entity of an earlier commit changed again, beside a new one.
fn commits() -> Vec<Commit> {
    let reasoning = Any::from(ChatMessageEntity {
        role: "assistant".into(),
        text: "thinking about Phở and crème brûlée".into(),
        segment_type: "reasoning".into(),
        status: "finished".into(),
        ..Default::default()
    });
    let result = Any::from(ToolResultEntity {
        tool_name: "weather".into(),
        result: "{\"sky\": \"clear\", \"wind\": \"2 m/s\"}".into(),
        status: "completed".into(),
        ..Default::default()
    });
    let queued = Any::from(QueuedPromptEntity {
        prompt: "not a document".into(),
        status: "queued".into(),
        ..Default::default()
    });
    let first = vec![
        message(
            "u1",
            1,
            "user",
            "Hello Ada, is it raining in Paris?",
            "accepted",
        ),
        message("a1", 1, "assistant", "Let me", "streaming"),
        entity("r1", "ChatMessage", 1, Some(reasoning)),
        tool_call("c1", 1, "{\"city\": \"Paris\"}", "requested"),
        entity("t1", "ChatToolResult", 1, Some(result)),
        entity("q1", "ChatQueuedPrompt", 1, Some(queued)),
        entity("n1", "ChatMessage", 1, None),
        message("s1", 1, "user", "my secret is tangerine", "accepted"),
    ];
    let mut covered = message("s1", 1, "user", "my secret is tangerine", "accepted");
    covered.tombstone = true;
    let second = vec![
        message(
            "a1",
            1,
            "assistant",
            "Let me look: no rain in Paris",
            "finished",
        ),
        tool_call("c1", 1, "{\"city\": \"Paris\"}", "completed"),
        covered,
    ];
    let third = vec![
        message(
            "u1",
            1,
            "user",
            "Hello Ada, is it snowing in Oslo?",
            "accepted",
        ),
        message("u3", 3, "user", "thanks", "accepted"),
    ];
    [first, second, third]
        .into_iter()
        .zip(1u64..)
        .map(|(entities, ordinal)| Commit {
            events: vec![prompt(ordinal)],
            entities,
            entities_ordinal: Some(ordinal),
            ..Commit::default()
        })
        .collect()
}

/// Every document of the database at `location`: entity, role, tool, status, ordinal, body.
type Document = (String, String, String, String, i64, String);

async fn documents_after_commits(location: &Location) -> Vec<Document> {
    let mut store = open_timeline(location, Access::ReadWrite).await.unwrap();
    store.lease("search-docs-alike").await.unwrap();
    for commit in commits() {
        store.commit("search-docs-alike", &commit).await.unwrap();
    }
    let sql = "SELECT entity_id, role, tool_name, status, ordinal, body FROM search_docs \
               WHERE session_id = 'search-docs-alike' ORDER BY entity_id";
    let rows = match location {
        Location::Sqlite(path) => {
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
            (rows.iter())
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                .collect()
        }
        Location::Postgres(dsn) => {
            let mut conn = sqlx::PgConnection::connect(dsn).await.unwrap();
            let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
            (rows.iter())
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                .collect()
        }
    };
    store.release("search-docs-alike").await.unwrap();
    rows
}

#[tokio::test]
async fn the_store_writes_the_documents_sqlites_triggers_write() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = documents_after_commits(&Location::path(dir.path().join("t.db"))).await;
    let postgres = documents_after_commits(&Location::dsn(&schema.dsn).unwrap()).await;
    assert_eq!(postgres, sqlite);

    // What the triggers made of each entity, spelled out (so that both cannot be wrong alike).
    let doc = |id: &str, role: &str, tool: &str, status: &str, body: &str| {
        let strings = [id, role, tool, status, body].map(str::to_owned);
        let [id, role, tool, status, body] = strings;
        (id, role, tool, status, 1, body)
    };
    let mut expected = vec![
        doc(
            "a1",
            "assistant",
            "",
            "finished",
            "Let me look: no rain in Paris",
        ),
        doc(
            "c1",
            "tool",
            "weather",
            "completed",
            "{\"city\": \"Paris\"}",
        ),
        doc("n1", "", "", "", ""),
        doc(
            "r1",
            "reasoning",
            "",
            "finished",
            "thinking about Phở and crème brûlée",
        ),
        doc("s1", "user", "", "accepted", ""),
        doc(
            "t1",
            "tool",
            "weather",
            "completed",
            "{\"sky\": \"clear\", \"wind\": \"2 m/s\"}",
        ),
        doc(
            "u1",
            "user",
            "",
            "accepted",
            "Hello Ada, is it snowing in Oslo?",
        ),
        doc("u3", "user", "", "accepted", "thanks"),
    ];
    expected[7].4 = 3;
    assert_eq!(postgres, expected);

    // Each stored tsvector is its body's as it reads now: made anew when the body changed
    // (a1, u1, s1), kept when only the status did (c1).
    let mut conn = sqlx::PgConnection::connect(&schema.dsn).await.unwrap();
    let stale: Vec<String> = sqlx::query_scalar(
        "SELECT entity_id FROM search_docs \
         WHERE tsv IS DISTINCT FROM to_tsvector('simple', left(body, 100000))",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
}

/// A PostgreSQL text holds no NUL character: a document leaves them out (as the triggers did,
/// reading the payload as `jsonb`), and its commit does not fail for them.
#[tokio::test]
async fn a_nul_character_is_left_out_of_a_document_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let location = Location::dsn(&schema.dsn).unwrap();
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    store.lease("search-docs-nul").await.unwrap();
    let commit = Commit {
        events: vec![prompt(1)],
        entities: vec![tool_call("c1", 1, "nul\0byte", "done\0")],
        entities_ordinal: Some(1),
        ..Commit::default()
    };
    store.commit("search-docs-nul", &commit).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&schema.dsn).await.unwrap();
    let row = sqlx::query("SELECT body, status FROM search_docs WHERE entity_id = 'c1'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (row.get(0), row.get(1)),
        ("nulbyte".to_owned(), "done".to_owned())
    );
}

/// A database of migration 9, whose triggers wrote its documents: after migration 10 the old
/// documents are still found, and the store's commits change them as the triggers would have.
#[tokio::test]
async fn documents_the_triggers_wrote_stay_and_follow_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let mut conn = sqlx::PgConnection::connect(&schema.dsn).await.unwrap();
    let before_10 = (crate::schema::POSTGRES_MIGRATIONS.iter())
        .filter(|migration| migration.version < 10)
        .cloned()
        .collect();
    let migrator = sqlx::migrate::Migrator::with_migrations(before_10);
    migrator.run_direct(None, &mut conn, false).await.unwrap();
    let old = message("m1", 1, "user", "an umbrella for Oslo", "accepted");
    let row = crate::rows::EntityRow::of(&old).unwrap();
    sqlx::query(
        "INSERT INTO entities (session_id, entity_id, kind, created_ordinal, \
         last_event_ordinal, tombstone, payload_json) VALUES ('search-docs-migrated', $1, $2, 1, 1, false, $3)",
    )
    .bind(row.id)
    .bind(row.kind)
    .bind(&row.payload_json)
    .execute(&mut conn)
    .await
    .unwrap();
    // Its session, whose log holds the event that made it.
    let event = crate::rows::event_json(&prompt(1)).unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sessions (session_id, created_at, updated_at, last_ordinal, entities_ordinal) \
         VALUES ('search-docs-migrated', 0, 0, 1, 1); \
         INSERT INTO events (session_id, ordinal, name, payload_json, created_at) \
         VALUES ('search-docs-migrated', 1, 'ChatUserMessageAccepted', '{}', 0)",
        event.replace('\'', "''")
    )))
    .execute(&mut conn)
    .await
    .unwrap();

    // The first writing open applies migration 10.
    let location = Location::dsn(&schema.dsn).unwrap();
    let mut store = open_timeline(&location, Access::ReadWrite).await.unwrap();
    let found = async |store: &mut crate::TimelineStore, text: &str| {
        let query = reel_engine::SearchQuery {
            text: text.into(),
            limit: 5,
            ..Default::default()
        };
        let hits = reel_engine::SessionCatalog::search(store, &query)
            .await
            .unwrap();
        hits.into_iter()
            .map(|hit| (hit.entity_id, hit.status))
            .collect::<Vec<_>>()
    };
    let m1 = |status: &str| vec![("m1".to_owned(), status.to_owned())];
    assert_eq!(found(&mut store, "umbrella").await, m1("accepted"));

    // A status of its own, then new words: the document follows both.
    store.lease("search-docs-migrated").await.unwrap();
    let changes = [
        message("m1", 1, "user", "an umbrella for Oslo", "answered"),
        message("m1", 1, "user", "a raincoat for Oslo", "answered"),
    ];
    for (entity, ordinal) in changes.into_iter().zip(2u64..) {
        let commit = Commit {
            events: vec![prompt(ordinal)],
            entities: vec![entity],
            entities_ordinal: Some(ordinal),
            ..Commit::default()
        };
        store.commit("search-docs-migrated", &commit).await.unwrap();
        if ordinal == 2 {
            assert_eq!(found(&mut store, "umbrella").await, m1("answered"));
        }
    }
    assert!(found(&mut store, "umbrella").await.is_empty());
    assert_eq!(found(&mut store, "raincoat").await, m1("answered"));
}

/// Bodies made of words, numbers, blanks, full stops and a few characters the parser reads by
/// rules of its own, from a fixed seed: the tsvector the writer makes of each plain one must be
/// PostgreSQL's `to_tsvector('simple', ...)` of it, byte for byte.
fn generated_bodies(count: usize) -> Vec<String> {
    const PIECES: [&str; 20] = [
        "word",
        "Ada",
        "I",
        "WORLD",
        "x1",
        "2nd",
        "0x1F",
        "1e5",
        "1E5x",
        "12ab34",
        "007",
        "e",
        "café",
        "a-b",
        "v1.2",
        "x@y",
        "-5",
        "http://x.org/p",
        "<b>",
        "&amp;",
    ];
    const BLANKS: [&str; 12] = [
        " ",
        "  ",
        "\n",
        "\t",
        ", ",
        "; ",
        "! ",
        "(",
        ")",
        "\"",
        "'",
        "_*=#%`|?[]{}\r",
    ];
    const STOPS: [&str; 12] = [
        ". ", ".", "..", ".\n", ": ", ":", ":\n", "- ", "-", " - ", "\n- ", ":-",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    (0..count)
        .map(|_| {
            let mut body = String::new();
            for _ in 0..next(14) {
                match next(10) {
                    0..5 => body.push_str(PIECES[next(PIECES.len())]),
                    5..9 => body.push_str(BLANKS[next(BLANKS.len())]),
                    _ => body.push_str(STOPS[next(STOPS.len())]),
                }
            }
            body
        })
        .collect()
}

#[tokio::test]
async fn the_tsvectors_the_writer_makes_are_postgresqls_own() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let (bodies, vectors): (Vec<String>, Vec<TsVector>) = generated_bodies(20_000)
        .into_iter()
        .filter_map(|body| TsVector::of(&body).map(|vector| (body, vector)))
        .unzip();
    // Enough of them plain, of every shape, for the comparison to mean something.
    assert!(bodies.len() > 3_000, "{} plain bodies", bodies.len());
    let mut conn = sqlx::PgConnection::connect(&schema.dsn).await.unwrap();
    let differ: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.b, to_tsvector('simple', c.b)::text FROM UNNEST($1::text[], $2::tsvector[]) AS c(b, v) \
         WHERE c.v IS DISTINCT FROM to_tsvector('simple', c.b)",
    )
    .bind(&bodies)
    .bind(&vectors)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let shown: Vec<String> = (differ.iter().take(5))
        .map(|(body, theirs)| {
            let ours = TsVector::of(body).map(|vector| vector.text());
            format!("{body:?}: PostgreSQL {theirs}, reel {ours:?}")
        })
        .collect();
    assert!(differ.is_empty(), "{} differ: {shown:#?}", differ.len());

    // This database agrees on the probe, so its stores send their own.
    let store = open_timeline(&Location::dsn(&schema.dsn).unwrap(), Access::ReadWrite)
        .await
        .unwrap();
    let TimelineStore::Postgres(store) = store else {
        panic!("a DSN opens PostgreSQL");
    };
    assert_eq!(store.writing, DocumentWriting::Computed);
}
