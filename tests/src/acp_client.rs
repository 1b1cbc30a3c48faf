//! The ACP client of the tests: `tests/node/acp_client.mjs`, on the official TypeScript SDK
//! (`@agentclientprotocol/sdk`, locked in `tests/node/package-lock.json`), driving a real
//! `reel acp` over stdio. Its packages are installed once with `npm ci` (the set-up's one use
//! of the npm registry; `.ci/run` installs them first).

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

/// The folder of the Node clients.
fn node_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/node")
}

/// Installs the clients' packages unless they are there (under a lock: tests run at once).
fn install() -> PathBuf {
    let folder = node_folder();
    let lock_path = crate::virtualenv::target_dir().join("node-clients.lock");
    let lock = File::create(&lock_path).expect("create the npm lock file");
    lock.lock().expect("lock the npm install");
    let installed = folder.join("node_modules/@agentclientprotocol/sdk/package.json");
    if !installed.exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&folder)
            .status()
            .expect("npm runs (Node.js 20 and npm are needed for the ACP tests)");
        assert!(status.success(), "npm ci in {} failed", folder.display());
    }
    folder
}

/// Runs the SDK client with `scenario` (see acp_client.mjs: `steps`, `permission`) against
/// `reel acp` with `args`; returns its report: `results`, `updates`, `permissions`, `exit`.
pub fn acp_session(scenario: &Value, args: &[&str]) -> Value {
    let folder = install();
    let output = Command::new("node")
        .arg(folder.join("acp_client.mjs"))
        .arg(scenario.to_string())
        .arg(crate::reel_binary())
        .arg("acp")
        .args(args)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the ACP client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("the ACP client's report is not JSON ({e}):\n{stdout}\n{stderr}")
    })
}

/// The step results of a report, after `initialize`.
pub fn step_results(report: &Value) -> Vec<Value> {
    report["results"].as_array().expect("results")[1..].to_vec()
}

/// The `session/update` kinds of a report, in order.
pub fn update_kinds(report: &Value) -> Vec<String> {
    updates(report)
        .iter()
        .map(|u| {
            u["update"]["sessionUpdate"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The updates of a report.
pub fn updates(report: &Value) -> Vec<Value> {
    report["updates"].as_array().expect("updates").clone()
}

/// The text of the chunks of kind `kind` (e.g. `agent_message_chunk`), joined.
pub fn chunk_text(report: &Value, kind: &str) -> String {
    updates(report)
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == kind)
        .map(|u| u["update"]["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// The Python SDK's version the second client runs on.
const PYTHON_SDK: &str = "agent-client-protocol==0.12.1";

/// Runs `tests/python/acp_client.py` (the official Python SDK; its virtualenv is built once in
/// the target folder) against `reel acp` with `args`, its sessions in `cwd`; returns its report.
pub fn python_acp_session(cwd: &Path, args: &[&str]) -> Value {
    let venv = crate::virtualenv::target_dir().join("venv-acp");
    let python = crate::virtualenv::build(&venv, &[&[PYTHON_SDK]])
        .unwrap_or_else(|e| panic!("cannot build the ACP client's virtualenv: {e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/acp_client.py");
    let output = Command::new(python)
        .arg(script)
        .arg(cwd)
        .arg(crate::reel_binary())
        .arg("acp")
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python ACP client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Python client's report is not JSON ({e}):\n{stdout}"))
}
