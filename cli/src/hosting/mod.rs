//! What `reel serve` and `reel acp` share: the sessions one process hosts, kept in one
//! timeline database, each running a command file prepared as `run-command --stdin-rpc
//! --session-id ID --resume` would.

mod commands;
mod sessions;
mod shared_connection;

pub use commands::Commands;
pub use sessions::{CommandSessions, RunCommandLine, Setup};
