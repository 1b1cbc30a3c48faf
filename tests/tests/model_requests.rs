//! What each model call was sent is on the log: `ChatProviderCallStarted.request` holds a
//! digest of the system prompt, of the messages and of the tools offered, and the parameters
//! in clear. The same request in another session has the same fingerprint, and each part that
//! changes changes its own digest only: what a re-run of a recorded session compares.

use std::path::Path;

use reel_tests::write_file;
use serde_json::Value;

/// A command whose model calls `note` once, then answers; `system` is its system prompt.
fn command(dir: &Path, name: &str, system: &str, tools: &str) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: note, arguments: {}}\n  - - text: done\n",
    );
    write_file(
        dir,
        name,
        &format!(
            "name: t\ndescription: t\nprompt: Take a note.\nsystem_prompt: {system}\nprovider:\n  script: {script}\n  temperature: 0.3\ntools:\n  - name: note\n    description: Notes.\n    executor:\n      command: [sh, -c, 'echo noted']\n{tools}"
        ),
    )
}

/// The `request` of each ChatProviderCallStarted of one run of `cmd`.
fn requests(cmd: &str) -> Vec<Value> {
    let output = reel_tests::run(&["run-command", cmd, "--rpc", "--include-backend-events"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    reel_tests::parse_frames(&output.stdout)
        .iter()
        .filter_map(|f| {
            let event = &f.json["backendEvent"]["payload"];
            (event["@type"] == "type.googleapis.com/reel.chat.v1.ChatProviderCallStarted")
                .then(|| event["request"].clone())
        })
        .collect()
}

#[test]
fn every_model_call_records_what_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = command(dir.path(), "a.yaml", "Be brief.", "");
    let first = requests(&cmd);
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(first[0]["messageCount"], 1);
    assert_eq!(
        first[1]["messageCount"], 3,
        "the prompt, the call, its result"
    );
    assert_eq!(first[0]["toolNames"], serde_json::json!(["note"]));
    assert_eq!(first[0]["messages"].as_str().unwrap().len(), 32);
    let parameters: Value = serde_json::from_str(first[0]["parameters"].as_str().unwrap()).unwrap();
    assert_eq!(parameters["temperature"], 0.3);
    assert_ne!(first[0]["messages"], first[1]["messages"]);
    assert_eq!(first[0]["systemPrompt"], first[1]["systemPrompt"]);

    // Another session sending the same: the same fingerprints.
    assert_eq!(requests(&cmd), first);

    // Another system prompt changes that digest alone; another tool, the tools' alone.
    let prompted = requests(&command(dir.path(), "b.yaml", "Be long.", ""));
    assert_ne!(prompted[0]["systemPrompt"], first[0]["systemPrompt"]);
    assert_eq!(prompted[0]["messages"], first[0]["messages"]);
    assert_eq!(prompted[0]["tools"], first[0]["tools"]);
    let more = "  - name: file\n    description: Files.\n    executor:\n      command: [sh, -c, 'echo filed']\n";
    let tooled = requests(&command(dir.path(), "c.yaml", "Be brief.", more));
    assert_ne!(tooled[0]["tools"], first[0]["tools"]);
    assert_eq!(tooled[0]["toolNames"], serde_json::json!(["note", "file"]));
    assert_eq!(tooled[0]["systemPrompt"], first[0]["systemPrompt"]);
}
