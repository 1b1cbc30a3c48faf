//! Keeping a database tidy: `reel rm` deletes a session (never one a process is writing), and
//! `reel verify SESSION` has the shape of its siblings, default database included.

use reel_tests::{
    on_both_backends, reel,
    stored::{Backend, unique},
};

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn listed(backend: &Backend) -> Vec<String> {
    let output = backend.run(&["sessions", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let sessions: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

fn rm_deletes_a_session_but_never_one_being_written(backend: &Backend) {
    let (gone, kept) = (unique("gone"), unique("kept"));
    for id in [&gone, &kept] {
        let made = backend.run(&[
            "run-command",
            "examples/weather-tool.yaml",
            "--session-id",
            id,
        ]);
        assert!(made.status.success(), "{}", stderr(&made));
    }
    let removed = backend.run(&["rm", &gone]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    let ids = listed(backend);
    assert!(!ids.contains(&gone) && ids.contains(&kept), "{ids:?}");
    let shown = backend.run(&["show", &gone]);
    assert_eq!(shown.status.code(), Some(1));
    let again = backend.run(&["rm", &gone]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("there is no session"),
        "{}",
        stderr(&again)
    );

    // A session a process is writing is refused, and stays whole.
    let mut writer = backend.client(&[
        "run-command",
        "examples/echo.yaml",
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        &kept,
        "--resume",
    ]);
    writer.send(r#"{"requestId":"a","submit":{"prompt":"still writing"}}"#);
    assert_eq!(writer.done_of("a"), "ok");
    let refused = backend.run(&["rm", &kept]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("open in another process"),
        "{}",
        stderr(&refused)
    );
    let (status, _, err) = writer.finish();
    assert!(status.success(), "{err}");
    let verified = backend.run(&["verify", &kept]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

on_both_backends!(rm_deletes_a_session_but_never_one_being_written);

#[test]
fn verify_takes_the_session_like_show_and_the_default_database() {
    let dir = tempfile::tempdir().unwrap();
    let made = reel(&[
        "run-command",
        "examples/weather-tool.yaml",
        "--session-id",
        "notes",
    ])
    .env("XDG_DATA_HOME", dir.path())
    .output()
    .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let verified = reel(&["verify", "notes"])
        .env("XDG_DATA_HOME", dir.path())
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", stderr(&verified));
    let text = String::from_utf8_lossy(&verified.stdout);
    assert!(
        text.contains("OK: the log, the entities and the snapshot agree"),
        "{text}"
    );
    let unknown = reel(&["verify", "nobody"])
        .env("XDG_DATA_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("there is no session \"nobody\" in"),
        "{}",
        stderr(&unknown)
    );
}
