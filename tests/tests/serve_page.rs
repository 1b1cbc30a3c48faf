//! `reel serve`'s chat page at `GET /` in a real browser: headless Chromium (Debian's), driven
//! by Playwright (from PyPI, pinned in tools/playwright) with tests/browser/chat_page.py,
//! keyboard only in a phone-sized window: the token prompt, a new session, a conversation with
//! reasoning and a tool call, a connection cut mid-reply that the page resumes from its last
//! event id with no duplicated text, a cancel, and a reload showing the same timeline.
//! Without Chromium (or Playwright's wheel) the test says so and skips, except under CI.

use reel_tests::{PageDriver, served::Served, write_file};
use serde_json::Value;

const TOKEN: (&str, &str) = ("REEL_TEST_TOKEN", "page-token");

/// The reply the second model call streams (as chat_page.py expects it).
fn reply() -> String {
    format!("Oslo: {}done.", "tick ".repeat(60))
}

/// The command the page talks to: a tool call with reasoning, a slow reply, a long one.
fn command(dir: &std::path::Path) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        r#"turns:
  - - reasoning: "Checking the forecast."
    - text: "Let me look."
    - tool_call: {id: call_1, name: get_weather, arguments: {city: Oslo}}
  - - text: "Oslo: "
    - repeat: {times: 60, steps: [{text: "tick "}, {sleep_ms: 25}]}
    - text: "done."
  - - repeat: {times: 5000, steps: [{text: "count "}, {sleep_ms: 20}]}
"#,
    );
    let tool = write_file(
        dir,
        "weather.sh",
        "#!/bin/sh\ncat > /dev/null\necho '{\"forecast\":\"snow\"}'\n",
    );
    make_executable(&tool);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: page\ndescription: the chat page's test command\nprompt: unused\nprovider:\n  script: {script}\ntools:\n  - name: get_weather\n    description: The weather in a city.\n    parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}\n    executor:\n      command: [{tool}]\nmax_iterations: 4\n"
        ),
    )
}

fn make_executable(path: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn the_chat_page_converses_resumes_and_cancels_in_a_browser() {
    let Some(driver) = PageDriver::ready() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = command(dir.path());
    let served = Served::start(
        &command,
        &dir.path().join("t.db"),
        &["--token-env", TOKEN.0],
        &[TOKEN],
    );
    let port = served.base.rsplit(':').next().unwrap().to_owned();
    let shot = dir.path().join("page.png");
    let more = vec![TOKEN.1.into(), shot.clone().into_os_string()];
    let seen = driver.run("chat_page.py", &port, more).await;

    // The page's connection was cut mid-reply and came back from an event of that reply.
    let resumed_from: f64 = seen["resumed_from"].as_str().unwrap().parse().unwrap();
    assert!(resumed_from > 0.0, "{seen}");
    assert_ne!(seen["cut_at"], Value::from(reply()), "{seen}");

    // What the page shows is what the server stored.
    let session = seen["session"].as_str().unwrap();
    let answer = served
        .client
        .get(served.url(&format!("/v1/sessions/{session}")))
        .bearer_auth(TOKEN.1)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let stored: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let stored_texts: Vec<&str> = stored["snapshot"]["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["role"] == "assistant")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(stored_texts[..2], ["Let me look.", reply().as_str()]);
    let shown = seen["timeline"].as_array().unwrap();
    let stopped = shown.last().unwrap().as_str().unwrap();
    assert_eq!(
        stopped,
        format!("assistant · stopped{}", stored_texts[2]),
        "the cancelled reply"
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 0);
}
