//! `GET /metrics` of a real `reel serve`: what is loaded, running and subscribed now, the
//! events appended, and the request latencies by route, in the Prometheus text format.

use reel_tests::{
    scripted_command,
    served::{Served, ui_events},
};

#[tokio::test]
async fn metrics_count_what_the_server_holds_and_did() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(
        dir.path(),
        "turns:\n  - - text: \"quick\"\n  - - text: \"slow \"\n    - sleep_ms: 60000\n",
    );
    let served = Served::start(&command, &dir.path().join("t.db"), &[], &[]);
    let before = metrics(&served).await;
    assert_eq!(value(&before, "reel_sessions_loaded"), 0.0, "{before}");
    assert_eq!(
        value(&before, "reel_events_appended_total"),
        0.0,
        "{before}"
    );

    served.create("s1").await;
    served.create("s2").await;
    assert_eq!(served.reply("s1", "go").await, "quick");
    let (_, summary) = served.get("/v1/sessions/s1").await;
    let appended = summary["session"]["events"].as_f64().unwrap();

    // A run going, with two subscribers watching it.
    let mut first = served.events("s1", None).await;
    let mut second = served.events("s1", None).await;
    served
        .request("s1", r#"{"submit":{"prompt":"again"}}"#)
        .await;
    for events in [&mut first, &mut second] {
        let started = |frame| {
            ui_events(&[frame])
                .iter()
                .any(|(_, n, _)| n == "ChatTextPatch")
        };
        while !started(events.next().await.expect("the run's frames")) {}
    }
    let now = metrics(&served).await;
    assert_eq!(value(&now, "reel_sessions_loaded"), 1.0, "{now}");
    assert_eq!(value(&now, "reel_runs_active"), 1.0, "{now}");
    assert_eq!(value(&now, "reel_subscribers"), 2.0, "{now}");
    assert!(
        value(&now, "reel_events_appended_total") > appended,
        "{now}"
    );
    let posted = r#"reel_http_request_duration_seconds_count{method="POST",route="/v1/sessions/{id}/requests",status="202"}"#;
    assert_eq!(value(&now, posted), 2.0, "{now}");
    let created = r#"reel_http_request_duration_seconds_count{method="POST",route="/v1/sessions",status="201"}"#;
    assert_eq!(value(&now, created), 2.0, "{now}");
    assert!(now.contains(r#"route="/v1/sessions/{id}/events""#), "{now}");
    assert!(now.trim_end().ends_with("# EOF"), "{now}");
}

#[tokio::test]
async fn metrics_need_the_token_too() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &reel_tests::served::echo_command(),
        &dir.path().join("t.db"),
        &["--token-env", "REEL_TEST_TOKEN"],
        &[("REEL_TEST_TOKEN", "sesame")],
    );
    let (status, body) = served.get("/metrics").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let response = served
        .client
        .get(served.url("/metrics"))
        .bearer_auth("sesame")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("reel_sessions_loaded")
    );
}

async fn metrics(served: &Served) -> String {
    let (status, kind, text) = served.get_text("/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    text
}

/// The value of the sample named exactly `sample` (name and labels).
fn value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample} in\n{text}"))
}
