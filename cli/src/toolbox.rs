//! Turns a command file's tool declarations into the engine's [`Toolbox`].
//!
//! A command's program is resolved against the command file's folder when it names a path
//! (`./tools/weather.sh`), so a command file and its tools move together; a bare name (`jq`)
//! is looked up on PATH as usual. The tool runs in reel's working directory, so a tool that
//! works on files sees the user's files.
//!
//! A command tool's environment is built from an allow-list: [`BASE_ENV`] and the names its
//! declaration lists under `env:`, never anything else (other providers' keys, cloud
//! credentials, database passwords stay with reel). It runs under reel's tool guard (`reel
//! __tool-guard`), which kills its process group if reel dies.

use anyhow::Context;
use std::{ffi::OsString, time::Duration};

use reel_command_tools::CommandTool;
use reel_engine::{
    DEFAULT_MAX_ITERATIONS, OnInterrupted, Tool, ToolDefinition, ToolExecutor, Toolbox,
};

use crate::command_file::{CommandFile, ExecutorDeclaration};

/// How long a command tool may run unless its declaration says otherwise.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reel waits for the client to answer a client tool call.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);
/// The most stdout of a command tool the model gets, unless its declaration says otherwise.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// The most a declaration may allow: output goes to the model and onto the log.
const MAX_OUTPUT_CEILING: usize = 16 * 1024 * 1024;

/// The variables every command tool gets from reel's environment (when they are set).
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TMPDIR"];

/// The first argument that makes reel the guard of a command tool.
pub const GUARD_COMMAND: &str = "__tool-guard";

/// The toolbox of `command`; `max_iterations` (a flag) overrides the file's; `api_key_env`
/// names the variable no tool may ask for (the API key's).
pub fn build(
    command: &CommandFile,
    max_iterations: Option<u32>,
    api_key_env: &str,
) -> anyhow::Result<Toolbox> {
    let guard = guard_command();
    let tools = command
        .tools
        .iter()
        .map(|declared| {
            let timeout = declared.timeout_ms.map(Duration::from_millis);
            let executor = match &declared.executor {
                ExecutorDeclaration::Client => ToolExecutor::Client {
                    timeout: timeout.unwrap_or(CLIENT_TIMEOUT),
                },
                ExecutorDeclaration::Command(argv) => {
                    let mut argv = argv.clone();
                    let Some(program) = argv.first_mut() else {
                        return Err(anyhow::anyhow!("tool {:?}: the command is empty", declared.name));
                    };
                    if program.contains('/') {
                        *program = command
                            .resolve(std::path::Path::new(program))
                            .display()
                            .to_string();
                    }
                    let max_output_bytes = declared.max_output_bytes.unwrap_or(MAX_OUTPUT_BYTES);
                    if max_output_bytes > MAX_OUTPUT_CEILING {
                        return Err(anyhow::anyhow!(
                            "tool {:?}: max_output_bytes is {max_output_bytes}; the most reel allows is {MAX_OUTPUT_CEILING} (16 MiB)",
                            declared.name
                        ));
                    }
                    if let Some(name) = declared.env.iter().find(|name| *name == api_key_env) {
                        return Err(anyhow::anyhow!(
                            "tool {:?} asks for {name}, the variable that holds the API key: tools never see the key",
                            declared.name
                        ));
                    }
                    let mut env: Vec<String> = BASE_ENV.iter().map(|n| (*n).to_owned()).collect();
                    env.extend(declared.env.iter().cloned());
                    ToolExecutor::Service(std::sync::Arc::new(CommandTool {
                        argv,
                        timeout: timeout.unwrap_or(COMMAND_TIMEOUT),
                        max_output_bytes,
                        env,
                        working_dir: None,
                        guard: guard.clone(),
                    }))
                }
            };
            if declared.on_interrupted == OnInterrupted::Retry && !declared.idempotent {
                return Err(anyhow::anyhow!(
                    "tool {:?}: on_interrupted: retry runs a call again after its process ended in the middle of it, which only a tool that does a repeated call's side effect once may do: declare it idempotent: true (it reads REEL_IDEMPOTENCY_KEY), or choose fail or ask",
                    declared.name
                ));
            }
            Ok(Tool {
                definition: ToolDefinition {
                    name: declared.name.clone(),
                    description: declared.description.clone(),
                    parameters: declared.parameters.clone(),
                },
                executor,
                approval: declared.approval,
                approval_timeout: declared.approval_timeout,
                on_interrupted: declared.on_interrupted,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let max_iterations = max_iterations
        .or(command.max_iterations)
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    Toolbox::new(tools, max_iterations)
        .map(|toolbox| toolbox.with_first_call(command.tool_choice))
        .context("tools")
}

/// `reel __tool-guard`, by the path of this very binary; `None` (tools then start directly,
/// and outlive a reel killed with `kill -9`) when that path cannot be found.
fn guard_command() -> Option<Vec<OsString>> {
    match std::env::current_exe() {
        Ok(exe) => Some(vec![exe.into_os_string(), GUARD_COMMAND.into()]),
        Err(error) => {
            tracing::warn!(
                "cannot find reel's own binary ({error}): command tools run without their guard"
            );
            None
        }
    }
}

/// The programs of `command`'s command tools that are paths (a bare name is looked up on
/// PATH), by tool name, resolved as the toolbox resolves them.
pub fn programs(command: &CommandFile) -> Vec<(String, std::path::PathBuf)> {
    command
        .tools
        .iter()
        .filter_map(|declared| match &declared.executor {
            ExecutorDeclaration::Command(argv) => {
                let program = argv.first().filter(|p| p.contains('/'))?;
                Some((
                    declared.name.clone(),
                    command.resolve(std::path::Path::new(program)),
                ))
            }
            ExecutorDeclaration::Client => None,
        })
        .collect()
}
