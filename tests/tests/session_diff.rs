//! `reel diff A B`: two stored sessions compared turn by turn. Sessions that said and did the
//! same are equal whatever their ids and times (a session and its fork too); a tool that
//! answers otherwise shows as the tool result and the text that read it, with both values.

use std::path::Path;

use reel_tests::write_file;
use serde_json::Value;

/// A command whose model calls `note`, then shows the conversation it was given; the tool
/// prints `answer`.
fn command(dir: &Path, name: &str, answer: &str) -> String {
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - text: \"Let me note it. \"\n    - tool_call: {id: c1, name: note, arguments: {what: milk}}\n  - - echo_context\n",
    );
    write_file(
        dir,
        name,
        &format!(
            "name: t\ndescription: t\nprompt: Note the milk.\nprovider:\n  script: {script}\ntools:\n  - name: note\n    description: Notes.\n    executor:\n      command: [sh, -c, 'echo {answer}']\n"
        ),
    )
}

fn record(cmd: &str, db: &Path, id: &str) {
    let output = reel_tests::run(&[
        "run-command",
        cmd,
        "--session-id",
        id,
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn diff(db: &Path, a: &str, b: &str, format: &str) -> (Option<i32>, String) {
    let output = reel_tests::run(&[
        "diff",
        a,
        b,
        "--format",
        format,
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    (output.status.code(), stdout)
}

#[test]
fn sessions_that_did_the_same_are_equal_and_a_changed_tool_result_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let noted = command(dir.path(), "noted.yaml", "noted");
    let filed = command(dir.path(), "filed.yaml", "filed");
    record(&noted, &db, "one");
    record(&noted, &db, "two");
    record(&filed, &db, "three");

    let (status, text) = diff(&db, "one", "two", "text");
    assert_eq!(status, Some(0), "{text}");
    assert_eq!(text, "equal: 1 turns\n");

    let (status, text) = diff(&db, "one", "three", "text");
    assert_eq!(status, Some(1), "{text}");
    assert!(text.contains("turn 1 (A events"), "{text}");
    assert!(
        text.contains("tool result 1: note: noted\n -> note: filed\n"),
        "{text}"
    );
    assert!(
        text.contains("[-noted-]{+filed+}"),
        "the text that read it: {text}"
    );
    assert!(text.ends_with("different: 1 of 1 turns differ\n"), "{text}");

    let (status, json) = diff(&db, "one", "three", "json");
    assert_eq!(status, Some(1));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["equal"], false);
    let fields: Vec<&str> = report["differing"][0]["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["text", "tool result 1"]);

    // The page escapes what a session said: a tool answering markup shows it as text.
    let (status, html) = diff(&db, "one", "three", "html");
    assert_eq!(status, Some(1));
    assert!(html.contains("default-src 'none'"), "{html}");
    assert!(html.contains("<del>noted</del><ins>filed</ins>"), "{html}");
    let marked = command(dir.path(), "marked.yaml", "\"<b>bold</b>\"");
    record(&marked, &db, "marked");
    let (_, html) = diff(&db, "one", "marked", "html");
    assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"), "{html}");
    assert!(!html.contains("<b>bold"), "{html}");

    let (_, markdown) = diff(&db, "one", "three", "markdown");
    assert!(
        markdown.contains("| tool result 1 | note: noted  | note: filed  |"),
        "{markdown}"
    );

    // A fork of the whole session holds the same history: equal.
    let events = reel_tests::TimelineDb::open(&db)
        .events("one")
        .len()
        .to_string();
    let forked = reel_tests::run(&[
        "fork",
        "one",
        "--at",
        &events,
        "--new-session",
        "copy",
        "--timeline-db",
        db.to_str().unwrap(),
    ]);
    assert!(
        forked.status.success(),
        "{}",
        String::from_utf8_lossy(&forked.stderr)
    );
    let (status, text) = diff(&db, "one", "copy", "text");
    assert_eq!(status, Some(0), "{text}");

    // A session that is not there is an error, not a difference nobody can read.
    let (status, text) = diff(&db, "one", "nobody", "text");
    assert_eq!((status, text.as_str()), (Some(1), ""));
}

/// The diff page in a real browser (headless Chromium): what the sessions said shows as text
/// (no element it names exists, no script ran: the title is still the two ids), the word-level
/// changes are `<del>` and `<ins>` elements, and a screenshot is taken. Without Chromium the
/// test says so and skips, except under CI.
#[test]
fn the_diff_page_shows_hostile_text_as_text_in_a_real_browser() {
    let Some(browser) = reel_tests::chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let scripted = command(
        dir.path(),
        "a.yaml",
        "\"<script>document.title=1</script> kept\"",
    );
    let imaged = command(
        dir.path(),
        "b.yaml",
        "\"<img src=x onerror=document.title=2> kept\"",
    );
    record(&scripted, &db, "before");
    record(&imaged, &db, "after");
    let (status, html) = diff(&db, "before", "after", "html");
    assert_eq!(status, Some(1), "{html}");
    let page = dir.path().join("diff.html");
    std::fs::write(&page, &html).unwrap();

    let profile = dir.path().join("profile");
    let dom = reel_tests::headless::browse(&browser, &profile, &["--dump-dom"], &page);
    assert!(
        dom.contains("<h1>before and after</h1>"),
        "the page loaded: {dom}"
    );
    assert_eq!(
        reel_tests::headless::title(&dom),
        "before and after",
        "no script ran"
    );
    for element in ["<script", "<img"] {
        assert!(!dom.contains(element), "{element} became an element: {dom}");
    }
    assert!(
        dom.contains("&lt;script&gt;document.title=1&lt;/script&gt;"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;img src=x onerror=document.title=2&gt;"),
        "{dom}"
    );
    assert!(dom.contains("<del>") && dom.contains("<ins>"), "{dom}");

    let shot = dir.path().join("diff.png");
    reel_tests::headless::browse(
        &browser,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1000,700",
        ],
        &page,
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{} bytes",
        png.len()
    );
}
