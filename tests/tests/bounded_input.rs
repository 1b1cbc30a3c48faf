//! Every input reel reads has a bound, is read with it, and costs at most a small multiple of
//! its size: command files and scripts (even /dev/zero), request lines, and a long prompt.

use std::time::{Duration, Instant};

use reel_tests::{PeakRss, RpcClient, reel, write_file};

#[test]
fn endless_or_huge_files_are_refused_after_reading_their_limit() {
    let dir = tempfile::tempdir().unwrap();
    let huge_prompt = format!(
        "name: t\ndescription: t\nprompt: \"{}\"\n",
        "x".repeat(40 * 1024 * 1024)
    );
    let huge = write_file(dir.path(), "huge.yaml", &huge_prompt);
    for (args, says) in [
        (
            vec!["run-command", "/dev/zero"],
            "larger than 1048576 bytes",
        ),
        (
            vec!["run-command", huge.as_str()],
            "larger than 1048576 bytes",
        ),
        (
            vec!["run-command", "examples/echo.yaml", "--script", "/dev/zero"],
            "larger than 16777216 bytes",
        ),
        (vec!["run-command", "/tmp"], "Is a directory"),
    ] {
        let child = reel(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let peak = PeakRss::watch(child.id());
        let started = Instant::now();
        let output = child.wait_with_output().unwrap();
        let peak = peak.stop();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{args:?} ended"
        );
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(peak < 200 * 1024, "{args:?} took {peak} KiB");
    }
}

/// Peak resident memory while one submit of `prompt_bytes` of text (a single word, so the reply
/// is one delta of that size) is answered.
fn peak_for_prompt(prompt_bytes: usize) -> u64 {
    let mut client =
        RpcClient::start(&["run-command", "examples/echo.yaml", "--rpc", "--stdin-rpc"]);
    client.wait_for("hello", |f| f.json.get("hello").is_some());
    let peak = PeakRss::watch(client.pid());
    let line =
        serde_json::json!({"requestId": "p", "submit": {"prompt": "x".repeat(prompt_bytes)}});
    client.send(&line.to_string());
    assert_eq!(client.done_of("p"), "ok");
    let peak = peak.stop();
    let (status, _, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    peak
}

#[test]
fn a_long_prompt_costs_a_small_multiple_of_its_size() {
    let small = peak_for_prompt(1024 * 1024);
    let large = peak_for_prompt(9 * 1024 * 1024);
    let per_byte = (large.saturating_sub(small) * 1024) as f64 / (8.0 * 1024.0 * 1024.0);
    eprintln!(
        "peak RSS: 1 MiB prompt {small} KiB, 9 MiB prompt {large} KiB: {per_byte:.1} bytes per prompt byte"
    );
    // The prompt is held by the log event, the timeline and the model context, the reply by
    // its event, the timeline, the context and its frames: a few dozen copies at most, never
    // thousands (a step or an event per word).
    assert!(
        per_byte < 40.0,
        "{per_byte:.1} bytes of memory per byte of prompt"
    );
}
