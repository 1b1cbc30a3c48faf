//! Scale-out: two `reel serve` nodes on one PostgreSQL database. A session is written by the
//! node holding its lease; a write posted to the other node is forwarded to it; any node
//! streams the session from the database (LISTEN/NOTIFY); and when the writer is killed -9,
//! the next write on the other node takes the session over, closes the interrupted run as a
//! resume does, and goes on gap-free. A WebSocket opened on the other node is piped to the
//! writer.

use std::time::{Duration, Instant};

use reel_tests::{
    TimelineDb, free_port, scripted_command,
    served::{Served, StreamedFrame, text_of},
    tls_proxy::TlsProxy,
};

const SCRIPT: &str = r#"turns:
  - - text: "first reply"
  - - text: "second reply"
  - - text: "over the socket"
  - - repeat: {times: 500, steps: [{text: "slow "}, {sleep_ms: 20}]}
  - - text: "after the takeover"
"#;

fn submit(prompt: &str) -> String {
    serde_json::json!({ "submit": { "prompt": prompt } }).to_string()
}

/// Frames until the `count`th `ChatRunFinished`.
async fn until_runs_finished(
    events: &mut reel_tests::served::Events,
    count: usize,
) -> Vec<StreamedFrame> {
    let mut frames = Vec::new();
    let mut finished = 0;
    while finished < count {
        let frame = events
            .next()
            .await
            .expect("the stream goes on until the run finishes");
        if frame.frame.ui_name() == Some("ChatRunFinished") {
            finished += 1;
        }
        frames.push(frame);
    }
    frames
}

#[tokio::test]
async fn a_write_is_forwarded_to_the_writer_and_a_killed_writer_is_taken_over() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), SCRIPT);
    let mut a = Served::start_node(&command, &schema.dsn, free_port());
    let b = Served::start_node(&command, &schema.dsn, free_port());

    // Any node creates; the first to write holds the lease from then on.
    b.create("s").await;
    assert_eq!(a.reply("s", "one").await, "first reply");

    // B is not the writer: its stream follows the database, and its write goes to A.
    let mut on_b = b.events("s", Some("1")).await;
    let mut on_a = a.events("s", None).await;
    let rid = b.request("s", &submit("two")).await;
    let answered_by_a = on_a.until_done(&rid).await;
    assert_eq!(text_of(&answered_by_a), "second reply");
    let followed = until_runs_finished(&mut on_b, 2).await;
    let first_run_end = followed
        .iter()
        .position(|f| f.frame.ui_name() == Some("ChatRunFinished"))
        .unwrap();
    assert_eq!(
        text_of(&followed[first_run_end..]),
        "second reply",
        "B streams the run A wrote"
    );

    // A WebSocket opened on B is piped to A: its request runs there, its done comes back.
    let mut socket = b.websocket("/v1/sessions/s/ws?after=1").await;
    socket
        .send_text(r#"{"requestId":"ws1","submit":{"prompt":"socket"}}"#)
        .await;
    let over_socket = socket.until_done("ws1").await;
    assert_eq!(over_socket.last().unwrap().done_status(), Some("ok"));
    assert!(
        over_socket
            .iter()
            .any(|f| f.text.contains("over the socket")),
        "{over_socket:?}"
    );
    socket.close().await;
    assert_eq!(text_of(&on_a.until_done("ws1").await), "over the socket");

    // A is killed in the middle of a reply, once its start is stored: B's stream follows the
    // database, so a delta of it there is committed. (A model call does not wait for the
    // commit: a run killed before anything of it was stored leaves nothing to close.)
    let slow = a.request("s", &submit("three")).await;
    let mut after = Vec::new();
    let mut socket_run_finished = false;
    loop {
        let frame = on_b.next().await.expect("B streams the slow reply");
        assert_ne!(frame.frame.done_status(), Some("ok"), "{slow} ended early");
        let name = frame.frame.ui_name().map(str::to_owned);
        after.push(frame);
        match name.as_deref() {
            Some("ChatRunFinished") => socket_run_finished = true,
            Some("ChatTextPatch") if socket_run_finished => break,
            _ => {}
        }
    }
    a.kill();

    // The next write on B takes the session over once A's connection (and lock) is gone.
    let started = Instant::now();
    let taken = loop {
        let (status, answer) = b.post("/v1/sessions/s/requests", &submit("four")).await;
        if status == 202 {
            break answer["requestId"].as_str().unwrap().to_owned();
        }
        // Until PostgreSQL has seen A's connection close, B forwards to A and A is gone.
        assert!(
            matches!(status, 409 | 502),
            "while the lock goes: {status} {answer}"
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // B's stream: the socket's run, the interrupted one, and the one after the takeover.
    after.extend(until_runs_finished(&mut on_b, 1).await);
    let names: Vec<&str> = after.iter().filter_map(|f| f.frame.ui_name()).collect();
    assert!(
        names.contains(&"ChatRunFailed"),
        "the interrupted run is closed: {names:?}"
    );
    assert!(text_of(&after).ends_with("after the takeover"), "{taken}");

    // Gap-free: every ordinal once, in the database and on B's stream.
    let dsn = schema.dsn.clone();
    let stored = tokio::task::spawn_blocking(move || TimelineDb::connect(&dsn).events("s"))
        .await
        .unwrap();
    let ordinals: Vec<u64> = stored.iter().map(|e| e.ordinal).collect();
    assert_eq!(ordinals, (1..=ordinals.len() as u64).collect::<Vec<_>>());
    let mut streamed: Vec<u64> = followed
        .iter()
        .chain(&after)
        .filter_map(|f| f.id.split('.').next()?.parse().ok())
        .collect();
    let count = streamed.len();
    streamed.dedup();
    assert!(streamed.windows(2).all(|w| w[0] < w[1]), "{streamed:?}");
    assert_eq!(
        streamed,
        (2..=*ordinals.last().unwrap()).collect::<Vec<_>>(),
        "B's stream holds every event after its cursor ({count} frames)"
    );
}

/// A server whose database connection ends (a PostgreSQL restart, a network failure, a
/// `--steal-lease`) connects again: what it was writing stops with a storage error, and the
/// next use loads the session on a new connection and goes on gap-free.
#[tokio::test]
async fn a_server_whose_connection_ends_connects_again() {
    use sqlx::Connection;
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    // The turns too: their shared connection ends as well and must come back.
    let served =
        Served::start_postgres_with_turns(&reel_tests::served::echo_command(), &schema.dsn);
    served.create("r").await;
    assert_eq!(served.reply("r", "before").await, "before");

    let mut admin = sqlx::PgConnection::connect(&schema.dsn).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(format!("reel/{}", served.child.id()))
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ended.is_empty() && ended.iter().all(|e| *e), "{ended:?}");

    // The loaded session finds its connection gone when it next writes; a later request
    // loads it again on a new one.
    let mut replied = None;
    for attempt in 0..5 {
        let mut events = served.events("r", None).await;
        let (status, answer) = served
            .post("/v1/sessions/r/requests", &submit("after"))
            .await;
        if status == 202 {
            let rid = answer["requestId"].as_str().unwrap();
            let frames = events.until_done(rid).await;
            if frames.last().unwrap().frame.done_status() == Some("ok") {
                replied = Some(text_of(&frames));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
    }
    assert_eq!(replied.as_deref(), Some("after"));
    let dsn = schema.dsn.clone();
    let (stored, turns) = tokio::task::spawn_blocking(move || {
        let mut db = TimelineDb::connect(&dsn);
        (db.events("r"), db.turns("r"))
    })
    .await
    .unwrap();
    let ordinals: Vec<u64> = stored.iter().map(|e| e.ordinal).collect();
    assert_eq!(ordinals, (1..=ordinals.len() as u64).collect::<Vec<_>>());
    // The run after the reconnection has its turn, written on the turns' new connection.
    let last = turns.last().expect("turns");
    assert_eq!(last.1, *ordinals.last().unwrap(), "{turns:?}");
    assert!(last.2.to_string().contains("after"), "{}", last.2);
}

/// A writer behind TLS (a proxy terminating `https://` in front of it, as a load balancer
/// would): the other node forwards a write to it over HTTPS and pipes a WebSocket to it over
/// `wss://`, trusting its certificate through `SSL_CERT_FILE`.
#[tokio::test]
async fn a_writer_behind_https_is_reached_for_writes_and_websockets() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), SCRIPT);
    let port = free_port();
    let proxy = TlsProxy::start(port);
    let writer = Served::start_node_at(&command, &schema.dsn, port, &proxy.url(), &[]);
    let certificate = proxy.certificate.to_str().unwrap().to_owned();
    let other_port = free_port();
    let other = Served::start_node_at(
        &command,
        &schema.dsn,
        other_port,
        &format!("http://127.0.0.1:{other_port}"),
        &[("SSL_CERT_FILE", &certificate)],
    );
    writer.create("t").await;
    assert_eq!(writer.reply("t", "one").await, "first reply");

    // A write posted to the other node reaches the writer through the proxy.
    let mut on_writer = writer.events("t", None).await;
    let rid = other.request("t", &submit("two")).await;
    assert_eq!(text_of(&on_writer.until_done(&rid).await), "second reply");

    // So does a WebSocket: its request runs on the writer, its done comes back.
    let mut socket = other.websocket("/v1/sessions/t/ws?after=1").await;
    socket
        .send_text(r#"{"requestId":"wss1","submit":{"prompt":"socket"}}"#)
        .await;
    let over_socket = socket.until_done("wss1").await;
    assert_eq!(over_socket.last().unwrap().done_status(), Some("ok"));
    assert!(
        over_socket
            .iter()
            .any(|f| f.text.contains("over the socket")),
        "{over_socket:?}"
    );
    socket.close().await;
}

#[tokio::test]
async fn nodes_forward_with_their_cluster_token_and_ignore_forged_node_rows() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = scripted_command(dir.path(), SCRIPT);
    let tokens = ["--token-env", "REEL_T", "--cluster-token-env", "REEL_C"];
    let env = [("REEL_T", "client-secret"), ("REEL_C", "cluster-secret")];

    // A node with a token needs the cluster's, so that it never hands on a client's.
    let refused = reel_tests::run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--command",
        &command,
        "--timeline-dsn",
        &schema.dsn,
        "--public-url",
        "http://127.0.0.1:1",
        "--token-env",
        "HOME",
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--cluster-token-env"), "{stderr}");

    let a_port = free_port();
    let a = Served::start_node_with(&command, &schema.dsn, a_port, &tokens, &env)
        .with_token("client-secret");
    let b = Served::start_node_with(&command, &schema.dsn, free_port(), &tokens, &env)
        .with_token("client-secret");
    a.create("s").await;
    assert_eq!(a.reply("s", "one").await, "first reply");

    // Rows nobody should trust: A's server process with an attacker's URL and a heartbeat an
    // hour ahead, and one a second ahead whose URL is not http(s).
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    attacker.set_nonblocking(true).unwrap();
    let trap = format!("http://127.0.0.1:{}", attacker.local_addr().unwrap().port());
    let now = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
    schema.execute(&format!(
        "INSERT INTO serve_nodes (node_id, public_url, backend_pid, started_at, heartbeat_at) \
         SELECT 'forged-future', '{trap}', backend_pid, 0, {now} + 3600000 FROM serve_nodes \
         WHERE public_url = 'http://127.0.0.1:{a_port}'; \
         INSERT INTO serve_nodes (node_id, public_url, backend_pid, started_at, heartbeat_at) \
         SELECT 'forged-scheme', 'gopher://127.0.0.1:70', backend_pid, 0, {now} + 1000 FROM serve_nodes \
         WHERE public_url = 'http://127.0.0.1:{a_port}'"
    ));

    // B forwards to A, with the cluster's token: A answers it, its run streams on A.
    let mut on_a = a.events("s", None).await;
    let rid = b.request("s", &submit("two")).await;
    assert_eq!(text_of(&on_a.until_done(&rid).await), "second reply");
    assert!(
        attacker.accept().is_err(),
        "a forged node row got a forwarded request"
    );

    // A takes the cluster token on forwarded requests only, and only it there.
    let post = |token: &'static str, forwarded: bool| {
        let mut request = reqwest::Client::new()
            .post(a.url("/v1/sessions/s/requests"))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"))
            .body(submit("x"));
        if forwarded {
            request = request.header("reel-forwarded-from", "reel serve");
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post("cluster-secret", false).await, 401);
    assert_eq!(post("client-secret", true).await, 401);
    assert_eq!(post("cluster-secret", true).await, 202);
}
