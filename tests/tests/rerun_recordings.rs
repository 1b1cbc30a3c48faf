//! `reel rerun` of real recordings: a session recorded against an OpenAI-compatible server on
//! 127.0.0.1 re-runs with the server gone (and against another server, live), and a session
//! captured by a reel from before request fingerprints still re-runs.

use reel_tests::{
    rerun_checks::{differences_listed, kinds, reel, rerun_of, run_turns, runs_of},
    write_file,
};
use serde_json::Value;

/// Recorded against an OpenAI-compatible server on 127.0.0.1 (a 429 retried, a tool call
/// streamed in pieces, usage; then a turn the server fails with a 400), the server gone: the
/// re-run needs no network and no key, and its events are the original's but for ids and
/// times.
#[test]
fn a_session_recorded_against_a_model_server_reruns_without_it() {
    use reel_tests::sse_server::{
        Reply, SseServer, delta_event, done_event, quick, tool_call_delta, usage_event,
    };
    use serde_json::json;

    let call = |id, name, arguments| tool_call_delta(0, id, name, arguments);
    let server = SseServer::start(vec![
        Reply::Status {
            status: 429,
            body: json!({"error": {"message": "slow down"}}).to_string(),
        },
        quick(vec![
            delta_event(json!({"content": "Let me look. "}), None),
            call(Some("call_w"), Some("weather"), ""),
            call(None, None, "{\"city\":"),
            call(None, None, "\"Oslo\"}"),
            delta_event(json!({}), Some("tool_calls")),
            usage_event(20, 9),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "It is sunny in Oslo."}), Some("stop")),
            usage_event(35, 6),
            done_event(),
        ]),
        Reply::Status {
            status: 400,
            body:
                json!({"error": {"message": "context too long", "type": "invalid_request_error"}})
                    .to_string(),
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let cmd = write_file(
        dir.path(),
        "weather.yaml",
        &format!(
            "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: What is the weather in Oslo?\nprovider:\n  name: openai\n  model: test-model\n  base_url: {}\ntools:\n  - name: weather\n    description: The weather in a city.\n    executor:\n      command: [sh, -c, 'echo sunny']\n",
            server.base_url()
        ),
    );
    let db_arg = db.to_str().unwrap();
    run_turns(&cmd, "rec", db_arg, &[0, 1]);
    assert_eq!(server.received().len(), 4);
    let address = server.base_url();
    let address = address
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    drop(server);
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "the model server is gone"
    );

    let (status, out, stderr) = reel(&[
        "rerun",
        "rec",
        "--command",
        &cmd,
        "--session-id",
        "replayed",
        "--timeline-db",
        db_arg,
    ]);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert_eq!(out, "equal: replayed re-ran 2 turns of rec the same way\n");
    let mut timeline = reel_tests::TimelineDb::open(&db);
    let original = runs_of(&timeline.events("rec"));
    let names: Vec<&str> = original
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for kind in [
        "ChatProviderCallRetrying",
        "ChatToolArgumentsDelta",
        "ChatRunFailed",
    ] {
        assert!(names.contains(&kind), "{kind} in {names:?}");
    }
    assert_eq!(runs_of(&timeline.events("replayed")), original);

    // The same session against a model server that answers otherwise (--model live): it runs
    // to the end and reports each turn's differences, the ones reel diff lists.
    let live = SseServer::start(vec![
        quick(vec![
            delta_event(json!({"content": "Looking it up. "}), None),
            call(Some("call_x"), Some("weather"), "{\"city\":\"Oslo\"}"),
            delta_event(json!({}), Some("tool_calls")),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "Sunny."}), Some("stop")),
            done_event(),
        ]),
        quick(vec![
            delta_event(json!({"content": "Still sunny."}), Some("stop")),
            done_event(),
        ]),
    ]);
    let text = std::fs::read_to_string(&cmd).unwrap();
    let live_cmd = write_file(
        dir.path(),
        "live.yaml",
        &text.replace(
            address,
            live.base_url()
                .trim_start_matches("http://")
                .trim_end_matches("/v1"),
        ),
    );
    let (status, out, stderr) = reel(&[
        "rerun",
        "rec",
        "--command",
        &live_cmd,
        "--model",
        "live",
        "--session-id",
        "evaluated",
        "--format",
        "json",
        "--timeline-db",
        db_arg,
    ]);
    assert_eq!(status, Some(3), "{out}{stderr}");
    assert_eq!(live.received().len(), 3, "every turn asked the live model");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["turns"], 2, "it ran to the end");
    let found = kinds(&report);
    for expected in [(1, "text"), (2, "text"), (2, "status")] {
        assert!(
            found.contains(&(expected.0, expected.1.to_owned())),
            "{expected:?} in {found:?}"
        );
    }
    assert_eq!(
        differences_listed(db_arg, "rec", "evaluated"),
        found,
        "reel diff lists the same differences"
    );
}

/// A session recorded before the log said what each model call was sent: a capture
/// (`--debug-events-jsonl`) written by reel at bc2a7d4, the commit before
/// `ChatProviderCallStarted.request`, with the command it ran (tests/fixtures/pre-fingerprint).
/// Rebuilt with `reel replay`, it re-runs, each call answered as recorded, and the report says
/// how many requests were not compared; a tool that answers otherwise is still found.
#[test]
fn a_session_recorded_before_request_fingerprints_reruns_and_says_what_was_not_compared() {
    let fixture = reel_tests::repo_root().join("tests/fixtures/pre-fingerprint");
    let capture = fixture.join("capture.jsonl");
    let captured = std::fs::read_to_string(&capture).unwrap();
    assert!(captured.contains("ChatProviderCallStarted"));
    assert!(
        !captured.contains("\"request\":"),
        "the capture predates request fingerprints"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (status, _, stderr) = reel(&[
        "replay",
        capture.to_str().unwrap(),
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let command = fixture.join("command.yaml");
    let (status, out, stderr) = rerun_of("old", command.to_str().unwrap(), &db);
    assert_eq!(status, Some(0), "{out}{stderr}");
    assert!(
        out.starts_with("not compared: the requests of 2 model calls"),
        "{out}"
    );
    assert!(
        out.ends_with("re-ran 1 turns of old the same way\n"),
        "{out}"
    );

    let text = std::fs::read_to_string(&command).unwrap();
    let filed = write_file(
        dir.path(),
        "filed.yaml",
        &text
            .replace("echo noted", "echo filed")
            .replace("script.yaml", fixture.join("script.yaml").to_str().unwrap()),
    );
    let (status, out, _) = reel(&[
        "rerun",
        "old",
        "--command",
        &filed,
        "--format",
        "json",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(status, Some(3), "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["divergences"][0]["kind"], "tool result 1");
    assert_eq!(report["requests_not_compared"], 2, "{report}");
}
