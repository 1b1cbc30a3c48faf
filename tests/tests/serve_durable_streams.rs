//! A session's stream as a Durable Streams stream (`GET`/`HEAD /v1/sessions/{id}/stream`), read
//! by the protocol's official TypeScript client (`@durable-streams/client`) and through a real
//! cache (Debian's nginx with `proxy_cache`), and the protocol's rules checked on the wire.

use std::time::Duration;

use reel_tests::{
    caching_proxy::CachingProxy,
    durable_streams_client::{Batch, StreamReader, frames, python_read},
    run_text, scripted_command,
    served::Served,
};
use serde_json::{Value, json};

/// A reply of 8,000 deltas: some 3 MB of frames, so a catch-up takes several chunks.
const LONG_REPLY: &str =
    "turns:\n  - - repeat: {times: 8000, steps: [{text: \"a delta of a long reply, \"}]}\n";

/// A reply of 400 deltas 10 ms apart: a run a reader can follow live, and be cut off in.
const SLOW_REPLY: &str =
    "turns:\n  - - repeat: {times: 400, steps: [{text: \"tick \"}, {sleep_ms: 10}]}\n";

/// The `uiEvent` frames of `reel export ID --format jsonl`: what the stream must equal.
fn exported(db: &std::path::Path, id: &str) -> Vec<Value> {
    let db = db.to_str().unwrap();
    let (status, stdout, stderr) =
        run_text(&["export", id, "--format", "jsonl", "--timeline-db", db]);
    assert_eq!(status, Some(0), "{stderr}");
    stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|frame| frame.get("uiEvent").is_some())
        .collect()
}

/// A server on a fresh SQLite database whose sessions play `script`; the folder holds both.
fn serve(script: &str) -> (tempfile::TempDir, std::path::PathBuf, Served) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(&scripted_command(dir.path(), script), &db, &[], &[]);
    (dir, db, served)
}

/// Waits until session `id` has `runs` runs and the last one ended.
async fn wait_for_runs(served: &Served, id: &str, runs: u64) {
    for _ in 0..3000 {
        let (_, body) = served.get(&format!("/v1/sessions/{id}")).await;
        let status = &body["session"]["last_run_status"];
        if body["session"]["runs"].as_u64() == Some(runs) && status != "running" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("session {id} never ended {runs} runs");
}

fn submit(prompt: &str) -> String {
    json!({"submit": {"prompt": prompt}}).to_string()
}

/// A reader of `url` with `live` from `offset`.
fn reader(
    url: &str,
    offset: Option<&str>,
    live: Value,
    until_finished: bool,
) -> Option<StreamReader> {
    let mut options = json!({"url": url, "live": live});
    if let Some(offset) = offset {
        options["offset"] = json!(offset);
    }
    if until_finished {
        options["until"] = json!({"name": "ChatRunFinished", "count": 1});
    }
    StreamReader::start(&options)
}

/// `got` equals `expected`, said briefly when not (a stream is thousands of frames).
#[track_caller]
fn assert_same(got: &[Value], expected: &[Value], what: &str) {
    let brief = |f: Option<&Value>| {
        f.map(|f| {
            (
                f["uiEvent"]["ordinal"].clone(),
                f["uiEvent"]["name"].clone(),
            )
        })
    };
    if let Some(at) = (0..got.len().max(expected.len())).find(|i| got.get(*i) != expected.get(*i)) {
        panic!(
            "{what}: {} frames, {} expected; first difference at {at}: {:?} instead of {:?}",
            got.len(),
            expected.len(),
            brief(got.get(at)),
            brief(expected.get(at))
        );
    }
}

/// Offsets that sort (as strings) in the order they came, never going back (an SSE reader's
/// batch that only says "up to date" repeats the offset before it).
fn assert_increasing(batches: &[Batch]) {
    let offsets: Vec<&str> = batches.iter().map(|b| b.offset.as_str()).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] <= w[1]),
        "offsets out of order: {offsets:?}"
    );
}

#[tokio::test]
async fn the_official_client_reads_a_finished_run_as_the_export_has_it() {
    let (_dir, db, served) = serve(LONG_REPLY);
    served.create("s").await;
    served.request("s", &submit("go")).await;
    wait_for_runs(&served, "s", 1).await;
    let url = served.url("/v1/sessions/s/stream");
    let Some(catch_up) = reader(&url, None, json!("catch-up"), false) else {
        return;
    };
    let batches = catch_up.all();
    let expected = exported(&db, "s");
    assert!(expected.len() > 8000, "{} frames", expected.len());
    assert!(batches.len() >= 3, "a catch-up of {} chunks", batches.len());
    assert_same(&frames(&batches), &expected, "catch-up");
    assert_increasing(&batches);
    let up_to_date: Vec<bool> = batches.iter().map(|b| b.up_to_date).collect();
    assert!(up_to_date.last() == Some(&true), "{up_to_date:?}");
    assert!(
        up_to_date[..up_to_date.len() - 1].iter().all(|u| !u),
        "Stream-Up-To-Date only at the tail: {up_to_date:?}"
    );
}

#[tokio::test]
async fn live_readers_get_every_frame_of_a_run_in_order_by_long_poll_and_by_sse() {
    let (_dir, db, served) = serve(SLOW_REPLY);
    served.create("s").await;
    let url = served.url("/v1/sessions/s/stream");
    let Some(mut long_poll) = reader(&url, None, json!("long-poll"), true) else {
        return;
    };
    let mut sse = reader(&url, None, json!("sse"), true).unwrap();
    // Each has caught up with the empty session: the run's frames reach them live.
    for reader in [&mut long_poll, &mut sse] {
        let first = reader.next_batch().unwrap();
        assert!(first.items.is_empty() && first.up_to_date, "{first:?}");
    }
    served.request("s", &submit("go")).await;
    let (long_polled, streamed) = (long_poll.all(), sse.all());
    wait_for_runs(&served, "s", 1).await;
    let expected = exported(&db, "s");
    assert!(expected.len() > 400);
    assert_same(&frames(&long_polled), &expected, "long-poll");
    assert_same(&frames(&streamed), &expected, "sse");
    assert!(long_polled.len() > 2, "the run came in several long-polls");
    assert_increasing(&long_polled);
    assert_increasing(&streamed);
}

#[tokio::test]
async fn an_offset_saved_mid_run_gets_exactly_the_rest_after_a_kill_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let command = scripted_command(dir.path(), SLOW_REPLY);
    let mut served = Served::start(&command, &db, &[], &[]);
    served.create("s").await;
    let url = served.url("/v1/sessions/s/stream");
    let Some(mut live) = reader(&url, Some("-1"), json!("long-poll"), true) else {
        return;
    };
    served.request("s", &submit("go")).await;
    let mut seen = Vec::new();
    while frames(&seen).len() < 100 {
        seen.push(live.next_batch().expect("the run goes on"));
    }
    let saved = seen.last().unwrap().offset.clone();
    live.kill();
    served.kill();
    let served = Served::start(&command, &db, &[], &[]);
    let url = served.url("/v1/sessions/s/stream");
    let rest = frames(
        &reader(&url, Some(&saved), json!("catch-up"), false)
            .unwrap()
            .all(),
    );
    let whole = frames(&reader(&url, None, json!("catch-up"), false).unwrap().all());
    let mut joined = frames(&seen);
    joined.extend(rest);
    assert_same(
        &joined,
        &whole,
        &format!("read before the kill, then on from {saved}"),
    );
    assert_same(&whole, &exported(&db, "s"), "after the restart");
}

/// The count of answered stream reads in reel's own metrics.
async fn stream_reads(served: &Served) -> u64 {
    let (_, _, metrics) = served.get_text("/metrics").await;
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("reel_http_request_duration_seconds_count")
                && line.contains(r#"route="/v1/sessions/{id}/stream""#)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_cache_in_front_serves_a_finished_range_again_and_passes_the_live_tail_at_once() {
    let (_dir, db, served) = serve(SLOW_REPLY);
    let Some(proxy) = CachingProxy::start(&served.base) else {
        return;
    };
    served.create("done").await;
    served.request("done", &submit("go")).await;
    wait_for_runs(&served, "done", 1).await;
    let url = proxy.url("/v1/sessions/done/stream");
    let Some(first) = reader(&url, None, json!("catch-up"), false) else {
        return;
    };
    let first = frames(&first.all());
    assert_same(&first, &exported(&db, "done"), "through the cache");
    let asked = stream_reads(&served).await;
    let second = frames(&reader(&url, None, json!("catch-up"), false).unwrap().all());
    assert_same(&second, &first, "from the cache");
    assert_eq!(
        stream_reads(&served).await,
        asked,
        "the second read never reached reel"
    );
    let again = reqwest::get(format!("{url}?offset=-1")).await.unwrap();
    assert_eq!(again.headers()["x-cache-status"], "HIT");

    // The tail is never kept: a live reader through the cache sees a new run as it happens.
    served.create("live").await;
    let url = proxy.url("/v1/sessions/live/stream");
    let mut long_poll = reader(&url, None, json!("long-poll"), true).unwrap();
    let mut sse = reader(&url, None, json!("sse"), true).unwrap();
    for reader in [&mut long_poll, &mut sse] {
        assert!(reader.next_batch().unwrap().up_to_date);
    }
    served.request("live", &submit("go")).await;
    let (long_polled, streamed) = (frames(&long_poll.all()), frames(&sse.all()));
    wait_for_runs(&served, "live", 1).await;
    assert_same(
        &long_polled,
        &exported(&db, "live"),
        "long-poll through the cache",
    );
    assert_same(&streamed, &long_polled, "sse through the cache");
}

#[tokio::test]
async fn the_python_client_reads_it_too() {
    let (_dir, db, served) = serve(SLOW_REPLY);
    served.create("s").await;
    served.request("s", &submit("go")).await;
    wait_for_runs(&served, "s", 1).await;
    let url = served.url("/v1/sessions/s/stream");
    let Some((caught_up, tail)) = python_read(&url, "catch-up", None) else {
        return;
    };
    assert_same(&caught_up, &exported(&db, "s"), "Python catch-up");
    // Live, from the tail, while a second run streams.
    let live = {
        let url = url.clone();
        std::thread::spawn(move || python_read(&url, "sse", Some(&tail)).unwrap())
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    served.request("s", &submit("again")).await;
    let (streamed, _) = tokio::task::spawn_blocking(move || live.join().unwrap())
        .await
        .unwrap();
    wait_for_runs(&served, "s", 2).await;
    let whole = exported(&db, "s");
    assert_same(&streamed, &whole[caught_up.len()..], "Python SSE");
}

/// A GET of `url` with `headers`: status, response headers, body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The events of a raw SSE body: (event, data).
fn sse_events(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = Some(name.to_owned());
                } else if let Some(more) = line.strip_prefix("data: ") {
                    data.push_str(more);
                }
            }
            Some((event?, data))
        })
        .collect()
}

#[tokio::test]
async fn the_protocols_rules_hold_on_the_wire() {
    let (_dir, db, served) = serve(LONG_REPLY);
    served.create("s").await;
    served.request("s", &submit("go")).await;
    wait_for_runs(&served, "s", 1).await;
    let url = served.url("/v1/sessions/s/stream");

    // Catch-up a chunk at a time: offsets that sort, `Stream-Up-To-Date` only on the last,
    // every chunk cacheable and named by its ETag.
    let (mut offset, mut chunks, mut read) = ("-1".to_owned(), Vec::new(), Vec::new());
    loop {
        let (status, headers, body) = get(&format!("{url}?offset={offset}"), &[]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert!(
            header(&headers, "cache-control")
                .unwrap()
                .starts_with("public, max-age=")
        );
        assert!(header(&headers, "etag").is_some());
        let next = header(&headers, "stream-next-offset").unwrap().to_owned();
        assert!(next > offset || offset == "-1", "{next} after {offset}");
        read.extend(serde_json::from_str::<Vec<Value>>(&body).unwrap());
        let up_to_date = header(&headers, "stream-up-to-date") == Some("true");
        chunks.push((offset.clone(), up_to_date));
        offset = next;
        if up_to_date {
            break;
        }
    }
    assert!(chunks.len() >= 3, "{chunks:?}");
    assert_same(&read, &exported(&db, "s"), "chunk by chunk");
    let tail = offset.clone();
    let (_, summary) = served.get("/v1/sessions/s").await;
    assert_eq!(
        tail,
        format!("{:020}", summary["session"]["events"].as_u64().unwrap())
    );

    // The same range again with its ETag: 304, no body.
    let (_, headers, _) = get(&format!("{url}?offset=-1"), &[]).await;
    let etag = header(&headers, "etag").unwrap().to_owned();
    let (status, _, body) = get(&format!("{url}?offset=-1"), &[("if-none-match", &etag)]).await;
    assert_eq!((status, body.as_str()), (304, ""));
    let (status, _, _) = get(
        &format!("{url}?offset=-1"),
        &[("if-none-match", "\"other\"")],
    )
    .await;
    assert_eq!(status, 200);

    // At the tail: nothing, up to date, never kept by a cache; `now` is the tail.
    for at in [tail.as_str(), "now"] {
        let (status, headers, body) = get(&format!("{url}?offset={at}"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "[]"), "{at}");
        assert_eq!(header(&headers, "stream-next-offset"), Some(tail.as_str()));
        assert_eq!(header(&headers, "stream-up-to-date"), Some("true"));
        assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    }

    // A long-poll at the tail: 204 after its timeout, with the headers and a cursor; a cursor
    // echoed back comes back larger.
    let (status, headers, _) = get(
        &format!("{url}?offset={tail}&live=long-poll&timeout=1"),
        &[],
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(header(&headers, "stream-next-offset"), Some(tail.as_str()));
    assert_eq!(header(&headers, "stream-up-to-date"), Some("true"));
    assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    let cursor: u64 = header(&headers, "stream-cursor").unwrap().parse().unwrap();
    let (_, headers, _) = get(
        &format!("{url}?offset=now&live=long-poll&timeout=1&cursor={cursor}"),
        &[],
    )
    .await;
    let next_cursor: u64 = header(&headers, "stream-cursor").unwrap().parse().unwrap();
    assert!(next_cursor > cursor, "{next_cursor} after {cursor}");
    // Behind the tail, a long-poll answers at once with the events.
    let (status, headers, _) = get(&format!("{url}?offset=-1&live=long-poll"), &[]).await;
    assert_eq!(status, 200);
    assert!(header(&headers, "stream-cursor").is_some());

    // SSE: every data event followed by a control event; the data are the stream's frames.
    let (status, headers, body) = get_sse(&format!("{url}?offset=-1&live=sse")).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    let events = sse_events(&body);
    let mut streamed = Vec::new();
    for (at, (event, data)) in events.iter().enumerate() {
        if event == "data" {
            assert_eq!(
                events[at + 1].0,
                "control",
                "a control event after each data event"
            );
            streamed.extend(serde_json::from_str::<Vec<Value>>(data).unwrap());
        }
    }
    assert_same(&streamed, &read, "sse");
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["streamNextOffset"], tail.as_str());
    assert_eq!(last["upToDate"], true);
    assert!(last["streamCursor"].is_string());
    // From `now`: one control event at once, at the tail, up to date.
    let (_, _, body) = get_sse(&format!("{url}?offset=now&live=sse")).await;
    let first: Value = serde_json::from_str(&sse_events(&body)[0].1).unwrap();
    assert_eq!(first["streamNextOffset"], tail.as_str());
    assert_eq!(first["upToDate"], true);

    // HEAD: the tail, no body, never cached.
    let head = reqwest::Client::new().head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        header(head.headers(), "stream-next-offset"),
        Some(tail.as_str())
    );
    assert_eq!(header(head.headers(), "cache-control"), Some("no-store"));

    // Refused: malformed offsets, an offset past the tail, a live read without an offset, a
    // bad timeout or live mode; an unknown session is 404 for GET and HEAD.
    let past = format!("{:020}", summary["session"]["events"].as_u64().unwrap() + 1);
    for query in [
        "offset=abc",
        "offset=12",
        "offset=-2",
        "offset=000000000000000000001",
        &format!("offset={past}"),
        "live=long-poll",
        "offset=-1&live=long-poll&timeout=0",
        "offset=-1&live=forever",
    ] {
        let (status, _, body) = get(&format!("{url}?{query}"), &[]).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
    let missing = served.url("/v1/sessions/nobody/stream");
    assert_eq!(get(&missing, &[]).await.0, 404);
    let head = reqwest::Client::new().head(&missing).send().await.unwrap();
    assert_eq!(head.status(), 404);
}

/// The body of an SSE response read until its first `upToDate` control event.
async fn get_sse(url: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let mut response = reqwest::get(url).await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let mut body = String::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(30), response.chunk())
        .await
        .unwrap()
    {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
        if body.contains("\"upToDate\":true") && body.ends_with("\n\n") {
            break;
        }
    }
    (status, headers, body)
}

#[tokio::test]
async fn the_stream_needs_the_token_as_every_route_does() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let env = [("REEL_TEST_TOKEN", "secret")];
    let served = Served::start(
        &reel_tests::served::echo_command(),
        &db,
        &["--token-env", "REEL_TEST_TOKEN"],
        &env,
    )
    .with_token("secret");
    served.create("s").await;
    let url = served.url("/v1/sessions/s/stream");
    assert_eq!(get(&url, &[]).await.0, 401);
    assert_eq!(get(&url, &[("authorization", "Bearer wrong")]).await.0, 401);
    let head = reqwest::Client::new().head(&url).send().await.unwrap();
    assert_eq!(head.status(), 401);
    let (status, headers, body) = get(&url, &[("authorization", "Bearer secret")]).await;
    assert_eq!((status, body.as_str()), (200, "[]"));
    assert_eq!(header(&headers, "vary"), Some("Authorization"));
    let Some(reader) =
        StreamReader::start(&json!({"url": url, "token": "secret", "live": "catch-up"}))
    else {
        return;
    };
    assert_eq!(reader.all().len(), 1);
}

/// A session removed while readers wait at its tail: the long-poll ends with 404 (it does not
/// wait out its timeout), the SSE response ends, and the next read is 404.
#[tokio::test]
async fn a_removed_session_ends_its_readers_and_then_is_not_found() {
    let (_dir, db, served) = serve(SLOW_REPLY);
    served.create("s").await;
    let url = served.url("/v1/sessions/s/stream");
    let long_poll = tokio::spawn({
        let url = format!("{url}?offset=now&live=long-poll&timeout=30");
        async move {
            let started = std::time::Instant::now();
            let status = reqwest::get(url).await.unwrap().status().as_u16();
            (status, started.elapsed())
        }
    });
    let sse = tokio::spawn(get_sse_to_end(format!("{url}?offset=now&live=sse")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let db = db.to_str().unwrap().to_owned();
    let (status, _, stderr) =
        tokio::task::spawn_blocking(move || run_text(&["rm", "s", "--timeline-db", &db]))
            .await
            .unwrap();
    assert_eq!(status, Some(0), "{stderr}");
    let (status, took) = long_poll.await.unwrap();
    assert_eq!(status, 404);
    assert!(
        took < Duration::from_secs(20),
        "it ended with the session: {took:?}"
    );
    let body = tokio::time::timeout(Duration::from_secs(20), sse)
        .await
        .expect("the SSE response ends with the session")
        .unwrap();
    assert!(body.contains("event: control"), "{body}");
    assert_eq!(get(&url, &[]).await.0, 404);
}

/// The whole body of an SSE response, until the server ends it.
async fn get_sse_to_end(url: String) -> String {
    let mut response = reqwest::get(url).await.unwrap();
    let mut body = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    body
}
