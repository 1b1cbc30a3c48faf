//! Command tools: a model's tool call run as a local subprocess.
//!
//! The engine runs tools through its [`ToolService`](reel_engine::ToolService) trait and spawns
//! no process itself; this crate is where spawning lives. A [`CommandTool`] is the service: it
//! starts the declared command in its own process group, hands it the call's arguments on stdin
//! and reads the result from stdout, bounded in time and bytes. [`run_tool_guard`] is the small
//! process between reel and the tool (`reel __tool-guard`) that kills the tool's group when reel
//! dies, even by `kill -9`.

mod command;
mod guard;

pub use command::CommandTool;
pub use guard::run_tool_guard;
