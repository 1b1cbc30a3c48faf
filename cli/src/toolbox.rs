//! Turns a command file's tool declarations into the engine's [`Toolbox`].
//!
//! A command's program is resolved against the command file's folder when it names a path
//! (`./tools/weather.sh`), so a command file and its tools move together; a bare name (`jq`)
//! is looked up on PATH as usual. The tool runs in reel's working directory, so a tool that
//! works on files sees the user's files.

use std::time::Duration;

use reel_engine::{
    CommandTool, DEFAULT_MAX_ITERATIONS, Tool, ToolDefinition, ToolExecutor, Toolbox,
};

use crate::command_file::{CommandFile, ExecutorDeclaration};

/// How long a command tool may run unless its declaration says otherwise.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reel waits for the client to answer a client tool call.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);
/// The most stdout of a command tool the model gets.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The toolbox of `command`; `max_iterations` (a flag) overrides the file's; `hidden_env`
/// names variables the tools must not see (the API key's).
pub fn build(
    command: &CommandFile,
    max_iterations: Option<u32>,
    hidden_env: &[String],
) -> Result<Toolbox, String> {
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
                        return Err(format!("tool {:?}: the command is empty", declared.name));
                    };
                    if program.contains('/') {
                        *program = command
                            .resolve(std::path::Path::new(program))
                            .display()
                            .to_string();
                    }
                    ToolExecutor::Command(CommandTool {
                        argv,
                        timeout: timeout.unwrap_or(COMMAND_TIMEOUT),
                        max_output_bytes: declared.max_output_bytes.unwrap_or(MAX_OUTPUT_BYTES),
                        hidden_env: hidden_env.to_vec(),
                        working_dir: None,
                    })
                }
            };
            Ok(Tool {
                definition: ToolDefinition {
                    name: declared.name.clone(),
                    description: declared.description.clone(),
                    parameters: declared.parameters.clone(),
                },
                executor,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let max_iterations = max_iterations
        .or(command.max_iterations)
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    Toolbox::new(tools, max_iterations)
        .map(|toolbox| toolbox.with_first_call(command.tool_choice))
        .map_err(|e| format!("tools: {e}"))
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
