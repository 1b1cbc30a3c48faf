//! `reel serve` against clients that hold on without doing their part, over raw sockets: half
//! a request's head, nothing at all, a stream never read, with the server under a low file
//! descriptor limit; streams that are read keep working however long they last; SIGTERM does
//! not wait for stalled clients past the grace period; and never-reading subscribers of a
//! session with a snapshot of megabytes do not cost a copy of it each.

use std::time::{Duration, Instant};

use reel_tests::served::{Served, echo_command, text_of};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

fn address(served: &Served) -> std::net::SocketAddr {
    served.base.trim_start_matches("http://").parse().unwrap()
}

/// A connection whose receive buffer is small: once it stops reading, the server soon cannot
/// write to it.
async fn small_window(served: &Served) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(address(served)).await.unwrap()
}

/// Whether the server has closed `stream` (its read ends or fails) within `wait`.
async fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buffer = vec![0; 64 * 1024];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// The server's resident memory, in bytes.
fn resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// A prompt of `words` words of `letters` letters: the echoing command replies with it.
fn big_prompt(words: usize, letters: usize) -> String {
    let word = "x".repeat(letters);
    vec![word; words].join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_and_silent_connections_cannot_starve_a_server_with_few_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start_limited(&echo_command(), &dir.path().join("t.db"), &[], 256);
    let mut held = Vec::new();
    for at in 0..300 {
        let mut stream = TcpStream::connect(address(&served)).await.unwrap();
        // Half the attackers send half a request's head, the other half nothing.
        if at % 2 == 0 {
            let _ = stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .await;
        }
        held.push(stream);
    }
    // /healthz answers, busy (503) or not, instead of waiting for a free descriptor (while the
    // server tells the flood it is busy, a connection may also be closed unanswered).
    let probe = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        match probe.get(served.url("/healthz")).send().await {
            Ok(response) => break response.status().as_u16(),
            Err(error) if error.is_timeout() => panic!("/healthz did not answer: {error:?}"),
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("/healthz did not answer: {error:?}"),
        }
    };
    assert!(matches!(status, 200 | 503), "{status}");
    println!(
        "/healthz answered {status} {} ms after 300 stalled connections were opened",
        started.elapsed().as_millis()
    );
    // The stalled ones are closed (the head timeout), while their clients still hold them, and
    // /healthz is served again.
    let healthy = loop {
        match probe.get(served.url("/healthz")).send().await {
            Ok(response) if response.status() == 200 => break true,
            _ if started.elapsed() > Duration::from_secs(60) => break false,
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert!(healthy, "/healthz never answered 200 again");
    println!(
        "/healthz answered 200 {} ms after 300 stalled connections were opened",
        started.elapsed().as_millis()
    );
    let mut closed = 0;
    for stream in &mut held {
        closed += usize::from(closed_by_server(stream, Duration::from_secs(30)).await);
    }
    assert_eq!(
        closed,
        held.len(),
        "every stalled connection was closed by the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_get_503_and_streams_outlive_the_head_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--max-connections", "4"],
        &[],
    );
    served.create("s").await;
    // Two live streams (an SSE subscriber and a WebSocket) take two of the four connections.
    let mut events = served.events("s", None).await;
    let mut socket = served.websocket("/v1/sessions/s/ws").await;
    let mut stalled = Vec::new();
    for _ in 0..2 {
        stalled.push(TcpStream::connect(address(&served)).await.unwrap());
    }
    // The limit is reached: one more is told so, and closed.
    let mut over = TcpStream::connect(address(&served)).await.unwrap();
    over.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), over.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("server_busy") && answer.contains("--max-connections"),
        "{answer}"
    );
    // The silent ones are closed once the head timeout passes; the streams, busy with their
    // heartbeats, go on.
    for stream in &mut stalled {
        assert!(closed_by_server(stream, Duration::from_secs(30)).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rid = served
        .request("s", r#"{"submit":{"prompt":"still here"}}"#)
        .await;
    assert_eq!(text_of(&events.until_done(&rid).await), "still here");
    socket
        .send_text(r#"{"requestId":"w","submit":{"prompt":"and here"}}"#)
        .await;
    loop {
        let frame = socket.next_frame().await;
        if frame.line.request_id == "w" && frame.done_status().is_some() {
            assert_eq!(frame.done_status(), Some("ok"));
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_stalled_connections_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(
        &echo_command(),
        &dir.path().join("t.db"),
        &["--grace", "1s"],
        &[],
    );
    served.create("s").await;
    // A timeline of a few megabytes, so that a subscriber that never reads stalls the server's
    // writes to it.
    served.reply("s", &big_prompt(2_000, 1_000)).await;
    let mut never_reads = small_window(&served).await;
    never_reads
        .write_all(b"GET /v1/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut half_sent = TcpStream::connect(address(&served)).await.unwrap();
    half_sent
        .write_all(b"POST /v1/sessions HTTP/1.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = served.child.id();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    // It exits after the grace period, not when the clients let go (a stalled write is given
    // a minute, the head of a request ten seconds).
    let started = Instant::now();
    let status = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still running 30 s after SIGTERM with --grace 1s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    println!("exited {} ms after SIGTERM", started.elapsed().as_millis());
    drop((never_reads, half_sent));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_reading_subscribers_do_not_each_hold_a_copy_of_a_big_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    // About 10 MB of timeline: a 5 MB prompt and its echo.
    let prompt = big_prompt(5_000, 1_000);
    served.reply("s", &prompt).await;
    let (_, _, snapshot) = served.get_text("/v1/sessions/s").await;
    let snapshot_bytes = snapshot.len() as u64;
    assert!(snapshot_bytes > 9_000_000, "{snapshot_bytes}");
    let pid = served.child.id();
    // One subscriber first, so that the server's own buffers are counted before.
    let mut warm = small_window(&served).await;
    warm.write_all(b"GET /v1/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = resident(pid);
    let mut subscribers = vec![warm];
    for _ in 0..80 {
        let mut stream = small_window(&served).await;
        stream
            .write_all(b"GET /v1/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        subscribers.push(stream);
    }
    // Every one of them has been sent what the server could write to it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, _, metrics) = served.get_text("/metrics").await;
        let counted = metrics
            .lines()
            .find(|l| l.starts_with("reel_subscribers "))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or_default();
        if counted >= 81.0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = resident(pid);
    // They were sent the timeline (as far as their windows took it), and a reader gets it whole.
    let mut head = Vec::new();
    let mut buffer = vec![0; 16 * 1024];
    while !String::from_utf8_lossy(&head).contains("\"snapshot\"") && head.len() < 1 << 20 {
        let read = subscribers[40].read(&mut buffer).await.unwrap();
        assert!(read > 0, "the server closed a subscriber");
        head.extend_from_slice(&buffer[..read]);
    }
    assert!(String::from_utf8_lossy(&head).contains("\"snapshot\""));
    let mut reader = served.events("s", None).await;
    reader.next().await.expect("hello");
    let whole = reader.next().await.expect("the snapshot");
    assert!(
        whole.frame.text.len() as u64 > snapshot_bytes / 2,
        "{}",
        whole.frame.text.len()
    );
    let grown = after.saturating_sub(before);
    println!(
        "80 never-reading subscribers of a {snapshot_bytes}-byte snapshot: {} MiB more resident memory ({} KiB each)",
        grown / (1024 * 1024),
        grown / 80 / 1024
    );
    // A copy per subscriber would be 80 times the snapshot; what is left is a few of them at
    // most, whoever counts.
    assert!(
        grown < 4 * snapshot_bytes,
        "{grown} bytes more for 80 subscribers of a {snapshot_bytes}-byte snapshot"
    );
    drop(subscribers);
}
