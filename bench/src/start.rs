//! Memory at start: the peak resident set of `reel --version` and of a one-prompt scripted
//! run, each in a child process of its own. It fails past 10 MB for `--version`: mimalloc
//! committing each arena at once made it 14 (see `reel_allocator`).

use std::process::Command;

use nix::sys::resource::{UsageWho, getrusage};

/// The most `reel --version` may keep resident.
const VERSION_LIMIT_KB: i64 = 10 * 1024;

/// Prints the figures; false when `--version` passed its limit.
pub fn run() -> std::io::Result<bool> {
    let exe = std::env::current_exe()?;
    let dir = tempfile::tempdir()?;
    let command = dir.path().join("start.yaml");
    std::fs::write(&command, "name: start\ndescription: start\nprompt: hello\n")?;
    // The children's peak is the largest of every child waited for so far: the smaller
    // command goes first, and this part runs before any other starts a child.
    let version = peak_of(Command::new(&exe).arg("--version"))?;
    let run = peak_of(
        Command::new(&exe)
            .args(["run-command"])
            .arg(&command)
            .current_dir(dir.path()),
    )?;
    println!("memory at start (peak resident set of a child process):");
    println!(
        "  reel --version                  {:>7} KB (limit {VERSION_LIMIT_KB})",
        version
    );
    println!("  reel run-command (one prompt)   {:>7} KB", run);
    let held = version <= VERSION_LIMIT_KB;
    if !held {
        eprintln!(
            "reel bench: reel --version keeps {version} KB resident, over {VERSION_LIMIT_KB}"
        );
    }
    Ok(held)
}

/// Runs `command` to its end (its output discarded); the children's peak resident set in KB.
fn peak_of(command: &mut Command) -> std::io::Result<i64> {
    let status = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "{command:?} failed: {status}"
        )));
    }
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).map_err(std::io::Error::from)?;
    Ok(usage.max_rss())
}
