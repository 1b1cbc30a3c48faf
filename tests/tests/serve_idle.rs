//! `reel serve --idle-timeout`: a session nobody uses unloads (its lease released, so another
//! process may write it) and reloads from the store when it is used again; a subscriber or a
//! run going keeps it loaded.

use std::time::Duration;

use reel_tests::{
    scripted_command,
    served::{Served, echo_command},
};

/// The server's unloads are debug lines (a server loads and unloads thousands of sessions):
/// these tests read them.
const UNLOADS: (&str, &str) = ("REEL_LOG", "info,reel_engine=debug");

#[tokio::test]
async fn an_idle_session_unloads_and_reloads_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(
        &echo_command(),
        &db,
        &["--idle-timeout", "300ms"],
        &[UNLOADS],
    );
    served.create("s").await;
    assert_eq!(served.reply("s", "one").await, "one");

    // Watched, it stays loaded: another process cannot write it.
    let mut watching = served.events("s", None).await;
    watching.next().await.expect("hello");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refused = outsider(&db);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("busy")
            || String::from_utf8_lossy(&refused.stderr).contains("lease"),
        "{refused:?}"
    );

    // Unwatched, it unloads and its lease is free.
    drop(watching);
    served.wait_for_log("session s unloaded").await;
    let outside = outsider(&db);
    assert!(outside.status.success(), "{outside:?}");

    // Used again, it reloads with what the other process added.
    assert_eq!(served.reply("s", "three").await, "three");
    let (_, _, turns) = served.get_text("/v1/sessions/s/export?format=turns").await;
    for text in ["one", "Hello outsider", "three"] {
        assert!(turns.contains(text), "{text}: {turns}");
    }
}

#[tokio::test]
async fn a_run_going_keeps_its_session_loaded_however_quiet_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - text: \"first \"\n    - sleep_ms: 1500\n    - text: \"last\"\n  - - text: \"later\"\n",
    );
    let served = Served::start(
        &command,
        &dir.path().join("t.db"),
        &["--idle-timeout", "200ms"],
        &[UNLOADS],
    );
    served.create("s").await;
    served.request("s", r#"{"submit":{"prompt":"go"}}"#).await;
    // Past the timeout, in the run's silent pause: a follow-up queues behind it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    served
        .request("s", r#"{"followUp":{"prompt":"and then"}}"#)
        .await;

    // The session unloads once, after both runs: an eviction in the pause would have dropped
    // the queued follow-up with the session's shutdown.
    let lines = served.wait_for_log("session s unloaded").await;
    let (_, summary) = served.get("/v1/sessions/s").await;
    assert_eq!(summary["session"]["runs"], 2, "{summary}\n{lines:#?}");
    assert_eq!(
        summary["session"]["last_run_status"], "finished",
        "{summary}"
    );
    let (_, _, turns) = served.get_text("/v1/sessions/s/export?format=turns").await;
    assert!(
        turns.contains("first last") && turns.contains("later"),
        "{turns}"
    );
}

#[tokio::test]
async fn a_session_used_again_stays_loaded_a_whole_timeout_after_that_use() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--idle-timeout", "8s"],
        &[UNLOADS],
    );
    served.create("s").await;
    assert_eq!(served.reply("s", "one").await, "one");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(served.reply("s", "two").await, "two");
    // Past the timeout counted from the first use and the sweep after it (once a second), a
    // second and a half before the timeout from the second use: the sweep, which looks at a
    // session when it could first be idle, found it used since.
    tokio::time::sleep(Duration::from_millis(6500)).await;
    assert_eq!(sessions_loaded(&served).await, 1.0, "evicted too early");
    served.wait_for_log("session s unloaded").await;
    assert_eq!(sessions_loaded(&served).await, 0.0);
}

/// The server's `reel_sessions_loaded` gauge.
async fn sessions_loaded(served: &Served) -> f64 {
    let (status, _, text) = served.get_text("/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix("reel_sessions_loaded ")?.parse().ok())
        .unwrap_or_else(|| panic!("no reel_sessions_loaded in\n{text}"))
}

/// `reel run-command` as another process, adding a turn to session `s`.
fn outsider(db: &std::path::Path) -> std::process::Output {
    reel_tests::run(&[
        "run-command",
        &echo_command(),
        "--name",
        "outsider",
        "--session-id",
        "s",
        "--resume",
        "--timeline-db",
        db.to_str().unwrap(),
    ])
}
