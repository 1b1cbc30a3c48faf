//! One module per subcommand of `reel`. A subcommand builds on the shared set-up (the modules
//! beside this folder: flags of a run, stored sessions, hosting, outputs, persistence), never on
//! another subcommand; `tests/src/cli_modules.rs` checks that no import goes from one to another.

pub mod acp;
pub mod diff;
pub mod export;
pub mod fork;
pub mod prune;
pub mod redact;
pub mod replay;
pub mod rm;
pub mod run_command;
pub mod search;
pub mod serve;
pub mod sessions;
pub mod show;
pub mod tail;
pub mod test;
pub mod verify;
