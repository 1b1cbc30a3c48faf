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
