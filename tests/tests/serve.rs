//! `reel serve` over real HTTP and Server-Sent Events on 127.0.0.1: sessions created, listed,
//! driven and streamed; auth; refused input; a session another process writes; SIGTERM with a
//! run active. (Event streams themselves: `serve_streams.rs`.)

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    scripted_command,
    served::{Served, StreamedFrame, echo_command, text_of, ui_events},
};
use serde_json::Value;

#[tokio::test]
async fn sessions_are_created_listed_driven_and_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    let (status, health) = served.get("/healthz").await;
    assert_eq!((status, health), (200, Value::String("ok\n".into())));

    served.create("s1").await;
    let (status, body) = served.post("/v1/sessions", r#"{"id":"s1"}"#).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "session_exists", "{body}");
    let (status, created) = served.post("/v1/sessions", "").await;
    assert_eq!(status, 201, "{created}");
    let generated = created["session_id"].as_str().unwrap().to_owned();

    // A subscriber before the first request: hello, the (empty) timeline as of the session's
    // first event (what it runs), then live frames.
    let mut events = served.events("s1", None).await;
    let hello = events.next().await.unwrap();
    assert!(matches!(hello.frame.frame(), Frame::Hello(_)), "{hello:?}");
    let snapshot = events.next().await.unwrap();
    assert!(matches!(snapshot.frame.frame(), Frame::Snapshot(_)));
    assert_eq!(snapshot.id, "1");
    let rid = served
        .request(
            "s1",
            r#"{"requestId":"r1","submit":{"prompt":"hello there"}}"#,
        )
        .await;
    assert_eq!(rid, "r1");
    let frames = events.until_done("r1").await;
    assert_eq!(text_of(&frames), "hello there");
    assert_eq!(frames.last().unwrap().frame.done_status(), Some("ok"));
    // Frames of log events carry their ordinal as the SSE id; a request's own frames none (so
    // the last event id a client holds stays the previous one, as SSE keeps it).
    let mut previous = snapshot.id.clone();
    for frame in &frames {
        match frame.frame.frame() {
            Frame::UiEvent(ui) => assert!(
                frame.id == ui.ordinal.to_string()
                    || frame.id.starts_with(&format!("{}.", ui.ordinal)),
                "{frame:?}"
            ),
            _ => assert_eq!(frame.id, previous, "{frame:?}"),
        }
        previous.clone_from(&frame.id);
    }
    // A request without an id gets one.
    let rid = served.request("s1", r#"{"snapshot":{}}"#).await;
    assert!(!rid.is_empty());
    events.until_done(&rid).await;
    // Loaded (its lease held), it still exists to a creation.
    let (status, body) = served.post("/v1/sessions", r#"{"id":"s1"}"#).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("session_exists"))
    );

    let (status, list) = served.get("/v1/sessions").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"s1") && ids.contains(&generated.as_str()),
        "{list}"
    );
    let (_, first) = served.get("/v1/sessions?limit=1").await;
    assert_eq!(first["sessions"].as_array().unwrap().len(), 1);
    let after = first["next"].as_str().expect("a next page");
    let (_, second) = served
        .get(&format!("/v1/sessions?limit=1&after={after}"))
        .await;
    assert_eq!(second["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(second["next"], Value::Null);

    let (status, one) = served.get("/v1/sessions/s1").await;
    assert_eq!(status, 200);
    assert_eq!(one["session"]["title"], "hello there");
    let entities = one["snapshot"]["entities"].as_array().unwrap();
    assert!(
        entities
            .iter()
            .any(|e| e["payload"]["text"] == "hello there" && e["payload"]["role"] == "assistant"),
        "{one}"
    );
}

#[tokio::test]
async fn bad_requests_get_json_errors_with_the_frames_codes() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    let cases = [
        (
            "/v1/sessions/s/requests",
            "{not json",
            400,
            "invalid_request_json",
        ),
        (
            "/v1/sessions/s/requests",
            r#"{"requestId":"x"}"#,
            400,
            "unknown_request",
        ),
        ("/v1/sessions/s/requests", "", 400, "invalid_request_json"),
        (
            "/v1/sessions/s/requests",
            r#"{"sessionId":"other","snapshot":{}}"#,
            400,
            "session_mismatch",
        ),
        (
            "/v1/sessions/nope/requests",
            r#"{"snapshot":{}}"#,
            404,
            "session_not_found",
        ),
        (
            "/v1/sessions",
            r#"{"id":"../x"}"#,
            400,
            "invalid_session_id",
        ),
        (
            "/v1/sessions",
            r#"{"name":"x"}"#,
            400,
            "invalid_request_json",
        ),
    ];
    for (path, body, status, code) in cases {
        let (got, answer) = served.post(path, body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{path} {body}: {answer}"
        );
    }
    let (status, answer) = served.get("/v1/sessions/nope").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
    // A body over the limit is refused before it is read.
    let (status, answer) = served
        .post_oversized("/v1/sessions/s/requests", 17 << 20)
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (413, Some("request_too_large")),
        "{answer}"
    );
    // The session still answers.
    assert_eq!(served.reply("s", "still here").await, "still here");
}

#[tokio::test]
async fn a_token_guards_every_route_but_health_and_an_open_address_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(
        &echo_command(),
        &db,
        &["--token-env", "REEL_TEST_TOKEN"],
        &[("REEL_TEST_TOKEN", "s3cret")],
    );
    assert_eq!(served.get("/healthz").await.0, 200);
    for path in ["/v1/sessions", "/v1/sessions/s/events", "/v1/sessions/s/ws"] {
        let (status, body) = served.get(path).await;
        let code = body["error"]["code"].as_str();
        assert_eq!((status, code), (401, Some("unauthorized")), "{path}");
    }
    for token in ["wrong", "s3cre", "s3cret2"] {
        let response = served
            .client
            .get(served.url("/v1/sessions"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{token}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let response = served
        .client
        .get(served.url("/v1/sessions"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    drop(served);

    // No token: an address others can reach is refused before anything listens.
    let refused = reel_tests::reel(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--command",
        &echo_command(),
        "--timeline-db",
        db.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("without a token") && stderr.contains("--token-env"),
        "{stderr}"
    );
    // A token variable that is not set is refused too.
    let unset = reel_tests::reel(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--command",
        &echo_command(),
        "--timeline-db",
        db.to_str().unwrap(),
        "--token-env",
        "REEL_TEST_UNSET_TOKEN",
    ])
    .output()
    .unwrap();
    assert_eq!(unset.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unset.stderr).contains("REEL_TEST_UNSET_TOKEN"));
}

#[tokio::test]
async fn sigterm_stops_runs_still_running_after_the_grace_period_and_keeps_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let command = sleeping_command(dir.path(), 60_000);
    let db = dir.path().join("t.db");
    let mut served = Served::start(&command, &db, &["--grace", "1s"], &[]);
    let rest = terminated_mid_reply(&mut served).await;
    let names: Vec<String> = ui_events(&rest).into_iter().map(|(_, n, _)| n).collect();
    assert!(names.contains(&"ChatRunStopped".to_owned()), "{names:?}");
    assert!(!text_of(&rest).contains("never"));
    assert_eq!(dones(&rest), [("slow", "stopped"), (SHUTDOWN, "shutdown")]);
    let status = served.child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    // The log kept it: a new server streams it from the store.
    let served = Served::start(&command, &db, &[], &[]);
    let mut replay = served.events("s", Some("0")).await;
    replay.next().await;
    let (_, summary) = served.get("/v1/sessions/s").await;
    assert_eq!(
        summary["session"]["last_run_status"], "stopped",
        "{summary}"
    );
    let last = summary["session"]["events"].as_u64().unwrap().to_string();
    let stored: Vec<String> = ui_events(&replay.until_id(&last).await)
        .into_iter()
        .map(|(_, n, _)| n)
        .collect();
    assert!(stored.contains(&"ChatRunStopped".to_owned()), "{stored:?}");
}

#[tokio::test]
async fn sigterm_lets_a_run_finish_within_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let command = sleeping_command(dir.path(), 1500);
    let db = dir.path().join("t.db");
    let mut served = Served::start(&command, &db, &["--grace", "2m"], &[]);
    let rest = terminated_mid_reply(&mut served).await;
    assert!(text_of(&rest).ends_with("never"), "{}", text_of(&rest));
    assert_eq!(dones(&rest), [("slow", "ok"), (SHUTDOWN, "shutdown")]);
    let status = served.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let (_, summary) = Served::start(&command, &db, &[], &[])
        .get("/v1/sessions/s")
        .await;
    assert_eq!(
        summary["session"]["last_run_status"], "finished",
        "{summary}"
    );
}

/// The request id of the shutdown the server asks each session for when it stops.
const SHUTDOWN: &str = "server-stopping";

/// A command whose reply is "first ", a pause of `pause_ms`, then "never".
fn sleeping_command(dir: &std::path::Path, pause_ms: u64) -> String {
    scripted_command(
        dir,
        &format!(
            "turns:\n  - - text: \"first \"\n    - sleep_ms: {pause_ms}\n    - text: \"never\"\n"
        ),
    )
}

/// Creates session `s`, submits to it, sends SIGTERM once its first text streamed, and
/// returns the frames its stream had after that, up to the stream's end.
async fn terminated_mid_reply(served: &mut Served) -> Vec<StreamedFrame> {
    served.create("s").await;
    let mut events = served.events("s", None).await;
    served
        .request("s", r#"{"requestId":"slow","submit":{"prompt":"go"}}"#)
        .await;
    let mut seen = Vec::new();
    while !ui_events(&seen)
        .iter()
        .any(|(_, name, _)| name == "ChatTextPatch")
    {
        seen.push(events.next().await.expect("frames before the stop"));
    }
    let pid = served.child.id() as i32;
    assert_eq!(send_signal(pid, "TERM"), 0);
    let mut rest = Vec::new();
    while let Some(frame) = events.next().await {
        rest.push(frame);
    }
    rest
}

/// The request ids and statuses of the `done` frames among `frames`.
fn dones(frames: &[StreamedFrame]) -> Vec<(&str, &str)> {
    frames
        .iter()
        .filter_map(|f| Some((f.frame.line.request_id.as_str(), f.frame.done_status()?)))
        .collect()
}

/// Sends signal `name` with the `kill` program (no libc in tests); its exit status.
fn send_signal(pid: i32, name: &str) -> i32 {
    std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

#[tokio::test]
async fn a_session_another_process_writes_is_busy_to_writes_and_streams_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(&echo_command(), &db, &[], &[]);
    served.create("s").await;
    // A stdin-RPC process holds the session's lease while it runs.
    let mut holder = reel_tests::reel(&[
        "run-command",
        &echo_command(),
        "--rpc",
        "--stdin-rpc",
        "--session-id",
        "s",
        "--resume",
        "--timeline-db",
        db.to_str().unwrap(),
    ])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut hello = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut hello).unwrap();
    assert!(hello.contains("hello"), "{hello}");
    let (status, answer) = served
        .post("/v1/sessions/s/requests", r#"{"submit":{"prompt":"hi"}}"#)
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("session_busy")),
        "{answer}"
    );
    // Its event stream is served all the same, from the database as the holder commits.
    let mut events = served.events("s", Some("1")).await;
    assert!(events.next().await.unwrap().frame.text.contains("hello"));
    let line = "{\"requestId\":\"r1\",\"submit\":{\"prompt\":\"written elsewhere\"}}\n";
    std::io::Write::write_all(holder.stdin.as_mut().unwrap(), line.as_bytes()).unwrap();
    let mut followed = Vec::new();
    while !followed
        .iter()
        .any(|f: &StreamedFrame| f.frame.ui_name() == Some("ChatRunFinished"))
    {
        followed.push(events.next().await.expect("the holder's run streams"));
    }
    assert_eq!(text_of(&followed), "written elsewhere");
    assert!(followed.iter().all(|f| f.frame.line.request_id.is_empty()));
    // Once it is gone, the server takes the session.
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert_eq!(served.reply("s", "mine now").await, "mine now");
}

#[tokio::test]
async fn a_shutdown_request_unloads_the_session_and_ends_its_streams() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    let mut events = served.events("s", None).await;
    served
        .request("s", r#"{"requestId":"bye","shutdown":{}}"#)
        .await;
    let frames = events.until_done("bye").await;
    assert_eq!(frames.last().unwrap().frame.done_status(), Some("shutdown"));
    assert!(
        events.next().await.is_none(),
        "the stream ends with the session"
    );
    // The next request loads it again.
    assert_eq!(served.reply("s", "back again").await, "back again");
}
