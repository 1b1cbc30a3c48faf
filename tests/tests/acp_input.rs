//! `reel acp` against what an editor (or anything on its stdin) may send: bytes that are not
//! UTF-8 and lines of tens of megabytes are answered -32700 and the agent goes on, holding no
//! such line; a `cwd` that cannot be a session's is refused before anything is written; idle
//! sessions are unloaded (their lease released) and come back on their next prompt; and a
//! relative command file's tools run from any working directory. A raw JSON-RPC client over
//! pipes, since the official SDKs never send such lines (`acp.rs` drives the SDKs).

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use reel_tests::{PeakRss, reel_binary, repo_root, run};
use serde_json::{Value, json};

/// A `reel acp` process and the lines it writes.
struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Agent {
    fn start(args: &[&str], cwd: &Path) -> Self {
        let mut child = Command::new(reel_binary())
            .arg("acp")
            .args(args)
            .current_dir(cwd)
            .env_remove("REEL_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("reel acp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("reel acp wrote a line that is no JSON ({e}): {line}")
                });
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut agent = Self {
            child,
            stdin,
            lines,
        };
        let init = agent.call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
        agent
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends request `id` and waits for its answer (notifications meanwhile are skipped).
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_bytes(format!("{line}\n").as_bytes());
        self.answer_to(&json!(id))
    }

    fn answer_to(&mut self, id: &Value) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("reel acp answers within a minute");
            if &line["id"] == id && line.get("method").is_none() {
                return line;
            }
        }
    }

    /// Waits for JSON-RPC's parse error (id null) whose message says `why`.
    fn expect_parse_error(&mut self, why: &str) {
        let answer = self.answer_to(&Value::Null);
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{answer}");
    }

    fn new_session(&mut self, id: u64, cwd: &Path) -> String {
        let answer = self.call(id, "session/new", json!({"cwd": cwd, "mcpServers": []}));
        answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned()
    }

    fn prompt(&mut self, id: u64, session: &str, text: &str) -> Value {
        let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
        self.call(id, "session/prompt", prompt)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn echo() -> String {
    repo_root().join("examples/echo.yaml").display().to_string()
}

#[test]
fn lines_that_are_no_utf8_or_too_long_are_answered_and_the_agent_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut agent = Agent::start(
        &[&echo(), "--timeline-db", db.to_str().unwrap()],
        dir.path(),
    );
    let before = resident_kib(agent.child.id());
    let peak = PeakRss::watch(agent.child.id());
    // A request whose text is not UTF-8.
    agent.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/list\",\"params\":{\"x\":\"\xff\xfe\"}}\n");
    agent.expect_parse_error("UTF-8");
    // A line of 64 MiB, sent in pieces: refused without being held.
    let piece = vec![b'a'; 1024 * 1024];
    agent.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\",\"params\":\"");
    for _ in 0..64 {
        agent.send_bytes(&piece);
    }
    agent.send_bytes(b"\"}\n");
    agent.expect_parse_error("longer");
    // The agent goes on: a session, a prompt.
    let session = agent.new_session(9, dir.path());
    let answer = agent.prompt(10, &session, "still here");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // At most the 16 MiB line limit, and some, is ever held of it.
    let grown = peak.stop().saturating_sub(before);
    assert!(
        grown < 40 * 1024,
        "the agent's memory grew by {grown} KiB: it held the 64 MiB line"
    );
}

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_cwd_that_cannot_be_a_sessions_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut agent = Agent::start(
        &[&echo(), "--timeline-db", db.to_str().unwrap()],
        dir.path(),
    );
    let long = format!("/{}", "d".repeat(5000));
    let refused: [Value; 5] = [
        json!("relative/dir"),
        json!(dir.path().join("missing")),
        json!(file),
        json!(long),
        json!("/tmp/with\u{0}nul"),
    ];
    for (at, cwd) in refused.iter().enumerate() {
        let answer = agent.call(
            20 + at as u64,
            "session/new",
            json!({"cwd": cwd, "mcpServers": []}),
        );
        assert_eq!(answer["error"]["code"], -32602, "{cwd}: {answer}");
    }
    let listed = agent.call(30, "session/list", json!({}));
    assert_eq!(listed["result"]["sessions"], json!([]), "{listed}");
}

#[test]
fn an_idle_session_is_unloaded_and_its_next_prompt_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let mut agent = Agent::start(
        &["--idle-timeout", "1s", &echo(), "--timeline-db", db],
        dir.path(),
    );
    let session = agent.new_session(1, dir.path());
    assert_eq!(
        agent.prompt(2, &session, "one")["result"]["stopReason"],
        "end_turn"
    );
    // Unloaded once idle: another process may write it then.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let other = run(&[
            "run-command",
            &echo(),
            "--timeline-db",
            db,
            "--session-id",
            &session,
            "--resume",
        ]);
        if other.status.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the idle session kept its lease: {}",
            String::from_utf8_lossy(&other.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The editor's next prompt loads it again, with what the other process wrote.
    let answer = agent.prompt(3, &session, "two");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let export = run(&[
        "export",
        &session,
        "--timeline-db",
        db,
        "--format",
        "markdown",
    ]);
    let text = String::from_utf8_lossy(&export.stdout);
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in {text}"))
    };
    assert!(
        at("one") < at("Hello world") && at("Hello world") < at("two"),
        "{text}"
    );
    assert_eq!(
        agent.call(4, "session/close", json!({"sessionId": session}))["result"],
        json!({})
    );
}

#[test]
fn a_relative_command_files_tools_run_from_the_editors_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let project = tempfile::tempdir().unwrap();
    // Started in the repository with a relative path; the session's tools run elsewhere.
    let mut agent = Agent::start(
        &[
            "examples/weather-tool.yaml",
            "--timeline-db",
            db.to_str().unwrap(),
        ],
        &repo_root(),
    );
    let session = agent.new_session(1, project.path());
    let answer = agent.prompt(2, &session, "What is the weather in Paris?");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let export = run(&[
        "export",
        &session,
        "--timeline-db",
        db.to_str().unwrap(),
        "--format",
        "markdown",
    ]);
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(!text.contains("cannot start the tool command"), "{text}");
    // The tool's own output, which only the tool writes.
    assert!(text.contains("temperature_c"), "{text}");
}
