//! `reel tail` following a live writer, on SQLite (polled) and PostgreSQL (LISTEN/NOTIFY): it
//! prints what the writer streams after tail's snapshot, payload for payload, and ends by
//! itself when the writer goes; with `--wait` it waits for the session and its writer to
//! appear; `--output text` prints for people.

use std::time::Duration;

use reel_tests::{
    parse_frames, reel,
    stored::{Backend, unique},
    write_file,
};
use serde_json::Value;

fn tail_follows_a_live_writer(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let id = unique("tail");
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"before \"\n  - - repeat: {times: 40, steps: [{text: \"tok \"}, {sleep_ms: 10}]}\n",
    );
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        &format!("name: t\ndescription: t\nprompt: unused\nprovider:\n  script: {script}\n"),
    );
    let mut writer = backend.session_client(&cmd, &id);
    writer.send(r#"{"requestId":"a","submit":{"prompt":"first"}}"#);
    assert_eq!(writer.done_of("a"), "ok");

    // tail starts while the writer holds the session, then the writer streams a second reply.
    let flags = backend.flags();
    let tail = reel(&["tail", &id, &flags[0], &flags[1]])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    writer.send(r#"{"requestId":"b","submit":{"prompt":"second"}}"#);
    assert_eq!(writer.done_of("b"), "ok");
    let (status, writer_frames, _) = writer.finish();
    assert!(status.success());

    // tail saw the writer leave and ended by itself.
    let output = tail.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tailed = String::from_utf8(output.stdout).unwrap();
    let frames = parse_frames(tailed.as_bytes());
    reel_tests::assert_stream_shape(&frames);
    let snapshot_at: u64 = serde_json::from_str::<Value>(tailed.lines().nth(1).unwrap()).unwrap()
        ["snapshot"]["snapshotOrdinal"]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap();
    // Every ui event the writer streamed after tail's snapshot, in order, with the same payloads.
    let live: Vec<(u64, String, Value)> = writer_frames
        .iter()
        .filter_map(|f| {
            let ui = f.json.get("uiEvent")?;
            let ordinal: u64 = ui["ordinal"].as_str()?.parse().ok()?;
            (ordinal > snapshot_at).then(|| {
                (
                    ordinal,
                    ui["name"].as_str().unwrap().to_owned(),
                    ui["payload"].clone(),
                )
            })
        })
        .collect();
    let followed: Vec<(u64, String, Value)> = frames
        .iter()
        .filter_map(|f| {
            let ui = f.json.get("uiEvent")?;
            Some((
                ui["ordinal"].as_str()?.parse().ok()?,
                ui["name"].as_str().unwrap().to_owned(),
                ui["payload"].clone(),
            ))
        })
        .collect();
    assert!(
        live.len() > 40,
        "the second reply streamed after tail started"
    );
    assert_eq!(followed, live);
}

/// `tail --wait` started before the session exists follows it from its first event to its
/// writer's end, as text for people.
fn tail_waits_for_a_session_to_appear(backend: &Backend) {
    let id = unique("later");
    let flags = backend.flags();
    let tail = reel(&[
        "tail", &id, "--wait", "--output", "text", &flags[0], &flags[1],
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut writer = backend.session_client("examples/weather-tool.yaml", &id);
    // The writer holds the session a while, so tail sees it appear and then go.
    std::thread::sleep(Duration::from_millis(800));
    writer.send(r#"{"requestId":"a","submit":{"prompt":"Weather in Oslo?"}}"#);
    assert_eq!(writer.done_of("a"), "ok");
    std::thread::sleep(Duration::from_millis(300));
    let (status, _, stderr) = writer.finish();
    assert!(status.success(), "{stderr}");
    let output = tail.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("You: Weather in Oslo?"), "{text}");
    assert!(text.contains("get_weather("), "{text}");
    // However much of the run had landed when tail found the session, all of it shows.
    assert!(text.contains("sunny"), "{text}");
    assert!(text.contains("the session's writer has finished"), "{text}");
    assert!(!text.contains("\"uiEvent\""), "text, not frames: {text}");
}

reel_tests::on_both_backends!(
    tail_follows_a_live_writer,
    tail_waits_for_a_session_to_appear
);
