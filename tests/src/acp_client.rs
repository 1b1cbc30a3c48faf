//! The ACP client of the tests: `tests/node/acp_client.mjs`, on the official TypeScript SDK
//! (`@agentclientprotocol/sdk`, locked in `tests/node/package-lock.json`), driving a real
//! `reel acp` over stdio. Its packages are installed once with `npm ci` (see
//! [`crate::TestPackage`]).

use std::{path::Path, process::Command};

use serde_json::Value;

/// Runs the SDK client with `scenario` (see acp_client.mjs: `steps`, `permission`) against
/// `reel acp` with `args`; returns its report: `results`, `updates`, `permissions`, `exit`.
pub fn acp_session(scenario: &Value, args: &[&str]) -> Option<Value> {
    let folder = crate::TestPackage::NodeClients.ready()?;
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
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("the ACP client's report is not JSON ({e}):\n{stdout}\n{stderr}")
    });
    Some(report)
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

/// Runs `tests/python/acp_client.py` (the official Python SDK; its virtualenv is built once in
/// the target folder) against `reel acp` with `args`, its sessions in `cwd`; returns its report.
pub fn python_acp_session(cwd: &Path, args: &[&str]) -> Option<Value> {
    let python = crate::TestPackage::AcpPython.ready()?;
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
    let report = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Python client's report is not JSON ({e}):\n{stdout}"));
    Some(report)
}
