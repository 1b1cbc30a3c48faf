//! Harness for end-to-end tests: runs the real `reel` binary as a subprocess and checks what it
//! writes against the protocol.
//!
//! The test files in `tests/tests/` are declared as integration tests of `reel-cli`, so cargo
//! builds the `reel` binary before it runs them.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

pub mod acp_client;
pub mod approval_fixture;
pub mod caching_proxy;
#[cfg(test)]
mod cli_modules;
pub mod durable_streams_client;
pub mod headless;
pub mod jetstream;
mod local_llm;
pub mod mcp_server;
pub mod otlp_receiver;
mod page_driver;
mod peak_rss;
mod pg_schema;
pub mod rerun_checks;
mod rpc_client;
pub mod served;
mod spawned;
pub mod sse_server;
pub mod stored;
mod test_packages;
pub use test_packages::TestPackage;
mod timeline_db;
pub mod tls_proxy;
pub mod virtualenv;
pub mod webhook_receiver;

pub use local_llm::local_llm_python;
pub use page_driver::PageDriver;
pub use peak_rss::PeakRss;
pub use pg_schema::PgSchema;
pub use rpc_client::{RpcClient, assert_request_scoped};
pub use spawned::Spawned;
pub use timeline_db::{TimelineDb, TurnUsage};

#[doc(hidden)]
pub use tempfile as __tempfile;

use reel_proto::rpc::{RpcLine, rpc_line::Frame};
use serde_json::Value;

/// The `reel` binary of this build. The end-to-end tests are integration tests of `reel-cli`,
/// so cargo has built it, fresh, next to the test executables.
pub fn reel_binary() -> PathBuf {
    let mut dir = std::env::current_exe().expect("test executable path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let binary = dir.join("reel");
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        binary.display()
    );
    binary
}

/// Says that a test cannot run here, in the default output of `cargo test`, and returns.
/// Under CI (`CI` set) a skip is a failure: CI provides everything the tests need.
///
/// The message is written to the process's stderr directly: libtest captures `eprintln!` of a
/// passing test and would show nothing.
pub fn skip(reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI never skips a test, and this one would: {reason}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {reason}");
}

/// Debian's headless-capable Chromium (`.ci/run` installs it), as the path found on PATH;
/// `None` after saying so when there is none (never under CI).
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")])
        .find(|candidate| {
            Command::new(candidate)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        skip("no chromium on PATH (apt-get install chromium; .ci/run installs it)");
    }
    found
}

/// The PostgreSQL server the tests use (`REEL_TEST_POSTGRES`, default the machine's own), with
/// a schema of the test's own that is dropped when the returned value is; `None` after saying
/// so when the server does not answer (never under CI).
pub fn postgres() -> Option<PgSchema> {
    let server = std::env::var("REEL_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let host = server
        .rsplit_once('@')
        .map_or("127.0.0.1:5432", |(_, rest)| {
            rest.split(['/', '?']).next().unwrap_or(rest)
        });
    let reachable = std::net::ToSocketAddrs::to_socket_addrs(host)
        .ok()
        .and_then(|mut addresses| addresses.next())
        .is_some_and(|address| {
            std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(2))
                .is_ok()
        });
    if !reachable {
        skip(&format!(
            "PostgreSQL at {host} does not answer (set REEL_TEST_POSTGRES to use another server)"
        ));
        return None;
    }
    Some(PgSchema::create(&server))
}

/// Whether process `pid` no longer runs: gone, or a zombie nobody has reaped yet.
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Runs a Python script with `sqlite3` imported, as another program writing a database would.
pub fn python_sqlite(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let output = Command::new("python3")
        .args(["-c", &format!("import sqlite3, sys\n{script}")])
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The repository root (for `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A `reel` command ready to spawn, with stderr captured and no stdin.
pub fn reel(args: &[&str]) -> Command {
    let mut command = Command::new(reel_binary());
    command
        .args(args)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .env_remove("REEL_LOG");
    command
}

/// A port on 127.0.0.1 nothing listens on now (for a server started later, or a refused
/// connection).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    listener.local_addr().expect("a local address").port()
}

/// Runs `reel` to completion and returns its output.
pub fn run(args: &[&str]) -> Output {
    reel(args).output().expect("reel runs")
}

/// Runs `reel` to completion: its exit status, stdout and stderr as text.
pub fn run_text(args: &[&str]) -> (Option<i32>, String, String) {
    let output = run(args);
    (
        output.status.code(),
        String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Writes `text` to `dir/name` and returns the path as a string.
pub fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("write test file");
    path.to_str().expect("utf-8 path").to_owned()
}

/// Writes a command file that plays `script` and returns its path.
pub fn scripted_command(dir: &Path, script: &str) -> String {
    let script_path = write_file(dir, "script.yaml", script);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: test\ndescription: a test command\nprompt: \"test prompt\"\nprovider:\n  script: {script_path}\n"
        ),
    )
}

/// A frame line, parsed twice: as an `RpcLine` (the contract) and as raw JSON (for checks of the
/// encoding itself, such as ordinals being strings).
#[derive(Debug, Clone)]
pub struct FrameLine {
    pub line: RpcLine,
    pub json: Value,
    pub text: String,
}

impl FrameLine {
    pub fn frame(&self) -> &Frame {
        self.line.frame.as_ref().expect("every line has a frame")
    }

    pub fn ui_name(&self) -> Option<&str> {
        match self.frame() {
            Frame::UiEvent(ui) => Some(&ui.name),
            _ => None,
        }
    }

    pub fn done_status(&self) -> Option<&str> {
        match self.frame() {
            Frame::Done(done) => Some(&done.status),
            _ => None,
        }
    }
}

/// Parses every line of `stdout` as an `RpcLine` under the canonical JSON mapping; panics with
/// the offending line otherwise.
pub fn parse_frames(stdout: &[u8]) -> Vec<FrameLine> {
    let text = std::str::from_utf8(stdout).expect("stdout is UTF-8");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the last frame is newline-terminated"
    );
    text.lines()
        .map(|line| FrameLine {
            line: serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not an RpcLine ({e}): {line}")),
            json: serde_json::from_str(line).expect("JSON"),
            text: line.to_owned(),
        })
        .collect()
}

/// Checks that an output that also gets the log's own events (`exec:`, a webhook) `captured`
/// what stdout carried, the `backendEvent` frames besides, numbered 1, 2, 3, ... once each;
/// returns how many log events it holds.
pub fn assert_frames_with_the_log(captured: &[FrameLine], stdout: &[FrameLine]) -> usize {
    let without_backend: Vec<&str> = captured
        .iter()
        .filter(|f| !matches!(f.frame(), Frame::BackendEvent(_)))
        .map(|f| f.text.as_str())
        .collect();
    let shown: Vec<&str> = stdout.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(without_backend, shown, "the output got stdout's frames");
    let ordinals: Vec<u64> = captured
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::BackendEvent(event) => Some(event.ordinal),
            _ => None,
        })
        .collect();
    assert!(
        ordinals.iter().zip(1..).all(|(ordinal, n)| *ordinal == n),
        "every logged event once, in order: {ordinals:?}"
    );
    ordinals.len()
}

/// Checks the protocol invariants of a one-shot stream: hello first, done last and only last,
/// ordinals written as strings and never decreasing, one session id throughout.
pub fn assert_stream_shape(frames: &[FrameLine]) {
    assert!(frames.len() >= 2, "at least hello and done: {frames:#?}");
    assert!(
        matches!(frames[0].frame(), Frame::Hello(_)),
        "hello first: {}",
        frames[0].text
    );
    assert!(
        frames.last().unwrap().done_status().is_some(),
        "done last: {}",
        frames.last().unwrap().text
    );
    assert_eq!(
        frames.iter().filter(|f| f.done_status().is_some()).count(),
        1,
        "exactly one done"
    );
    let session = &frames[0].line.session_id;
    assert!(!session.is_empty());
    let mut last = 0u64;
    for frame in frames {
        assert_eq!(&frame.line.session_id, session);
        assert_eq!(frame.line.version, 1);
        for key in ["uiEvent", "backendEvent"] {
            if let Some(ordinal) = frame.json.get(key).and_then(|f| f.get("ordinal")) {
                let ordinal: u64 = ordinal
                    .as_str()
                    .expect("ordinals are JSON strings")
                    .parse()
                    .unwrap();
                assert!(
                    ordinal >= last,
                    "ordinals never decrease: {} after {last}",
                    frame.text
                );
                last = ordinal;
            }
        }
        if let Some(ordinal) = frame
            .json
            .get("snapshot")
            .and_then(|s| s.get("snapshotOrdinal"))
        {
            assert!(ordinal.is_string());
        }
    }
}

/// The names of the ui events, in order.
pub fn ui_names(frames: &[FrameLine]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| f.ui_name().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    /// The crate diagram (README's and the architecture page's) is the real dependency graph: each crate's own reel
    /// dependencies, as `cargo tree` prints them.
    #[test]
    fn the_readme_diagram_is_the_crate_graph() {
        let root = super::repo_root();
        let diagram = "cli (reel binary, clap) -> sinks         -> providers -> engine -> proto\n                        -> providers     -> engine\n                        -> command-tools -> engine\n                        -> parquet       -> engine\n                        -> storage       -> engine\n                        -> server        -> engine\n                        -> acp           -> mcp       -> engine\n                        -> mcp           -> engine\n                        -> nats          -> engine\n                        -> otel          -> engine\n                        -> bench         -> sinks, storage, nats\n                        -> allocator";
        for page in ["README.md", "docs/architecture.md"] {
            let text = std::fs::read_to_string(root.join(page)).unwrap();
            assert!(text.contains(diagram), "{page} shows the crate graph");
        }
        let expected: &[(&str, &[&str])] = &[
            (
                "cli",
                &[
                    "reel-acp",
                    "reel-allocator",
                    "reel-bench",
                    "reel-command-tools",
                    "reel-engine",
                    "reel-mcp",
                    "reel-nats",
                    "reel-otel",
                    "reel-parquet",
                    "reel-proto",
                    "reel-providers",
                    "reel-server",
                    "reel-sinks",
                    "reel-storage",
                ],
            ),
            ("server", &["reel-engine", "reel-proto"]),
            ("acp", &["reel-engine", "reel-mcp", "reel-proto"]),
            ("mcp", &["reel-engine", "reel-proto"]),
            ("nats", &["reel-engine", "reel-proto"]),
            ("otel", &["reel-engine", "reel-proto"]),
            ("allocator", &[]),
            ("command_tools", &["reel-engine"]),
            (
                "bench",
                &[
                    "reel-engine",
                    "reel-nats",
                    "reel-proto",
                    "reel-providers",
                    "reel-sinks",
                    "reel-storage",
                ],
            ),
            ("sinks", &["reel-engine", "reel-proto", "reel-providers"]),
            ("providers", &["reel-engine", "reel-proto"]),
            ("parquet", &["reel-engine", "reel-proto"]),
            ("storage", &["reel-engine", "reel-proto"]),
            ("engine", &["reel-proto"]),
            ("proto", &[]),
        ];
        for (crate_dir, reel_deps) in expected {
            let manifest =
                std::fs::read_to_string(root.join(crate_dir).join("Cargo.toml")).unwrap();
            let deps = manifest
                .split("[dependencies]")
                .nth(1)
                .unwrap_or_default()
                .split("\n[")
                .next()
                .unwrap_or_default();
            let declared: Vec<&str> = deps
                .lines()
                .filter_map(|line| line.split(['.', ' ', '=']).next())
                .filter(|name| name.starts_with("reel-"))
                .collect();
            let mut declared = declared;
            declared.sort_unstable();
            assert_eq!(&declared, reel_deps, "{crate_dir}/Cargo.toml");
        }
    }

    /// The files in tests/tests/ only run if cli/Cargo.toml declares them: check that it does.
    #[test]
    fn every_end_to_end_test_file_is_declared() {
        let manifest = std::fs::read_to_string(super::repo_root().join("cli/Cargo.toml")).unwrap();
        for entry in std::fs::read_dir(super::repo_root().join("tests/tests")).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if !name.ends_with(".rs") {
                continue;
            }
            let declared = format!("path = \"../tests/tests/{name}\"");
            assert!(
                manifest.contains(&declared),
                "cli/Cargo.toml must declare tests/tests/{name} as a [[test]]"
            );
        }
    }
}
