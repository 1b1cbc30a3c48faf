//! What `show` and the markdown and HTML exports make of a session: every call with its own
//! result (also when a model repeats a call id), text that cannot drive a terminal, reorder a
//! line or turn into markup, and an honest duration for a run a crash interrupted.

use std::path::Path;

use reel_tests::{run, write_file};

fn stdout_of(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A stored session `s` whose run plays `script` with a tool `echo` that prints its input.
fn stored(dir: &Path, script: &str, model: &str) -> String {
    let script = write_file(dir, "script.yaml", script);
    let cmd = write_file(
        dir,
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"Go \\u202Eevil\\u202C and `tick`\"\nprovider:\n  script: {script}\n  model: \"{model}\"\ntools:\n  - name: echo\n    description: Echoes.\n    executor:\n      command: [cat]\n"
        ),
    );
    let db = dir.join("t.db").display().to_string();
    let made = run(&[
        "run-command",
        &cmd,
        "--session-id",
        "s",
        "--timeline-db",
        &db,
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    db
}

#[test]
fn two_calls_with_one_id_each_show_their_own_result() {
    let dir = tempfile::tempdir().unwrap();
    let db = stored(
        dir.path(),
        "turns:\n  - - tool_call: {id: dup, name: echo, arguments: {n: first}}\n    - tool_call: {id: dup, name: echo, arguments: {n: second}}\n  - - text: done\n",
        "m",
    );
    let shown = stdout_of(&["show", "s", "--timeline-db", &db]);
    let first = shown.find(r#"echo({"n":"first"})"#).expect(&shown);
    let second = shown.find(r#"echo({"n":"second"})"#).expect(&shown);
    let first_result = shown[first..second].contains(r#"{"n":"first"}"#);
    assert!(first_result, "the first call shows its result:\n{shown}");
    assert!(shown[second..].contains(r#"    {"n":"second"}"#), "{shown}");
    let markdown = stdout_of(&["export", "s", "--format", "markdown", "--timeline-db", &db]);
    assert_eq!(markdown.matches("Result:").count(), 2, "{markdown}");
}

#[test]
fn session_text_cannot_drive_a_terminal_or_turn_into_markup() {
    let dir = tempfile::tempdir().unwrap();
    let db = stored(
        dir.path(),
        "turns:\n  - - text: \"<b>bold</b> \\u202Ereversed\\u202C [link](javascript:alert(1)) `x`\"\n",
        "model\\e]0;title\\a",
    );
    let shown = stdout_of(&["show", "s", "--timeline-db", &db]);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{202e}'),
        "{shown:?}"
    );
    assert!(
        shown.contains("\\u{202e}") && shown.contains("\\u{1b}"),
        "{shown}"
    );
    let listed = stdout_of(&["sessions", "--timeline-db", &db]);
    assert!(!listed.contains('\u{202e}'), "{listed:?}");
    let verified = stdout_of(&["verify", "s", "--timeline-db", &db]);
    assert!(verified.contains("OK"), "{verified}");

    let html = stdout_of(&["export", "s", "--format", "html", "--timeline-db", &db]);
    assert!(
        !html.contains('\u{202e}') && !html.contains('\u{1b}'),
        "no direction override in the page"
    );
    assert!(html.contains("\\u{202e}reversed"), "shown instead");

    let markdown = stdout_of(&["export", "s", "--format", "markdown", "--timeline-db", &db]);
    assert!(
        !markdown.contains("<b>") && markdown.contains("\\<b\\>"),
        "{markdown}"
    );
    assert!(markdown.contains("\\[link\\]"), "no link: {markdown}");
    assert!(!markdown.contains('\u{202e}'));
}

#[test]
fn a_run_closed_by_resume_has_no_made_up_duration() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - text: \"start \"\n    - sleep_ms: 30000\n    - text: never\n",
    );
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        &format!("name: t\ndescription: t\nprompt: p\nprovider:\n  script: {script}\n"),
    );
    let db = dir.path().join("t.db").display().to_string();
    let mut child = reel_tests::reel(&[
        "run-command",
        &cmd,
        "--rpc",
        "--session-id",
        "cut",
        "--timeline-db",
        &db,
    ])
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut view = None;
    let started = std::time::Instant::now();
    while view.is_none() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the run never stored its start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        if std::path::Path::new(&db).exists() {
            let mut db = reel_tests::TimelineDb::open(std::path::Path::new(&db));
            if db.delta_count("cut") > 0 {
                view = Some(());
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = run(&[
        "run-command",
        "examples/echo.yaml",
        "--session-id",
        "cut",
        "--resume",
        "--timeline-db",
        &db,
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let shown = stdout_of(&["show", "cut", "--timeline-db", &db]);
    assert!(
        shown.contains("failed · duration unknown (interrupted)"),
        "{shown}"
    );
    assert!(!shown.contains("failed · 0 ms"), "{shown}");
}
