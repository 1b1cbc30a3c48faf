//! Every string reel stores round-trips on both backends, whatever it holds: NUL (which
//! PostgreSQL text cannot hold), line and paragraph separators, direction overrides, quotes,
//! backslashes, SQL, and characters outside the basic plane.

use reel_proto::Any;
use reel_tests::{
    on_both_backends,
    stored::{Backend, assert_log_and_entities_agree, unique},
};

/// One prompt with every kind of hostile character.
const HOSTILE: &str = "nul:\u{0} sep:\u{2028}\u{2029} bidi:\u{202e}txet\u{202c} quote:'\" back:\\ sql:'); DROP TABLE events; -- crab:\u{1f980} esc:\u{1b}[31m tab:\t end";

fn hostile_characters_round_trip(backend: &Backend) {
    let id = unique("hostile");
    let mut client = backend.session_client("examples/echo.yaml", &id);
    let request = serde_json::json!({"requestId": "h", "submit": {"prompt": HOSTILE}});
    client.send(&request.to_string());
    assert_eq!(client.done_of("h"), "ok");
    let (status, frames, stderr) = client.finish();
    assert!(status.success(), "{stderr}");
    // The live reply echoes the prompt exactly.
    let reply: String = frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatTextPatch"))
        .map(|f| {
            f.json["uiEvent"]["payload"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reply, HOSTILE);

    // Read back from the database: the prompt and the reply, byte for byte.
    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    let prompt = events.iter().find_map(|e| match &e.event {
        Any::ChatUserMessageAccepted(m) => Some(m.text.clone()),
        _ => None,
    });
    assert_eq!(prompt.as_deref(), Some(HOSTILE));
    let stored_reply: String = events
        .iter()
        .filter_map(|e| match &e.event {
            Any::ChatTextDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(stored_reply, HOSTILE);

    // The export of the stored session carries it too, and the title is one clean line.
    let exported = backend.run(&["export", &id, "--format", "turns"]);
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );
    let turns: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    assert_eq!(turns[0]["content"], HOSTILE);
    let listed = backend.run(&["sessions", "--json"]);
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let title = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == id.as_str())
        .unwrap()["title"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!title.chars().any(char::is_control), "{title:?}");
    assert!(title.starts_with("nul: sep:"), "{title:?}");
}

on_both_backends!(hostile_characters_round_trip);
