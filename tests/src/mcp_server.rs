//! The MCP server of the tests: `tests/python/mcp_server.py` on the official Python SDK (PyPI
//! `mcp`; its virtualenv is built once in the target folder).

use std::path::Path;

/// The command that starts the test MCP server over stdio: `[python, script]`; `None` after
/// saying why not (never under CI).
pub fn mcp_server_command() -> Option<Vec<String>> {
    let python = crate::TestPackage::McpServer.ready()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/mcp_server.py");
    Some(vec![
        python.display().to_string(),
        script.display().to_string(),
    ])
}

/// The test MCP server on streamable HTTP (127.0.0.1, path `/mcp`); stopped when dropped.
pub struct HttpMcpServer {
    child: std::process::Child,
    pub url: String,
}

impl HttpMcpServer {
    /// Starts it and waits until it listens; `None` when its package cannot be had (said).
    pub fn start() -> Option<Self> {
        let command = mcp_server_command()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(&command[0])
            .arg(&command[1])
            .args(["http", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the MCP server starts");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the HTTP MCP server did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        })
    }
}

impl Drop for HttpMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
