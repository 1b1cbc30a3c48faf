//! `reel search`: every session's messages, reasoning, tool arguments and results, on SQLite
//! (FTS5) and PostgreSQL (tsvector), newest first, with the filters; the index follows the
//! stored entities in their own transaction (a removed session's hits are gone with it); a
//! database made before the index gets it on its first writing open, not on a read; a query
//! the syntax does not take is refused with a clear error.

use reel_tests::repo_root;
use serde_json::Value;

use reel_tests::run_text as reel;

/// `reel search QUERY FLAGS --json` on `store`: the hits.
fn search(store: &[&str], query: &str, flags: &[&str]) -> Vec<Value> {
    let mut args = vec!["search", query, "--json"];
    args.extend(flags);
    args.extend(store);
    let (status, out, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Each hit as (session, role).
fn whose(hits: &[Value]) -> Vec<(String, String)> {
    hits.iter()
        .map(|h| {
            (
                h["session_id"].as_str().unwrap().to_owned(),
                h["role"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn record(store: &[&str], example: &str, id: &str) {
    let example = repo_root().join("examples").join(example);
    let mut args = vec!["run-command", example.to_str().unwrap(), "--session-id", id];
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
}

fn searches_every_session(store: &[&str]) {
    record(store, "weather-tool.yaml", "paris");
    record(store, "echo.yaml", "echo");
    let mut args = vec!["run-command"];
    let echo = repo_root().join("examples/echo.yaml");
    args.extend([echo.to_str().unwrap(), "--session-id", "echo", "--resume"]);
    args.extend(["--name", "sunny days in Oslo"]);
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");

    // Newest first, every role that said it.
    let hits = search(store, "sunny", &[]);
    let found = whose(&hits);
    assert_eq!(found[0].0, "echo", "the newest first: {found:?}");
    for expected in [
        ("echo", "user"),
        ("echo", "assistant"),
        ("paris", "assistant"),
        ("paris", "tool"),
    ] {
        assert!(
            found.contains(&(expected.0.into(), expected.1.into())),
            "{expected:?} in {found:?}"
        );
    }
    let first = &hits[0];
    assert!(first["ordinal"].as_u64().unwrap() > 0 && first["at_ms"].as_u64().unwrap() > 0);
    let matched: Vec<&str> = first["snippet"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["matched"] == true)
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(matched, ["sunny"]);

    // The filters.
    assert!(
        whose(&search(store, "sunny", &["--session", "paris"]))
            .iter()
            .all(|(s, _)| s == "paris")
    );
    assert_eq!(
        whose(&search(store, "sunny", &["--role", "tool"])),
        [("paris".to_owned(), "tool".to_owned())]
    );
    let reasoning = search(store, "look", &["--role", "reasoning"]);
    assert_eq!(
        whose(&reasoning),
        [("paris".to_owned(), "reasoning".to_owned())]
    );
    let tool = search(
        store,
        "Paris",
        &["--tool", "get_weather", "--status", "completed"],
    );
    assert_eq!(whose(&tool), [("paris".to_owned(), "tool".to_owned())]);
    assert_eq!(tool[0]["tool_name"], "get_weather");
    assert!(search(store, "sunny", &["--since", "2100-01-01"]).is_empty());
    assert_eq!(search(store, "sunny", &["--limit", "1"]).len(), 1);
    assert!(search(store, "nowhere", &[]).is_empty());

    // Text mode marks the match and names the spot.
    let mut args = vec![
        "search",
        "sunny",
        "--session",
        "paris",
        "--role",
        "assistant",
    ];
    args.extend(store);
    let (status, out, _) = reel(&args);
    assert_eq!(status, Some(0));
    assert!(out.starts_with("paris #"), "{out}");
    assert!(out.contains("[sunny] in Paris"), "{out}");

    // Bad input: a clear error, non-zero exit.
    let mut args = vec!["search", "  "];
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(1));
    assert!(
        stderr.contains("is not valid search syntax (it is empty)"),
        "{stderr}"
    );

    // A removed session's hits go with it (the same transaction).
    let mut args = vec!["rm", "paris"];
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        whose(&search(store, "sunny", &[]))
            .iter()
            .all(|(s, _)| s == "echo")
    );
}

#[test]
fn search_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = ["--timeline-db", db.to_str().unwrap()];
    searches_every_session(&store);
    // FTS5's own refusals, and its "special queries" (a leading `*`), which ask about the
    // index instead of searching it.
    for bad in ["a:b", "\"open", "a AND", "*reads", "*æÔ´"] {
        let (status, _, stderr) = reel(&["search", bad, store[0], store[1]]);
        assert_eq!(status, Some(1), "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!("{bad:?} is not valid search syntax")),
            "{bad}: {stderr}"
        );
    }
}

#[test]
fn search_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    searches_every_session(&["--timeline-dsn", &schema.dsn]);
}

/// A database made before the index: a read-only search refuses it, saying a writing command
/// upgrades it, and changes nothing; the first writing open builds the index from the stored
/// entities.
#[test]
fn a_database_from_before_the_index_is_indexed_on_its_first_writing_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = ["--timeline-db", db.to_str().unwrap()];
    record(&store, "weather-tool.yaml", "paris");
    // Back to the schema before migration 8 (and 10, which builds on it).
    let undone = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(
            "DROP TRIGGER entities_searched_inserted; DROP TRIGGER entities_searched_updated; \
             DROP TRIGGER entities_searched_deleted; DROP TABLE search_fts; DROP TABLE search_docs; \
             DROP TABLE search_pending; DELETE FROM _sqlx_migrations WHERE version IN (8, 10);",
        )
        .status()
        .expect("sqlite3 runs (.ci/run installs it)");
    assert!(undone.success());
    let (status, _, stderr) = reel(&["search", "sunny", store[0], store[1]]);
    assert_eq!(status, Some(1));
    assert!(
        stderr.contains("was written by an older reel; a writing command"),
        "{stderr}"
    );
    let (status, _, stderr) = reel(&["prune", "--older-than", "1000y", store[0], store[1]]);
    assert_eq!(status, Some(0), "{stderr}");
    let hits = search(&store, "sunny", &[]);
    assert_eq!(hits.len(), 2, "{hits:?}");
}

/// A prompt of over a megabyte of distinct words (and its echo) is stored and searchable:
/// PostgreSQL's index takes the first 100,000 characters of a text (a tsvector holds 1 MB at
/// most), and a commit never fails for its index.
fn a_huge_text_is_stored_and_searchable(store: &[&str]) {
    let echo = repo_root().join("examples/echo.yaml");
    let mut args = vec![
        "run-command",
        echo.to_str().unwrap(),
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "huge",
    ];
    args.extend(store);
    let mut client = reel_tests::RpcClient::start(&args);
    let words: String = (1..=150_000).map(|i| format!("word{i} ")).collect();
    assert!(words.len() > 1_048_576);
    let submit = serde_json::json!({"requestId": "h", "submit": {"prompt": words}});
    client.send(&submit.to_string());
    assert_eq!(client.done_of("h"), "ok");
    drop(client.finish());
    let hits = search(store, "word42", &["--role", "user"]);
    assert_eq!(whose(&hits), [("huge".to_owned(), "user".to_owned())]);
}

#[test]
fn a_huge_text_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    a_huge_text_is_stored_and_searchable(&["--timeline-db", db.to_str().unwrap()]);
}

#[test]
fn a_huge_text_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    a_huge_text_is_stored_and_searchable(&["--timeline-dsn", &schema.dsn]);
}

/// `GET /v1/search` in `reel serve`: the same hits a page at a time (`next` is the cursor of
/// the next page), the filters, and a bad query refused with 400 `invalid_query`.
#[tokio::test]
async fn serve_searches_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = ["--timeline-db", db.to_str().unwrap()];
    record(&store, "weather-tool.yaml", "paris");
    let served =
        reel_tests::served::Served::start(&reel_tests::served::echo_command(), &db, &[], &[]);
    let (status, body) = served.get("/v1/search?q=sunny").await;
    assert_eq!(status, 200, "{body}");
    let all = body["hits"].as_array().unwrap().clone();
    assert_eq!(all.len(), 2, "{body}");
    assert_eq!(body["next"], Value::Null);

    let (status, first) = served.get("/v1/search?q=sunny&limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(first["hits"].as_array().unwrap().len(), 1);
    let next = first["next"].as_i64().expect("a next page");
    let (_, second) = served
        .get(&format!("/v1/search?q=sunny&limit=1&before={next}"))
        .await;
    let paged: Vec<&Value> = first["hits"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["hits"].as_array().unwrap())
        .collect();
    assert_eq!(
        paged,
        all.iter().collect::<Vec<_>>(),
        "two pages hold the same hits"
    );
    assert_eq!(second["next"], Value::Null);

    let (_, tools) = served
        .get("/v1/search?q=sunny&role=tool&session=paris")
        .await;
    assert_eq!(tools["hits"].as_array().unwrap().len(), 1);
    assert_eq!(tools["hits"][0]["tool_name"], "get_weather");
    let (_, later) = served.get("/v1/search?q=sunny&since=2100-01-01").await;
    assert!(later["hits"].as_array().unwrap().is_empty());

    for bad in [
        "/v1/search",
        "/v1/search?q=a:b",
        "/v1/search?q=%2A%C3%A6%C3%94%C2%B4",
        "/v1/search?q=sunny&since=yesterday",
        "/v1/search?q=sunny&role=robot",
    ] {
        let (status, body) = served.get(bad).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}: {body}"
        );
    }
}

/// The chat page's search box in a real browser (Playwright on Chromium): the hits with the
/// match marked, a session's markup shown as text, and a hit opening its session at that point.
#[tokio::test]
async fn the_chat_page_searches_and_opens_a_hit_where_it_was_said() {
    let Some(driver) = reel_tests::PageDriver::ready() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = ["--timeline-db", db.to_str().unwrap()];
    record(&store, "weather-tool.yaml", "paris");
    let echo = repo_root().join("examples/echo.yaml");
    let mut args = vec![
        "run-command",
        echo.to_str().unwrap(),
        "--session-id",
        "hostile",
        "--name",
        "<img src=x onerror=\"document.title='pwned'\"> sunny",
    ];
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
    let served =
        reel_tests::served::Served::start(&reel_tests::served::echo_command(), &db, &[], &[]);
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    let seen = driver.run("search_box.py", &port, Vec::new()).await;
    assert!(seen["hits"].as_u64().unwrap() >= 3, "{seen}");
}
