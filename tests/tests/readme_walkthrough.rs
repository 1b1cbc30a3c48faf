//! The commands of README.md and of every page in docs/, followed top to bottom as a new user
//! would on a fresh machine: each document's `sh` blocks, in order, in an empty folder with an
//! empty home, each command of which must succeed. A command ending in `&` runs in the
//! background until the document's end (a server: the next command waits for its port). Commands
//! that need the network, an API key, a model server or a long time are left out (the list is
//! below, with why); a DSN of the machine's PostgreSQL is pointed at a schema of the test's own,
//! and the documents' port 8080 at a free one.

use std::{
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use reel_tests::{free_port, postgres, reel_binary, repo_root, skip};

/// The documents a user follows, in the order README links them; every page of docs/ is one.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/protocol.md",
    "docs/command-files.md",
    "docs/durable-sessions.md",
    "docs/long-sessions.md",
    "docs/serving.md",
    "docs/editors-and-mcp.md",
    "docs/sinks-and-traces.md",
    "docs/limits.md",
    "docs/architecture.md",
    "docs/benchmarks.md",
];

/// The port the documents' servers listen on.
const DOCUMENTS_PORT: &str = "8080";

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
fn every_page_of_docs_is_followed() {
    let mut pages: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    for page in &pages {
        assert!(
            DOCUMENTS.contains(&page.as_str()),
            "{page} is not in the walkthrough's DOCUMENTS"
        );
        let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
        assert!(
            readme.contains(&format!("]({page})")),
            "README links {page}"
        );
    }
}

#[test]
fn the_readme_and_docs_work_when_followed_top_to_bottom() {
    let documents: Vec<(&str, Vec<String>)> = DOCUMENTS
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(repo_root().join(name)).unwrap();
            (*name, commands(&text))
        })
        .collect();
    let total: usize = documents.iter().map(|(_, commands)| commands.len()).sum();
    assert!(total > 40, "the documents' commands were found: {total}");
    for tool in ["jq", "sqlite3", "curl"] {
        if !available(tool) {
            skip(&format!("the documents use {tool}, which is not installed"));
            return;
        }
    }
    let Some(schema) = postgres() else { return };
    let mut ran = 0;
    for (name, commands) in &documents {
        ran += follow(name, commands, &schema.dsn);
    }
    assert!(ran > 35, "{ran} commands ran");
}

/// Runs one document's commands in a fresh folder and home; how many ran.
fn follow(document: &str, commands: &[String], dsn: &str) -> usize {
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
    let port = free_port().to_string();
    let mut background = Background(Vec::new());
    let mut ran = 0;
    for command in commands {
        if let Some((_, why)) = NOT_RUN.iter().find(|(marker, _)| command.contains(marker)) {
            eprintln!("{document}: not run ({why}): {}", command.trim());
            continue;
        }
        let command = command
            .replace(README_DSN, dsn)
            .replace(&format!(":{DOCUMENTS_PORT}"), &format!(":{port}"));
        if let Some(server) = without_comment(&command).trim_end().strip_suffix('&') {
            background.0.push(start_in(&work, &home, &path, server));
            if server.contains(&format!(":{port}")) {
                wait_for_port(&port, &mut background.0);
            }
            ran += 1;
            continue;
        }
        let output = run_in(&work, &home, &path, &command);
        assert!(
            output.status.success(),
            "{document}: the command failed ({}):\n{}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            command.trim(),
            tail(&output.stdout),
            tail(&output.stderr)
        );
        ran += 1;
    }
    ran
}

/// A one-line command without its trailing comment (` # ...` outside quotes).
fn without_comment(command: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in command.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            (None, '#') if previous.is_whitespace() => return &command[..at],
            _ => {}
        }
        previous = c;
    }
    command
}

/// The document's background commands, stopped at its end (and when a check fails).
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_in(work: &Path, home: &Path, path: &str, command: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("exec {}", command.trim()))
        .current_dir(work)
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until a background server listens on `port`, as a user waits for its first log line.
fn wait_for_port(port: &str, started: &mut [Child]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        if let Some(server) = started.last_mut()
            && let Ok(Some(status)) = server.try_wait()
        {
            panic!("the background server ended before it listened ({status})");
        }
        assert!(Instant::now() < deadline, "nothing listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
