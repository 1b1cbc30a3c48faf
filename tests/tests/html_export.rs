//! The HTML export in a real browser: headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs) loads an export of a session full of hostile text, and the page must show that
//! text as text: no element it names exists, no script ran (the title is still the prompt), and
//! a screenshot is taken. Without Chromium the test says so and skips, except under CI.

use reel_tests::{
    chromium,
    headless::{browse, title},
    reel, write_file,
};

const HOSTILE_REPLY: &str = "<script>document.title='pwned'</script> and <img src=x onerror=\"document.title='pwned'\"> done";

#[test]
fn hostile_text_renders_as_text_in_a_real_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(
        dir.path(),
        "script.yaml",
        &format!(
            "turns:\n  - - reasoning: \"<style>body{{display:none}}</style> thinking\"\n    - text: {}\n    - tool_call: {{id: call_1, name: leak, arguments: {{q: \"</pre><script>document.title='pwned'</script>\"}}}}\n  - - text: \"<iframe src='javascript:alert(1)'></iframe> final\"\n",
            serde_json::to_string(HOSTILE_REPLY).unwrap()
        ),
    );
    let cmd = write_file(
        dir.path(),
        "cmd.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"Show me </title><b>bold</b> & more\"\nprovider:\n  script: {script}\ntools:\n  - name: leak\n    description: Prints markup.\n    executor:\n      command: [sh, -c, \"printf '<object data=x></object> result'\"]\n"
        ),
    );
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let run = reel(&[
        "run-command",
        &cmd,
        "--session-id",
        "hostile",
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let page = dir.path().join("export.html");
    let export = reel(&[
        "export",
        "hostile",
        "--format",
        "html",
        "-o",
        page.to_str().unwrap(),
        "--timeline-db",
        db,
    ])
    .output()
    .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing from the network"
    );

    let profile = dir.path().join("profile");
    let dom = browse(&browser, &profile, &["--dump-dom"], &page);
    assert!(dom.contains("<main>"), "the page loaded: {dom}");
    // No script ran: the title is still the prompt.
    assert_eq!(
        title(&dom),
        "Show me &lt;/title&gt;&lt;b&gt;bold&lt;/b&gt; &amp; more"
    );
    // None of the markup in the text became an element.
    for element in ["<script", "<img", "<iframe", "<object", "<b>"] {
        assert!(!dom.contains(element), "{element} became an element");
    }
    assert_eq!(
        dom.matches("<style").count(),
        1,
        "only the page's own style"
    );
    // ... and all of it is there, as text.
    for text in [
        "&lt;script&gt;document.title='pwned'&lt;/script&gt; and &lt;img src=x onerror=\"document.title='pwned'\"&gt; done",
        "&lt;iframe src='javascript:alert(1)'&gt;&lt;/iframe&gt; final",
        "&lt;object data=x&gt;&lt;/object&gt; result",
        "&lt;style&gt;body{display:none}&lt;/style&gt; thinking",
    ] {
        assert!(dom.contains(text), "{text} shows as text");
    }
    assert!(
        dom.contains("<details class=\"reasoning\">") && dom.contains("<details class=\"tool\">")
    );

    let shot = dir.path().join("export.png");
    browse(
        &browser,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1000,900",
        ],
        &page,
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
