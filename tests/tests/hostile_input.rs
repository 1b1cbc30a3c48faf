//! Broken and hostile request lines: each gets exactly one error frame with a clear code, the
//! process stays alive and the session is unharmed.

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{FrameLine, PeakRss, RpcClient, assert_request_scoped};

fn errors(frames: &[FrameLine]) -> Vec<(String, String)> {
    frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::Error(e) => {
                assert!(!e.terminal, "bad input is never terminal: {}", f.text);
                assert!(!e.message.is_empty());
                Some((f.line.request_id.clone(), e.code.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn every_bad_line_gets_one_error_and_the_session_carries_on() {
    let mut client =
        RpcClient::start(&["run-command", "examples/echo.yaml", "--rpc", "--stdin-rpc"]);
    let nested = "[".repeat(100_000);
    let huge = format!(
        "{{\"requestId\":\"big\",\"submit\":{{\"prompt\":\"{}\"}}}}",
        "x".repeat(17 * 1024 * 1024)
    );
    let bad_lines: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"not json".to_vec(), "", "invalid_request_json"),
        (
            br#"{"requestId":"j1","submit":"a string, not a message"}"#.to_vec(),
            "j1",
            "invalid_request_json",
        ),
        (b"[1, 2, 3]".to_vec(), "", "invalid_request_json"),
        (
            br#"{"requestId":"k1","launch":{"rockets":3}}"#.to_vec(),
            "k1",
            "unknown_request",
        ),
        (
            br#"{"requestId":"e1","submit":{"prompt":"   "}}"#.to_vec(),
            "e1",
            "empty_prompt",
        ),
        // A request id that can be read is echoed whatever else is wrong with the line.
        (
            b"{\"requestId\":\"u1\",\"submit\":{\"prompt\":\"\xff\xfe\"}}".to_vec(),
            "u1",
            "invalid_request_json",
        ),
        (
            b"{\"requestId\":\"n1\",\0\"snapshot\":{}}".to_vec(),
            "n1",
            "invalid_request_json",
        ),
        (
            format!(
                r#"{{"requestId":"d1","submit":{{"prompt":{}}}}}"#,
                "[".repeat(1000)
            )
            .into_bytes(),
            "d1",
            "invalid_request_json",
        ),
        (
            br#"{"version":99999999999,"requestId":"v2","snapshot":{}}"#.to_vec(),
            "v2",
            "unsupported_version",
        ),
        // An id over the limit is no id: refused, and never echoed.
        (
            format!(
                r#"{{"requestId":"{}","snapshot":{{}}}}"#,
                "r".repeat(1 << 20)
            )
            .into_bytes(),
            "",
            "invalid_request_id",
        ),
        (nested.into_bytes(), "", "invalid_request_json"),
        (
            br#"{"version":99,"requestId":"v1","snapshot":{}}"#.to_vec(),
            "v1",
            "unsupported_version",
        ),
        (huge.into_bytes(), "big", "request_too_large"),
        (
            br#"{"requestId":"t1","submit":{"prompt":1}}"#.to_vec(),
            "t1",
            "invalid_request_json",
        ),
    ];
    for (line, _, _) in &bad_lines {
        client.send_bytes(line);
    }
    // Unknown fields are ignored, as the JSON mapping says: this is a good submit.
    client.send(
        r#"{"requestId":"good","submit":{"prompt":"still here","mood":"calm"},"extra":[1,2]}"#,
    );
    assert_eq!(client.done_of("good"), "ok");
    client.send(r#"{"requestId":"snap","snapshot":{}}"#);
    assert_eq!(client.done_of("snap"), "ok");
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);

    let expected: Vec<(String, String)> = bad_lines
        .iter()
        .map(|(_, rid, code)| (rid.to_string(), code.to_string()))
        .collect();
    assert_eq!(errors(&frames), expected);
    // A bad line that named a request id also gets that request's done.
    for (_, rid, _) in bad_lines.iter().filter(|(_, rid, _)| !rid.is_empty()) {
        let done = frames
            .iter()
            .find(|f| f.line.request_id == *rid && f.done_status().is_some());
        assert_eq!(
            done.and_then(FrameLine::done_status),
            Some("failed"),
            "{rid}"
        );
    }
    // The session is unharmed: its timeline holds the one good exchange.
    let snapshot = frames
        .iter()
        .rev()
        .find(|f| f.json.get("snapshot").is_some())
        .unwrap();
    let texts: Vec<&str> = snapshot.json["snapshot"]["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["still here", "still here"]);
}

/// Sends one line of `mib` MiB of `x` (in 1 MiB writes) and a snapshot request after it;
/// returns the error code the line got and reel's peak resident set meanwhile, in KiB.
fn send_long_line(mib: usize) -> (String, u64) {
    let mut client =
        RpcClient::start(&["run-command", "examples/echo.yaml", "--rpc", "--stdin-rpc"]);
    client.wait_for("hello", |f| matches!(f.frame(), Frame::Hello(_)));
    let pid = client.pid();
    let peak = PeakRss::watch(pid);
    let piece = vec![b'x'; 1024 * 1024];
    for _ in 1..mib {
        client.send_raw(&piece);
    }
    client.send_bytes(&piece);
    client.send(r#"{"requestId":"after","snapshot":{}}"#);
    assert_eq!(client.done_of("after"), "ok");
    let peak = peak.stop();
    let (status, frames, _) = client.finish();
    assert!(status.success());
    let errors = errors(&frames);
    assert_eq!(errors.len(), 1, "{errors:?}");
    (errors[0].1.clone(), peak)
}

#[test]
fn a_line_far_over_the_limit_is_never_held_in_memory() {
    // 15 MiB is under the 16 MiB limit: held, parsed, rejected as not JSON.
    let (held_code, held_peak) = send_long_line(15);
    // 64 MiB is skipped as it streams in.
    let (skipped_code, skipped_peak) = send_long_line(64);
    eprintln!(
        "peak RSS: 15 MiB line (held) {held_peak} KiB, 64 MiB line (skipped) {skipped_peak} KiB"
    );
    assert_eq!(held_code, "invalid_request_json");
    assert_eq!(skipped_code, "request_too_large");
    assert!(
        skipped_peak < held_peak + 4 * 1024,
        "a 64 MiB line must cost no more than the 16 MiB limit: {skipped_peak} KiB vs {held_peak} KiB"
    );
}
