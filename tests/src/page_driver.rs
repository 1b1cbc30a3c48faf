//! A page driven in a real browser: Debian's headless Chromium, driven by Playwright (from PyPI,
//! pinned in `tools/playwright`, in a virtualenv under `target/`) running one of the scripts in
//! `tests/browser/`, which prints one JSON line of what it saw.

use std::{ffi::OsString, path::PathBuf, process::Command};

use serde_json::Value;

use crate::{chromium, repo_root};

/// Chromium and Playwright's Python, ready; `None` after saying why not (never under CI).
pub struct PageDriver {
    python: PathBuf,
    browser: PathBuf,
}

impl PageDriver {
    pub fn ready() -> Option<Self> {
        let browser = chromium()?;
        let python = crate::TestPackage::Playwright.ready()?;
        Some(Self { python, browser })
    }

    /// Runs `tests/browser/SCRIPT` with `server_port`, the browser, then `more` arguments;
    /// its report. Panics with what it printed when it fails.
    pub async fn run(&self, script: &str, server_port: &str, more: Vec<OsString>) -> Value {
        let mut args: Vec<OsString> = vec![
            repo_root()
                .join("tests/browser")
                .join(script)
                .into_os_string(),
            server_port.into(),
            self.browser.clone().into_os_string(),
        ];
        args.extend(more);
        let python = self.python.clone();
        let run = tokio::task::spawn_blocking(move || {
            Command::new(python)
                .args(args)
                .output()
                .expect("the page driver runs")
        })
        .await
        .unwrap();
        let report = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{script} failed a check:\n{report}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        serde_json::from_str(report.trim()).expect("the driver reports JSON")
    }
}
