//! The README's commands, followed top to bottom as a new user would on a fresh machine: every
//! `sh` block's commands, in order, in an empty folder with an empty home, each of which must
//! succeed. Commands that need the network, an API key, a model server or a long time are left
//! out (the list is below, with why); a DSN of the machine's PostgreSQL is pointed at a schema of
//! the test's own.

use std::{path::Path, process::Command};

use reel_tests::{postgres, reel_binary, repo_root, skip};

/// Commands containing one of these are not run here, and why.
const NOT_RUN: &[(&str, &str)] = &[
    ("OPENAI_API_KEY=", "needs a key and the network"),
    ("ANTHROPIC_API_KEY=", "needs a key and the network"),
    ("--base-url", "needs a model server"),
    (
        ".venv-llm",
        "installs from PyPI (the local-model tests cover it)",
    ),
    (
        "cargo ",
        "builds reel (the test runs the binary cargo built)",
    ),
    ("reel bench", "takes minutes (CI runs it in short mode)"),
];

/// The README's PostgreSQL DSN.
const README_DSN: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The commands of every `sh` block, in order: continuation lines (`\` at the end) and quotes
/// that span lines are joined into one command.
fn commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current = String::new();
    for line in readme.lines() {
        if !in_block {
            in_block = line.trim() == "```sh";
            continue;
        }
        if line.trim() == "```" {
            in_block = false;
            continue;
        }
        if current.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        let open_quote = current.matches('\'').count() % 2 == 1;
        if !open_quote && !line.ends_with('\\') {
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

fn available(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

#[test]
fn the_readme_works_when_followed_top_to_bottom() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let commands = commands(&readme);
    assert!(
        commands.len() > 30,
        "the README's commands were found: {}",
        commands.len()
    );
    for tool in ["jq", "sqlite3"] {
        if !available(tool) {
            skip(&format!("the README uses {tool}, which is not installed"));
            return;
        }
    }
    let Some(schema) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::symlink(repo_root().join("examples"), work.join("examples")).unwrap();
    let bin = reel_binary().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for command in &commands {
        if let Some((_, why)) = NOT_RUN.iter().find(|(marker, _)| command.contains(marker)) {
            eprintln!("not run ({why}): {}", command.trim());
            continue;
        }
        let command = command.replace(README_DSN, &schema.dsn);
        let output = run_in(&work, &home, &path, &command);
        assert!(
            output.status.success(),
            "the README's command failed ({}):\n{}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            command.trim(),
            tail(&output.stdout),
            tail(&output.stderr)
        );
        ran += 1;
    }
    assert!(ran > 25, "{ran} commands ran");
}

fn run_in(work: &Path, home: &Path, path: &str, command: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(work)
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap()
}

/// The last lines of some output, for a failure message.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
