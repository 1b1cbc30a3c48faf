//! `--sink http(s)://...`: frames POSTed to a real HTTP endpoint on 127.0.0.1, batched, in
//! order, signed as Standard Webhooks specify (checked here with an HMAC written from the
//! specification); an endpoint that fails for a while, one that is down and comes up, one that
//! stays down, one that refuses, and one so slow that the session must not wait for it.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
    sync::mpsc,
    time::Duration,
};

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    FrameLine, Spawned, assert_frames_with_the_log, free_port, parse_frames, reel, run,
    scripted_command,
    webhook_receiver::{Plan, Post, WebhookReceiver},
};
use sha2::Sha256;

/// How long a test waits for something that takes milliseconds when it works.
const PATIENCE: Duration = Duration::from_secs(60);

/// A reply of `deltas` text deltas.
fn long_reply(deltas: usize) -> String {
    format!("turns:\n  - - repeat: {{times: {deltas}, steps: [{{text: \"word \"}}]}}\n")
}

/// A reply that pauses for `pause_ms` in its middle, so a sink can fail while it runs.
fn reply_with_pause(pause_ms: u64) -> String {
    format!(
        "turns:\n  - - repeat: {{times: 50, steps: [{{text: \"word \"}}]}}\n    - sleep_ms: {pause_ms}\n    - text: end\n"
    )
}

/// The arguments of a one-shot run of `command` with frames on stdout and `sink`.
fn args<'a>(command: &'a str, sink: &'a str) -> [&'a str; 6] {
    ["run-command", command, "--output", "jsonl", "--sink", sink]
}

/// Every frame the endpoint took (answered 2xx), in the order it took them.
fn delivered(posts: &[Post]) -> Vec<FrameLine> {
    let mut body = Vec::new();
    for post in posts.iter().filter(|p| p.status < 300) {
        body.extend_from_slice(&post.body);
    }
    parse_frames(&body)
}

/// Checks that the endpoint got what stdout carried, the log's events besides, each once and
/// in order.
fn assert_delivered_once_in_order(posts: &[Post], stdout: &[u8]) {
    let events = assert_frames_with_the_log(&delivered(posts), &parse_frames(stdout));
    assert!(events > 10, "{events}");
}

/// Whether `post` carries a valid Standard Webhooks signature under `key`.
fn signed_with(post: &Post, key: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    let signed = [
        post.header("webhook-id").as_bytes(),
        post.header("webhook-timestamp").as_bytes(),
        &post.body,
    ]
    .join(&b'.');
    mac.update(&signed);
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    post.header("webhook-signature")
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(expected.as_str()))
}

#[test]
fn every_frame_arrives_once_in_order_batched_and_signed() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(1_000));
    let endpoint = WebhookReceiver::start(Plan::default());
    let key = b"a signing key of twenty-four".to_vec();
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(&key)
    );
    let sink = format!(
        "{}?channel=ops&secret_env=REEL_TEST_WEBHOOK_SECRET&batch=100",
        endpoint.url()
    );
    let output = reel(&args(&command, &sink))
        .env("REEL_TEST_WEBHOOK_SECRET", &secret)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let posts = endpoint.posts();
    assert_delivered_once_in_order(&posts, &output.stdout);
    // Batched: 1,000 deltas are far more frames than POSTs, and no POST runs far past its
    // batch of 100 frames (one fan-out batch of at most 128 events, a few frames each, may
    // top it up).
    assert!(posts.len() >= 10, "{} POSTs", posts.len());
    assert!(posts.len() < 1_000, "{} POSTs", posts.len());
    for post in &posts {
        let frames = parse_frames(&post.body).len();
        assert!(frames < 100 + 3 * 128, "{frames} frames in one POST");
        assert_eq!(post.header("content-type"), "application/x-ndjson");
        assert!(!post.header("reel-session").is_empty());
        assert!(signed_with(post, &key), "{:?}", post.headers);
    }
    let mut ids: Vec<&str> = posts.iter().map(|p| p.header("webhook-id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), posts.len(), "each batch has its own id");
    // The check above can fail: another key, or a changed body, is not signed.
    assert!(!signed_with(&posts[0], b"another key"));
    let mut changed = posts[0].clone();
    changed.body = format!("{}\n", String::from_utf8_lossy(&changed.body)).into();
    assert!(!signed_with(&changed, &key));
}

#[test]
fn batch_is_the_most_frames_a_post_holds() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(200));
    for batch in [1, 7] {
        let endpoint = WebhookReceiver::start(Plan::default());
        let uri = format!("{}?batch={batch}", endpoint.url());
        let output = run(&args(&command, &uri));
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let posts = endpoint.posts();
        let sizes: Vec<usize> = posts
            .iter()
            .map(|p| p.body.iter().filter(|&&b| b == b'\n').count())
            .collect();
        assert!(
            sizes.iter().all(|&n| (1..=batch).contains(&n)),
            "batch={batch}: {sizes:?}"
        );
        assert_delivered_once_in_order(&posts, &output.stdout);
    }
}

#[test]
fn failed_posts_are_retried_with_the_same_id_and_body() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(300));
    let endpoint = WebhookReceiver::start(Plan {
        first: vec![503, 500, 429],
        ..Plan::default()
    });
    let output = run(&args(&command, &endpoint.url()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let posts = endpoint.posts();
    assert_eq!(
        posts.iter().take(4).map(|p| p.status).collect::<Vec<_>>(),
        [503, 500, 429, 200]
    );
    for retry in &posts[1..4] {
        assert_eq!(retry.header("webhook-id"), posts[0].header("webhook-id"));
        assert_eq!(retry.body, posts[0].body);
    }
    assert_delivered_once_in_order(&posts, &output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("retrying"), "{stderr}");
}

#[test]
fn an_endpoint_that_comes_up_late_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(300));
    let port = free_port();
    let sink = format!("http://127.0.0.1:{port}/hook?retry_for=2m");
    let reel = Spawned::start(
        reel(&args(&command, &sink))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    // Connections are refused until the endpoint is up; the sink keeps retrying meanwhile.
    std::thread::sleep(Duration::from_millis(1_500));
    let endpoint = WebhookReceiver::start_on(port, Plan::default());
    let output = reel.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("retrying"),
        "the first POSTs failed: {stderr}"
    );
    assert_delivered_once_in_order(&endpoint.posts(), &output.stdout);
}

#[test]
fn an_endpoint_that_stays_down_is_sink_failed_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // The sink gives up after about a second; the reply is still running then.
    let command = scripted_command(dir.path(), &reply_with_pause(4_000));
    let endpoint = WebhookReceiver::start(Plan {
        then: 503,
        ..Plan::default()
    });
    let sink = format!("{}?retry_for=1s", endpoint.url());
    let output = run(&args(&command, &sink));
    let frames = parse_frames(&output.stdout);
    let failed = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(error) if error.code == "sink_failed" => Some(error.clone()),
        _ => None,
    });
    let failed = failed.expect("a sink_failed error frame");
    assert!(
        !failed.terminal && failed.message.contains("503") && failed.message.contains("gave up"),
        "{failed:?}"
    );
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    assert_eq!(output.status.code(), Some(1), "an output failed");
    // It retried, then stopped: a handful of attempts, never an endless loop.
    let posts = endpoint.posts();
    assert!((2..20).contains(&posts.len()), "{} POSTs", posts.len());
}

#[test]
fn an_endpoint_that_refuses_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &reply_with_pause(2_000));
    let endpoint = WebhookReceiver::start(Plan {
        then: 404,
        ..Plan::default()
    });
    let output = run(&args(&command, &endpoint.url()));
    let frames = parse_frames(&output.stdout);
    assert!(
        frames.iter().any(|f| matches!(f.frame(),
            Frame::Error(e) if e.code == "sink_failed" && e.message.contains("404"))),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    assert_eq!(endpoint.posts().len(), 1, "a 404 is not retried");
}

#[test]
fn a_redirect_is_never_followed_and_names_where_it_pointed() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &reply_with_pause(500));
    // The other server a redirect points at: it must receive nothing.
    let elsewhere = WebhookReceiver::start(Plan::default());
    for status in [307, 308, 302] {
        let endpoint = WebhookReceiver::start(Plan {
            then: status,
            location: Some(elsewhere.url()),
            ..Plan::default()
        });
        let output = run(&args(&command, &endpoint.url()));
        let frames = parse_frames(&output.stdout);
        let failed = frames.iter().find_map(|f| match f.frame() {
            Frame::Error(e) if e.code == "sink_failed" => Some(e.message.clone()),
            _ => None,
        });
        let failed = failed.unwrap_or_else(|| {
            panic!(
                "{status}: no sink_failed: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        assert!(failed.contains(&elsewhere.url()), "{status}: {failed}");
        assert_eq!(output.status.code(), Some(1), "{status}");
        assert_eq!(endpoint.posts().len(), 1, "{status}: one POST, not retried");
    }
    assert!(
        elsewhere.posts().is_empty(),
        "the redirect's target received frames"
    );
}

#[test]
fn a_slow_endpoint_does_not_hold_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(300));
    // Every POST waits until the test has seen the run's done on stdout: if the session
    // waited for the endpoint, done would never come.
    let endpoint = WebhookReceiver::start(Plan {
        held: true,
        ..Plan::default()
    });
    let mut reel = Spawned::start(reel(&args(&command, &endpoint.url())).stdout(Stdio::piped()));
    let stdout = reel.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut shown = String::new();
    loop {
        let line = received
            .recv_timeout(PATIENCE)
            .expect("done while the endpoint holds every POST");
        shown.push_str(&line);
        shown.push('\n');
        if line.contains("\"done\"") {
            break;
        }
    }
    assert!(endpoint.posts().is_empty(), "nothing was taken yet");
    endpoint.open();
    let status = reel.wait().unwrap();
    assert!(status.success());
    while let Ok(line) = received.recv_timeout(Duration::from_millis(100)) {
        shown.push_str(&line);
        shown.push('\n');
    }
    assert_delivered_once_in_order(&endpoint.posts(), shown.as_bytes());
}

#[test]
fn webhook_uris_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), &long_reply(5));
    for (uri, says) in [
        (
            "http://127.0.0.1:9/hook?secret_env=REEL_TEST_UNSET_SECRET",
            "REEL_TEST_UNSET_SECRET",
        ),
        ("http://127.0.0.1:9/hook?batch=lots", "batch"),
        ("https://", "not a URL"),
    ] {
        let output = run(&args(&command, uri));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{uri}: {stderr}");
        assert!(stderr.contains(says), "{uri}: {stderr}");
        let frames = parse_frames(&output.stdout);
        assert!(
            frames.iter().all(|f| f.ui_name() != Some("ChatRunStarted")),
            "{uri}: nothing ran"
        );
    }
}
