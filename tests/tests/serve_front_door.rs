//! `reel serve`'s front door against what any web page its user visits can send to a server on
//! 127.0.0.1: cross-site "simple" POSTs, a foreign Origin, `Sec-Fetch-Site`, a WebSocket from
//! another origin, a rebound DNS name in `Host`; and the token's scheme in any case, and a
//! refused create that must leave the loaded session's lease alone; and a real page of another
//! origin in headless Chromium (Playwright) that tries all of it.

use reel_tests::{
    PageDriver, reel,
    served::{Served, echo_command},
};
use serde_json::Value;

/// POSTs `body` to `path` with `headers`; the status and the JSON answer.
async fn post_with(
    served: &Served,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = served.client.post(served.url(path)).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    answer(request.send().await.expect("the server answers")).await
}

async fn get_with(served: &Served, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = served.client.get(served.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    answer(request.send().await.expect("the server answers")).await
}

async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn session_ids(served: &Served) -> Vec<String> {
    let (status, page) = served.get("/v1/sessions").await;
    assert_eq!(status, 200, "{page}");
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_page_of_another_site_can_neither_create_a_session_nor_run_a_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--allow-origin", "http://localhost:3000"],
        &[],
    );
    let own = served.base.clone();
    served.create("s").await;

    // "Simple" requests a browser sends cross-site without asking first.
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, body) = post_with(
            &served,
            "/v1/sessions",
            r#"{"id":"evil"}"#,
            &[("content-type", kind)],
        )
        .await;
        assert_eq!(status, 415, "{kind}: {body}");
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
        let (status, _) = post_with(
            &served,
            "/v1/sessions/s/requests",
            r#"{"submit":{"prompt":"rm -rf"}}"#,
            &[("content-type", kind)],
        )
        .await;
        assert_eq!(status, 415, "{kind}");
    }
    let (status, _) = post_with(&served, "/v1/sessions", r#"{"id":"evil"}"#, &[]).await;
    assert_eq!(status, 415, "a body without a type");

    // JSON from a foreign origin: refused, whatever the route.
    let json = ("content-type", "application/json");
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1:1",
        "http://localhost:3001",
    ] {
        let (status, body) = post_with(
            &served,
            "/v1/sessions",
            r#"{"id":"evil"}"#,
            &[json, ("origin", origin)],
        )
        .await;
        assert_eq!(status, 403, "{origin}: {body}");
        assert_eq!(body["error"]["code"], "forbidden_origin", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--allow-origin")
        );
        let (status, _) = post_with(
            &served,
            "/v1/sessions/s/requests",
            r#"{"submit":{"prompt":"rm -rf"}}"#,
            &[json, ("origin", origin)],
        )
        .await;
        assert_eq!(status, 403, "{origin}");
        let (status, _) = get_with(&served, "/v1/sessions/s", &[("origin", origin)]).await;
        assert_eq!(status, 403, "{origin}");
    }
    // No Origin, but the browser says another site sent it.
    for site in ["cross-site", "same-site"] {
        let (status, _) = get_with(&served, "/v1/sessions", &[("sec-fetch-site", site)]).await;
        assert_eq!(status, 403, "{site}");
    }
    // Nothing was created, nothing ran.
    assert_eq!(session_ids(&served).await, ["s"]);
    let (_, view) = served.get("/v1/sessions/s").await;
    assert_eq!(view["session"]["events"], 1, "{view}");

    // The server's own page, an allowed origin, and programs (no Origin) are let in.
    for (id, headers) in [
        (
            "own",
            vec![
                json,
                ("origin", own.as_str()),
                ("sec-fetch-site", "same-origin"),
            ],
        ),
        ("allowed", vec![json, ("origin", "http://localhost:3000")]),
        ("program", vec![json]),
    ] {
        let body = format!(r#"{{"id":"{id}"}}"#);
        let (status, created) = post_with(&served, "/v1/sessions", &body, &headers).await;
        assert_eq!(status, 201, "{id}: {created}");
    }
    let (status, _) = post_with(&served, "/v1/sessions", "", &[]).await;
    assert_eq!(status, 201, "no body and no type: a program's empty POST");
    let (status, _) = get_with(
        &served,
        "/v1/sessions",
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(status, 200);
    // The page itself is served to a link from anywhere.
    let (status, _) = get_with(&served, "/", &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_websocket_from_another_origin_is_refused_before_it_opens() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    match served
        .websocket_from("/v1/sessions/s/ws", "http://evil.example")
        .await
    {
        Err((status, body)) => {
            assert_eq!(status, 403, "{body}");
            assert!(body.contains("forbidden_origin"), "{body}");
        }
        Ok(_) => panic!("a foreign origin's WebSocket opened"),
    }
    // The server's own page opens one, and reads the session.
    let Ok(mut socket) = served
        .websocket_from("/v1/sessions/s/ws", &served.base)
        .await
    else {
        panic!("the page's own WebSocket was refused");
    };
    let hello = socket.next_frame().await;
    assert!(hello.text.contains("hello"), "{hello:?}");
}

#[tokio::test]
async fn a_rebound_name_in_host_is_not_answered() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--allow-host", "reel.internal"],
        &[],
    );
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    for host in [
        "attacker.example",
        "attacker.example:80",
        "localhost.attacker.example",
        "10.1.2.3",
    ] {
        for path in ["/v1/sessions", "/healthz", "/"] {
            let (status, body) = get_with(&served, path, &[("host", host)]).await;
            assert_eq!(status, 421, "{host} {path}: {body}");
            if path != "/" {
                assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("--allow-host")
                );
            }
        }
    }
    let (status, _) = post_with(
        &served,
        "/v1/sessions",
        r#"{"id":"evil"}"#,
        &[
            ("content-type", "application/json"),
            ("host", "attacker.example"),
        ],
    )
    .await;
    assert_eq!(status, 421);
    assert!(session_ids(&served).await.is_empty());
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LOCALHOST".to_owned(),
        format!("[::1]:{port}"),
        "reel.internal".to_owned(),
    ] {
        let (status, _) = get_with(&served, "/v1/sessions", &[("host", &host)]).await;
        assert_eq!(status, 200, "{host}");
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--token-env", "REEL_TEST_TOKEN"],
        &[("REEL_TEST_TOKEN", "s3cret")],
    );
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let value = format!("{scheme} s3cret");
        let (status, body) = get_with(&served, "/v1/sessions", &[("authorization", &value)]).await;
        assert_eq!(status, 200, "{scheme}: {body}");
    }
    for value in ["Basic s3cret", "Bearer wrong", "Bearers3cret"] {
        let (status, _) = get_with(&served, "/v1/sessions", &[("authorization", value)]).await;
        assert_eq!(status, 401, "{value}");
    }
}

#[tokio::test]
async fn a_refused_create_of_a_loaded_session_leaves_its_lease_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(&echo_command(), &db, &[], &[]);
    served.create("s").await;
    assert_eq!(served.reply("s", "one").await, "one");
    // The id is taken: 409, and the loaded session keeps its lease.
    let (status, body) = served.post("/v1/sessions", r#"{"id":"s"}"#).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("session_exists"))
    );
    let other = reel(&[
        "run-command",
        &echo_command(),
        "--timeline-db",
        db.to_str().unwrap(),
        "--session-id",
        "s",
        "--resume",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success(),
        "another process wrote the loaded session: {stderr}"
    );
    assert!(stderr.contains("is open in another process"), "{stderr}");
    // The server goes on writing it.
    assert_eq!(served.reply("s", "two").await, "two");
}

#[tokio::test]
async fn a_page_of_another_origin_in_a_browser_runs_nothing() {
    let Some(driver) = PageDriver::ready() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("victim").await;
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    let seen = driver.run("cross_origin.py", &port, Vec::new()).await;
    assert_eq!(
        seen["websocket"], "error",
        "the foreign page's WebSocket opened: {seen}"
    );
    // Nothing was created, nothing ran.
    assert_eq!(session_ids(&served).await, ["victim"], "{seen}");
    let (_, view) = served.get("/v1/sessions/victim").await;
    assert_eq!(view["session"]["events"], 1, "a prompt ran: {view}");
}
