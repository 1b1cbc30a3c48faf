//! Memory at start: the peak resident set (VmHWM) of `reel --version`, and of a `--stdin-rpc`
//! process that has answered one prompt, each a child process of its own, read from /proc
//! while the child waits. It fails past 10 MB for `--version`: mimalloc committing each arena
//! at once made it 15, the loader reading 1.3 MB of relocations another 1.7.
//!
//! The peak is read from the child's /proc entry while it is blocked: `--version` writing into
//! a pipe that is already full, the session reading its next request. (`getrusage` of the
//! children would not do: a child started by `posix_spawn` shares the parent's memory until it
//! runs the new program, and the kernel counts the parent's peak as the child's.)

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nix::fcntl::{FcntlArg, OFlag, fcntl};

/// The most `reel --version` may keep resident.
const VERSION_LIMIT_KB: u64 = 10 * 1024;

/// Prints the figures; false when `--version` passed its limit.
pub fn run() -> std::io::Result<bool> {
    let exe = std::env::current_exe()?;
    let version = version_peak(&exe)?;
    let session = session_peak(&exe)?;
    println!("memory at start (peak resident set of a child process, VmHWM):");
    println!("  reel --version                        {version:>7} KB (limit {VERSION_LIMIT_KB})");
    println!("  reel --stdin-rpc after one prompt     {session:>7} KB");
    let held = version <= VERSION_LIMIT_KB;
    if !held {
        eprintln!(
            "reel bench: reel --version keeps {version} KB resident, over {VERSION_LIMIT_KB}"
        );
    }
    Ok(held)
}

/// `reel --version`'s peak, read while it waits to write into a full pipe.
fn version_peak(exe: &std::path::Path) -> std::io::Result<u64> {
    let (reader, mut writer) = std::io::pipe()?;
    fcntl(&writer, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(std::io::Error::from)?;
    let block = [0u8; 4096];
    while writer.write(&block).is_ok() {}
    fcntl(&writer, FcntlArg::F_SETFL(OFlag::empty())).map_err(std::io::Error::from)?;
    let mut child = Command::new(exe)
        .arg("--version")
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()?;
    let peak = peak_when_waiting(&child, "pipe_write");
    let _ = child.kill();
    child.wait()?;
    drop(reader);
    peak
}

/// A `--stdin-rpc` session's peak after it answered one prompt, read while it waits for the
/// next request.
fn session_peak(exe: &std::path::Path) -> std::io::Result<u64> {
    let dir = tempfile::tempdir()?;
    let command = dir.path().join("start.yaml");
    std::fs::write(&command, "name: start\ndescription: start\nprompt: hello\n")?;
    let mut child = Command::new(exe)
        .arg("run-command")
        .arg(&command)
        .args(["--rpc", "--stdin-rpc"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut input = child.stdin.take().expect("piped");
    writeln!(
        input,
        r#"{{"requestId":"a","submit":{{"prompt":"hello"}}}}"#
    )?;
    input.flush()?;
    let frames = BufReader::new(child.stdout.take().expect("piped"));
    for frame in frames.lines() {
        if frame?.contains(r#""done""#) {
            break;
        }
    }
    let peak = peak_when_waiting(&child, "");
    drop(input);
    child.wait()?;
    peak
}

/// The child's VmHWM once it sleeps (in `wait_channel`, when one is named), within 10 s.
fn peak_when_waiting(child: &Child, wait_channel: &str) -> std::io::Result<u64> {
    let pid = child.id().to_string();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let channel = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        let asleep = status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('S'));
        if asleep && channel.contains(wait_channel) {
            let peak = crate::proc_status_kib(&pid, "VmHWM");
            if peak > 0 {
                return Ok(peak);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(std::io::Error::other(format!(
        "the child {pid} did not wait as expected within 10 s"
    )))
}
