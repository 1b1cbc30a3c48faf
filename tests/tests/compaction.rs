//! Compaction through the real binary: a scripted session with a small context window
//! compacts at the expected turn, the next model request holds the summary and not the
//! compacted turns, the timeline and exports keep every message, resume rebuilds the compacted
//! context from the log without a model call, a kill -9 in the summarization call leaves a
//! gap-free log, and a context that cannot fit fails with `context_overflow`.

use std::path::Path;

use reel_tests::{
    FrameLine, RpcClient, assert_request_scoped, parse_frames, run, stored::Backend, write_file,
};

/// A command with a 200-token window compacting at half of it, keeping one turn besides the
/// current one, playing `script`.
fn command(dir: &Path, script: &str, context: &str) -> String {
    let script = write_file(dir, "script.yaml", script);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: unused\nprovider:\n  script: {script}\ncontext: {context}\n"
        ),
    )
}

const SMALL_WINDOW: &str = "{window_tokens: 200, compact_at: 0.5, keep_recent_turns: 1}";

/// Forty words, about 60 tokens by reel's estimate.
fn long_prompt(tag: &str) -> String {
    (0..40)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn ui<'a>(frames: &'a [FrameLine], name: &str) -> Vec<&'a FrameLine> {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some(name))
        .collect()
}

fn payload(frame: &FrameLine) -> &serde_json::Value {
    &frame.json["uiEvent"]["payload"]
}

fn reply_text(frames: &[FrameLine], rid: &str) -> String {
    frames
        .iter()
        .filter(|f| f.line.request_id == rid && f.ui_name() == Some("ChatTextSegmentFinished"))
        .map(|f| payload(f)["text"].as_str().unwrap().to_owned())
        .collect()
}

fn submit_all(client: &mut RpcClient, prompts: &[(&str, String)]) {
    for (rid, prompt) in prompts {
        let line = serde_json::json!({"requestId": rid, "submit": {"prompt": prompt}});
        client.send(&line.to_string());
        assert_eq!(client.done_of(rid), "ok", "{rid}");
    }
}

#[test]
fn a_small_window_compacts_at_the_expected_turn_and_the_next_request_holds_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let script = "turns:\n  - - text: A1\n  - - text: A2\n  - - echo_context\n  - - echo_context\nsummary: SUMMARY-OF-TURN-ONE\n";
    let command = command(dir.path(), script, SMALL_WINDOW);
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    let mut client = backend.session_client(&command, "s");
    // By reel's estimate turn 1's call carries ~83 tokens and turn 2's ~171 (under the
    // window, and with one turn kept besides the current one there is nothing to compact);
    // turn 3's carries ~184, past the threshold of 100: turn 1 is compacted first.
    submit_all(
        &mut client,
        &[
            ("r1", long_prompt("alpha")),
            ("r2", long_prompt("beta")),
            ("r3", "what do you see?".into()),
        ],
    );
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let compactions = ui(&frames, "ChatContextCompacted");
    assert!(!compactions.is_empty(), "the window forced a compaction");
    let first = compactions[0];
    assert_eq!(
        first.line.request_id, "r3",
        "turn 3's call was the first that could compact"
    );
    let compacted = payload(first);
    assert_eq!(compacted["summary"], "SUMMARY-OF-TURN-ONE");
    assert_eq!(compacted["reason"], "threshold");
    assert_eq!(compacted["firstOrdinal"], "1");
    let before: u64 = compacted["tokensBefore"].as_str().unwrap().parse().unwrap();
    let after: u64 = compacted["tokensAfter"].as_str().unwrap().parse().unwrap();
    assert!(before > 100 && after < before, "{before} -> {after}");
    // The summarization call is on the log like any model call, marked as one.
    let purposes: Vec<&str> = ui(&frames, "ChatProviderCallStarted")
        .iter()
        .map(|f| payload(f)["purpose"].as_str().unwrap())
        .collect();
    assert!(purposes.contains(&"summary"), "{purposes:?}");
    // The model saw the summary, not turn 1.
    let seen = reply_text(&frames, "r3");
    assert!(seen.contains("SUMMARY-OF-TURN-ONE"), "{seen}");
    assert!(
        !seen.contains("alpha0"),
        "turn 1 was compacted away: {seen}"
    );
    assert!(
        seen.contains("beta0"),
        "turn 2 is kept word for word: {seen}"
    );

    // The timeline and the exports still show every message, and a marker.
    let markdown = backend.run(&["export", "s", "--format", "markdown"]);
    assert!(markdown.status.success());
    let markdown = String::from_utf8(markdown.stdout).unwrap();
    assert!(markdown.contains("alpha0") && markdown.contains("beta0") && markdown.contains("A1"));
    assert!(markdown.contains("compacted"), "{markdown}");
    let jsonl = backend.run(&["export", "s", "--format", "jsonl"]);
    let exported = parse_frames(&jsonl.stdout);
    let snapshot = exported
        .iter()
        .rev()
        .find_map(|f| f.json.get("snapshot"))
        .unwrap();
    let kinds: Vec<&str> = snapshot["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"ChatCompaction"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "ChatMessage").count(), 6);

    // Resume (with a window wide enough not to compact again): the compacted context comes
    // from the log, and no summarization call was needed to rebuild it.
    let mut resumed = backend.resumed_client(&command, "s", &["--context-window", "100000"]);
    resumed.send(r#"{"requestId":"r4","submit":{"prompt":"and now?"}}"#);
    assert_eq!(resumed.done_of("r4"), "ok");
    let (status, frames, _) = resumed.finish();
    assert!(status.success());
    let calls: Vec<&str> = ui(&frames, "ChatProviderCallStarted")
        .iter()
        .map(|f| payload(f)["purpose"].as_str().unwrap())
        .collect();
    assert_eq!(
        calls,
        ["reply"],
        "resume calls no model to rebuild the context"
    );
    let seen = reply_text(&frames, "r4");
    assert!(
        seen.contains("SUMMARY-OF-TURN-ONE") && seen.contains("beta0"),
        "{seen}"
    );
    assert!(!seen.contains("alpha0"), "{seen}");
}

#[test]
fn a_compact_request_compacts_now_and_says_when_there_is_nothing_to_compact() {
    let dir = tempfile::tempdir().unwrap();
    let script = "turns:\n  - - text: one\n  - - text: two\n  - - echo_context\n";
    let command = command(dir.path(), script, "{keep_recent_turns: 1}");
    let mut client = RpcClient::start(&["run-command", &command, "--rpc", "--stdin-rpc"]);
    client.send(r#"{"requestId":"c0","compact":{}}"#);
    assert_eq!(client.done_of("c0"), "failed");
    submit_all(
        &mut client,
        &[
            ("r1", "first question".into()),
            ("r2", "second question".into()),
        ],
    );
    client.send(r#"{"requestId":"c1","compact":{"instructions":"Keep the questions."}}"#);
    assert_eq!(client.done_of("c1"), "ok");
    submit_all(&mut client, &[("r3", "third".into())]);
    let (status, frames, _) = client.finish();
    assert!(status.success());
    assert_request_scoped(&frames);
    let refused = frames
        .iter()
        .find(|f| f.line.request_id == "c0" && f.json.get("error").is_some())
        .unwrap();
    assert_eq!(refused.json["error"]["code"], "nothing_to_compact");
    let compacted = ui(&frames, "ChatContextCompacted");
    assert_eq!(compacted.len(), 1);
    let compacted = payload(compacted[0]);
    assert_eq!(compacted["reason"], "requested");
    assert_eq!(compacted["instructions"], "Keep the questions.");
    // Without a script summary, the scripted model's summary names what it covers.
    let summary = compacted["summary"].as_str().unwrap();
    assert!(
        summary.contains("2 earlier messages") && summary.contains("first question"),
        "{summary}"
    );
    let seen = reply_text(&frames, "r3");
    assert!(
        seen.starts_with("user: Summary of the conversation before this point"),
        "{seen}"
    );
    assert!(
        seen.contains("second question") && seen.contains("third"),
        "{seen}"
    );
}

#[test]
fn a_context_that_cannot_fit_fails_with_context_overflow_saying_by_how_much() {
    let dir = tempfile::tempdir().unwrap();
    let command = command(
        dir.path(),
        "turns:\n  - - text: ok\n",
        "{window_tokens: 30, keep_recent_turns: 0}",
    );
    let output = run(&["run-command", &command, "--rpc", "--context-window", "30"]);
    let frames = parse_frames(&output.stdout);
    assert!(output.status.success(), "a short prompt fits");
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    let prompt = long_prompt("gamma");
    let output = reel_tests::reel(&["run-command", &command, "--rpc", "--stdin-rpc"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let line = serde_json::json!({"requestId": "big", "submit": {"prompt": prompt}});
            writeln!(child.stdin.take().unwrap(), "{line}")?;
            child.wait_with_output()
        })
        .unwrap();
    let frames = parse_frames(&output.stdout);
    let error = frames.iter().find_map(|f| f.json.get("error")).unwrap();
    assert_eq!(error["code"], "context_overflow");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("more than the window of 30"), "{message}");
    assert_eq!(frames.last().unwrap().done_status(), Some("failed"));
    assert!(
        ui(&frames, "ChatProviderCallStarted").is_empty(),
        "no model call was made for a context that cannot fit"
    );
}

#[test]
fn kill_9_during_the_summarization_call_then_resume_leaves_a_gap_free_log() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        "turns:\n  - - text: A1\n  - - text: A2\nsummary:\n  - sleep_ms: 60000\n  - text: never\n";
    let command = command(
        dir.path(),
        script,
        "{window_tokens: 200, compact_at: 0.5, keep_recent_turns: 0}",
    );
    let backend = Backend::Sqlite(dir.path().join("t.db"));
    let mut client = backend.session_client(&command, "k");
    submit_all(&mut client, &[("r1", long_prompt("alpha"))]);
    let line = serde_json::json!({"requestId": "r2", "submit": {"prompt": long_prompt("beta")}});
    client.send(&line.to_string());
    client.wait_for("the summarization call", |f| {
        f.ui_name() == Some("ChatProviderCallStarted") && payload(f)["purpose"] == "summary"
    });
    // Its start is committed before the call is made; give the commit a moment, then kill.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = client.pid();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    drop(client);

    let mut resumed = backend.resumed_client(&command, "k", &[]);
    resumed.send(r#"{"requestId":"s","snapshot":{}}"#);
    assert_eq!(resumed.done_of("s"), "ok");
    let (status, frames, _) = resumed.finish();
    assert!(status.success());
    let closing: Vec<&str> = frames.iter().filter_map(FrameLine::ui_name).collect();
    assert_eq!(
        closing,
        ["ChatProviderCallFinished", "ChatRunFailed"],
        "the interrupted run is closed"
    );
    let jsonl = backend.run(&["export", "k", "--format", "jsonl"]);
    let exported = parse_frames(&jsonl.stdout);
    let ordinals: Vec<u64> = exported
        .iter()
        .filter_map(|f| f.json.get("uiEvent"))
        .map(|ui| ui["ordinal"].as_str().unwrap().parse().unwrap())
        .collect();
    let mut distinct = ordinals.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        (1..=*distinct.last().unwrap()).collect::<Vec<_>>(),
        "gap-free"
    );
    assert!(
        exported
            .iter()
            .all(|f| f.ui_name() != Some("ChatContextCompacted")),
        "the compaction never happened"
    );
}

#[test]
fn an_openai_compatible_server_sees_the_summary_request_and_then_the_summary() {
    use reel_tests::sse_server::{SseServer, delta_event, done_event, quick, usage_event};
    let answer = |text: &str, prompt_tokens: u32| {
        quick(vec![
            delta_event(
                serde_json::json!({"role": "assistant", "content": text}),
                None,
            ),
            delta_event(serde_json::json!({}), Some("stop")),
            usage_event(prompt_tokens, 10),
            done_event(),
        ])
    };
    let server = SseServer::start(vec![
        answer("first answer", 50),
        answer("second answer", 150),
        answer("SUMMARY-FROM-THE-MODEL", 170),
        answer("third answer", 60),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let command = write_file(
        dir.path(),
        "command.yaml",
        "name: t\ndescription: t\nsystem_prompt: Be brief.\nprompt: unused\nprovider:\n  name: openai\n  model: m\ncontext: {window_tokens: 200, compact_at: 0.5, keep_recent_turns: 0}\n",
    );
    let base_url = server.base_url();
    let mut client = RpcClient::start(&[
        "run-command",
        &command,
        "--rpc",
        "--stdin-rpc",
        "--base-url",
        &base_url,
    ]);
    submit_all(
        &mut client,
        &[
            ("r1", "tell me about OTTERS".into()),
            ("r2", "and BEAVERS".into()),
            ("r3", "and fish".into()),
        ],
    );
    let (status, frames, _) = client.finish();
    assert!(status.success());
    // The provider reported 160 tokens for the second call: the third call's estimate passes
    // the threshold of 100, so the first two turns are summarized first.
    let received = server.received();
    assert_eq!(
        received.len(),
        4,
        "three replies and one summarization call"
    );
    let summary_request: serde_json::Value = serde_json::from_str(&received[2].body).unwrap();
    let asked = summary_request["messages"].to_string();
    assert!(
        asked.contains("OTTERS") && asked.contains("BEAVERS") && asked.contains("Summarize"),
        "{asked}"
    );
    assert!(
        summary_request.get("tools").is_none(),
        "a summary needs no tools"
    );
    let next: serde_json::Value = serde_json::from_str(&received[3].body).unwrap();
    let messages = next["messages"].as_array().unwrap();
    let texts: Vec<String> = messages.iter().map(|m| m["content"].to_string()).collect();
    assert_eq!(messages[0]["role"], "system");
    assert!(texts[1].contains("SUMMARY-FROM-THE-MODEL"), "{texts:?}");
    assert!(
        texts
            .iter()
            .all(|t| !t.contains("OTTERS") && !t.contains("BEAVERS")),
        "{texts:?}"
    );
    assert!(texts.last().unwrap().contains("and fish"));
    let compacted = ui(&frames, "ChatContextCompacted");
    assert_eq!(compacted.len(), 1);
    // The estimate: the 160 tokens reported for the last reply call, plus the new message
    // ("and fish": 8 characters, 2 tokens, and 4 for the message).
    assert_eq!(payload(compacted[0])["tokensBefore"], "166");
}
