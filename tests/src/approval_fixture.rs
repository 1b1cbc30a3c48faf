//! The command the approval tests share: its model calls `send`, a tool that asks a person
//! first (`approval: ask`) and counts its runs in a file, then shows the conversation it was
//! given.

use std::path::{Path, PathBuf};

use crate::{RpcClient, write_file};

/// Writes the command into `dir`; `extra` goes into the tool's definition (e.g.
/// `"    approval_timeout: 1s\n"`). The command file's path, and the file each run of the
/// tool appends a line to.
pub fn send_command(dir: &Path, extra: &str) -> (String, PathBuf) {
    let count = dir.join("count");
    let script = write_file(
        dir,
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {to: team}}\n  - - echo_context\n",
    );
    let cmd = write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: go\nprovider:\n  script: {script}\ntools:\n  - name: send\n    description: Sends a mail.\n    approval: ask\n{extra}    executor:\n      command: [sh, -c, 'echo sent >> {}; echo sent']\n",
            count.display()
        ),
    );
    (cmd, count)
}

/// A `run-command CMD --rpc --stdin-rpc` process of session `session` kept in the SQLite
/// database `db` (`resume`: the stored one).
pub fn stored_rpc(cmd: &str, db: &Path, session: &str, resume: bool) -> RpcClient {
    let db = db.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "run-command",
        cmd,
        "--rpc",
        "--stdin-rpc",
        "--timeline-db",
        db,
        "--session-id",
        session,
    ];
    if resume {
        args.push("--resume");
    }
    RpcClient::start(&args)
}

/// How many times the tool ran.
pub fn runs(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}
