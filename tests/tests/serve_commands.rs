//! `reel serve --commands DIR`: each new session names its command file and its variables'
//! values; the choice is the session's first event, so the session keeps it across restarts.

use reel_tests::{served::Served, write_file};

/// A folder with two commands: `greeter` (a required variable filling its system prompt) and
/// `shouter` (a scripted reply).
fn commands(dir: &std::path::Path) -> std::path::PathBuf {
    let folder = dir.join("commands");
    std::fs::create_dir(&folder).unwrap();
    write_file(
        &folder,
        "greeter.yaml",
        "name: greeter\ndescription: greets\nsystem_prompt: \"You greet {{ who }}.\"\nprompt: unused\nvariables:\n  - name: who\n    description: whom\n",
    );
    // Scripts live beside, not among, the commands: every YAML file in the folder is one.
    std::fs::create_dir(folder.join("scripts")).unwrap();
    write_file(
        &folder.join("scripts"),
        "loud.yaml",
        "turns:\n  - - text: \"HELLO\"\n",
    );
    write_file(
        &folder,
        "shouter.yml",
        "name: shouter\ndescription: shouts\nprompt: unused\nprovider:\n  script: scripts/loud.yaml\n",
    );
    folder
}

#[tokio::test]
async fn a_session_runs_the_command_it_named_with_its_values_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let folder = commands(dir.path());
    let db = dir.path().join("t.db");
    let start = || Served::start_with(&["--commands", folder.to_str().unwrap()], &db, &[]);
    let mut served = start();
    let (status, created) = served
        .post(
            "/v1/sessions",
            r#"{"id":"g","command":"greeter","variables":{"who":"Ada"}}"#,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    // Its choice is its first event.
    assert_eq!(created["events"], 1, "{created}");
    assert_eq!(served.reply("g", "hi").await, "hi");
    let (_, _, turns) = served.get_text("/v1/sessions/g/export?format=turns").await;
    assert!(turns.contains("You greet Ada."), "{turns}");

    served.create_with("s", r#""command":"shouter""#).await;
    assert_eq!(served.reply("s", "hi").await, "HELLO");

    // A new server process loads each session with the command and values it was made with.
    served.kill();
    let served = start();
    assert_eq!(served.reply("g", "again").await, "again");
    let (_, _, turns) = served.get_text("/v1/sessions/g/export?format=turns").await;
    assert_eq!(turns.matches("You greet Ada.").count(), 1, "{turns}");
    assert!(turns.contains("again"), "{turns}");
}

#[tokio::test]
async fn a_command_that_is_not_the_server_s_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let folder = commands(dir.path());
    let served = Served::start_with(
        &["--commands", folder.to_str().unwrap()],
        &dir.path().join("t.db"),
        &[],
    );
    for body in [
        // No default command here.
        r#"{}"#,
        r#"{"command":"nope"}"#,
        r#"{"command":"../commands/greeter"}"#,
        r#"{"command":"/etc/passwd"}"#,
        r#"{"command":"greeter"}"#,
        r#"{"command":"greeter","variables":{"who":"Ada","extra":"1"}}"#,
    ] {
        let (status, answer) = served.post("/v1/sessions", body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_command")),
            "{body}: {answer}"
        );
    }
    let (_, list) = served.get("/v1/sessions").await;
    assert_eq!(
        list["sessions"],
        serde_json::json!([]),
        "nothing was stored"
    );
}

#[test]
fn a_folder_with_a_broken_command_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let folder = commands(dir.path());
    write_file(&folder, "broken.yaml", "name: broken\nprompt: [\n");
    let output = reel_tests::run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--commands",
        folder.to_str().unwrap(),
        "--timeline-db",
        dir.path().join("t.db").to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.yaml"), "{stderr}");
}
