//! The `reel` binary. stdout carries the command's output (protocol frames in jsonl / rpc mode);
//! every log line goes to stderr.

// The command line and one module per subcommand: a subcommand uses the shared set-up below,
// never another subcommand (tests/src/cli_modules.rs checks it).
mod cli;
mod commands;

// Shared set-up.
mod acp_stdio;
mod bounded_lines;
mod command_file;
mod exit;
mod hosting;
mod outputs;
mod persistence;
mod prepare;
mod rerun;
mod run_args;
mod same_file;
mod signals;
mod sink_uri;
mod stdin_rpc;
mod stored;
mod template;
mod terminal_approver;
mod tool_servers;
mod toolbox;

use std::{io::IsTerminal, process::ExitCode};

use tracing_subscriber::EnvFilter;

// mimalloc, for frees on other threads than the allocation's (see reel_allocator).
#[global_allocator]
static ALLOCATOR: reel_allocator::Allocator = reel_allocator::Allocator;

fn main() -> ExitCode {
    // reel runs itself as the guard of each command tool (see reel_command_tools::run_tool_guard):
    // that process does nothing else, so it is dispatched before anything is set up.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == toolbox::GUARD_COMMAND) {
        let code = reel_command_tools::run_tool_guard(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let purging = reel_allocator::return_freed_memory_soon();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_env("REEL_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,sqlx=error,rmcp=warn,async_nats=warn")),
        )
        .with_target(false)
        .without_time()
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(error) = purging {
        tracing::warn!(
            "no thread to give freed memory back to the system ({error}): it goes back at later frees"
        );
    }

    let parsed = cli::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(workers) = cli::runtime_workers(&parsed) {
        runtime.worker_threads(workers);
    }
    let runtime = match runtime.build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("cannot start the async runtime: {error}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let status = runtime.block_on(cli::run(parsed));
    // Every output is flushed by now. A read of stdin may still be blocked in a runtime thread
    // (a shutdown request arrived while the client kept stdin open): do not wait for it.
    runtime.shutdown_background();
    ExitCode::from(status)
}
