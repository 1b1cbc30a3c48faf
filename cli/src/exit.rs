//! The exit statuses of `reel`: what a script or a supervisor reads from a stopped process.

pub const OK: u8 = 0;
/// The run failed, the setup failed, or an output failed.
pub const FAILED: u8 = 1;
/// Stopped by SIGINT (128 + 2), as shells report it.
pub const INTERRUPTED: u8 = 130;
/// Stopped by SIGTERM (128 + 15).
pub const TERMINATED: u8 = 143;
/// Stopped by SIGHUP (128 + 1): the terminal or the parent went away.
pub const HUNG_UP: u8 = 129;
/// Flags that do not go together (clap uses the same status for its own usage errors).
pub const USAGE: u8 = 2;
/// The run waits for a person's decision on a tool call, and nobody here could give it (no
/// terminal): it waits in the session's store; `reel approve FILE SESSION CALL_ID --decision ...`
/// continues it.
pub const WAITING: u8 = 3;
/// `reel rerun`: the re-run went another way than the recording (the divergence is on stdout).
pub const DIVERGED: u8 = 3;
