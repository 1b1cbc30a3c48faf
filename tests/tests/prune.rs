//! `reel prune` and `reel serve --retain`: whole sessions removed for their age, on SQLite and
//! PostgreSQL. `--dry-run` lists and removes nothing; a session a live process holds is kept;
//! `--keep-last N` keeps the newest; a pruned session is gone from every table and `reel serve`
//! answers a request for it 410 `session_pruned`, distinct from 404 for one that never was.

use std::time::Duration;

use reel_tests::{RpcClient, served::Served};

use reel_tests::run_text as reel;

/// Stores session `id` (one echoed prompt) in the database `store` names.
fn record(store: &[&str], id: &str) {
    let echo = reel_tests::served::echo_command();
    let mut args = vec!["run-command", echo.as_str(), "--session-id", id];
    args.extend(store);
    let (status, _, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
}

/// The ids `reel sessions` lists.
fn listed(store: &[&str]) -> Vec<String> {
    let mut args = vec!["sessions", "--json"];
    args.extend(store);
    let (status, out, stderr) = reel(&args);
    assert_eq!(status, Some(0), "{stderr}");
    let sessions: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut ids: Vec<String> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// The whole story on one database: old sessions (one of them held by a live process), a
/// second's pause, a new one; then a dry run, the pruning, and --keep-last.
fn prunes_what_is_old_and_keeps_what_is_held(store: &[&str]) {
    for id in ["old-a", "old-b", "held"] {
        record(store, id);
    }
    // A live process holds "held" (a stdin-RPC session waiting for its next request).
    let echo = reel_tests::served::echo_command();
    let mut holder_args = vec![
        "run-command",
        echo.as_str(),
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "held",
        "--resume",
    ];
    holder_args.extend(store);
    let mut holder = RpcClient::start(&holder_args);
    holder.wait_for("the hello", |f| f.json.get("hello").is_some());
    std::thread::sleep(Duration::from_millis(1500));
    record(store, "new");

    let prune = |extra: &[&str]| {
        let mut args = vec!["prune"];
        args.extend(extra);
        args.extend(store);
        reel(&args)
    };
    let (status, out, stderr) = prune(&["--older-than", "1s", "--dry-run"]);
    assert_eq!(status, Some(0), "{stderr}");
    let mut would: Vec<&str> = out.lines().collect();
    would.sort();
    assert_eq!(
        would,
        [
            "would remove held",
            "would remove old-a",
            "would remove old-b"
        ]
    );
    assert_eq!(
        listed(store),
        ["held", "new", "old-a", "old-b"],
        "a dry run removes nothing"
    );

    let (status, out, stderr) = prune(&["--older-than", "1s"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        out.contains("removed old-a\n") && out.contains("removed old-b\n"),
        "{out}"
    );
    assert!(out.contains("kept held: "), "a held session is kept: {out}");
    assert_eq!(listed(store), ["held", "new"]);
    let (status, _, stderr) = reel(&[&["show", "old-a"][..], store].concat());
    assert_eq!(status, Some(1), "{stderr}");

    drop(holder.finish());
    let (status, out, stderr) = prune(&["--keep-last", "1"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(out, "removed held\n");
    assert_eq!(listed(store), ["new"]);

    // Bad input changes nothing.
    let (status, _, stderr) = prune(&["--older-than", "soon"]);
    assert_eq!(status, Some(2), "{stderr}");
    let (status, _, stderr) = prune(&[]);
    assert_eq!(
        status,
        Some(2),
        "one of --older-than and --keep-last: {stderr}"
    );
    assert_eq!(listed(store), ["new"]);
}

#[test]
fn prune_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    prunes_what_is_old_and_keeps_what_is_held(&["--timeline-db", db.to_str().unwrap()]);
}

#[test]
fn prune_on_postgres() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    prunes_what_is_old_and_keeps_what_is_held(&["--timeline-dsn", &schema.dsn]);
}

/// `reel serve --retain 1s` prunes at start: a request for a pruned session is 410
/// `session_pruned`, for one that never was 404 `session_not_found`, and a session the server
/// then makes is kept while it is new.
#[tokio::test]
async fn serve_retain_prunes_and_answers_410_for_what_it_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = ["--timeline-db", db.to_str().unwrap()];
    record(&store, "old");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let served = Served::start(
        &reel_tests::served::echo_command(),
        &db,
        &["--retain", "1s"],
        &[],
    );
    let mut answered = (0, serde_json::Value::Null);
    for _ in 0..50 {
        answered = served.get("/v1/sessions/old").await;
        if answered.0 == 410 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answered.0, 410, "{}", answered.1);
    assert_eq!(answered.1["error"]["code"], "session_pruned");
    let (status, body) = served.get("/v1/sessions/old/export?format=jsonl").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("session_pruned"))
    );
    let (status, body) = served
        .post(
            "/v1/sessions/old/requests",
            r#"{"requestId":"r","submit":{"prompt":"hello?"}}"#,
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("session_pruned"))
    );
    let (status, body) = served.get("/v1/sessions/never").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
}

/// `reel serve --retain 2s` prunes every 2 s: a session this server has loaded is never
/// pruned, however old its last write, while one nobody holds is (410 afterwards).
#[tokio::test]
async fn serve_retain_never_prunes_a_session_it_has_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(
        &reel_tests::served::echo_command(),
        &db,
        &["--retain", "2s"],
        &[],
    );
    let (status, body) = served.post("/v1/sessions", r#"{"id":"kept"}"#).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = served
        .post(
            "/v1/sessions/kept/requests",
            r#"{"requestId":"r1","submit":{"prompt":"hello"}}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    record(&["--timeline-db", db.to_str().unwrap()], "gone");
    // Both are older than 2 s after this; the server prunes every 2 s.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let (status, body) = served.get("/v1/sessions/gone").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("session_pruned"))
    );
    let (status, body) = served.get("/v1/sessions/kept").await;
    assert_eq!(status, 200, "a loaded session is kept: {body}");
    assert!(body["session"]["events"].as_u64().unwrap() > 1, "{body}");
}
