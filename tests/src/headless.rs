//! Headless Chromium on a local page (Debian's `chromium`, found by [`crate::chromium`]): its
//! DOM after scripts would have run, or a screenshot, with nothing from the network.

use std::{path::Path, process::Command, time::Duration};

/// Runs headless Chromium on the file `page` with `args` (e.g. `--dump-dom`), its profile in
/// `profile`; returns its stdout. Panics when it does not finish within 90 s.
pub fn browse(browser: &Path, profile: &Path, args: &[&str], page: &Path) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The text of the page's `<title>` in a dumped DOM.
pub fn title(dom: &str) -> &str {
    dom.split("<title>")
        .nth(1)
        .and_then(|rest| rest.split("</title>").next())
        .unwrap_or_default()
}
