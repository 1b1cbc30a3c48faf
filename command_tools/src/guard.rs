//! The tool guard: a small process between reel and a command tool that kills the tool's whole
//! process group when reel dies, even by `kill -9`.
//!
//! reel starts the guard in a new process group and talks to it over the guard's stdin: first
//! the call's arguments (`LENGTH\n` and that many bytes), then nothing, keeping the pipe open
//! for as long as the call runs. The guard starts the tool in its own group (stdout and stderr
//! are reel's pipes, inherited), hands it the arguments on its stdin, and waits. When its stdin
//! reaches end of file (reel closed it at the call's end, or reel died and the kernel closed it)
//! the guard kills the group, the tool and everything it started with it. It exits as the tool
//! did: with its exit code, or by the signal that ended it.
//!
//! What remains possible: a tool that moves its children out of the group (`setsid`, a daemon
//! that detaches) keeps them alive past reel, as it would past any supervisor that kills by
//! group.

use std::{
    ffi::OsString,
    io::{BufRead, Read, Write},
    os::unix::process::ExitStatusExt,
    process::{Command, Stdio},
};

use rustix::process::{Signal, getpid, kill_current_process_group, kill_process};

/// The longest arguments a guard accepts (a model's arguments are far smaller).
const MAX_ARGUMENTS: usize = 64 * 1024 * 1024;
/// The exit code when the tool cannot be started, as shells use it.
const CANNOT_START: i32 = 127;

/// Writes the guard's part of the protocol: the arguments, framed.
pub(crate) fn frame_arguments(arguments: &str) -> Vec<u8> {
    let mut framed = format!("{}\n", arguments.len()).into_bytes();
    framed.extend_from_slice(arguments.as_bytes());
    framed
}

/// Runs the guard for the tool `argv` (program and arguments); returns the exit code when the
/// tool exited, and ends the process by the tool's signal when a signal ended it.
pub fn run_tool_guard(argv: &[OsString]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("reel tool-guard: no tool command given");
        return CANNOT_START;
    };
    let arguments = match read_arguments(&mut std::io::stdin().lock()) {
        Ok(arguments) => arguments,
        Err(error) => {
            eprintln!("reel tool-guard: cannot read the tool's arguments: {error}");
            return CANNOT_START;
        }
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!("cannot start the tool command {program:?}: {error}");
            return CANNOT_START;
        }
    };
    if let Some(mut input) = child.stdin.take() {
        std::thread::spawn(move || {
            // A tool that does not read its input closes the pipe: not an error.
            let _ = input.write_all(&arguments);
            let _ = input.write_all(b"\n");
        });
    }
    std::thread::spawn(move || {
        // Nothing more comes from reel: this returns when reel closes the pipe or dies.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = kill_current_process_group(Signal::KILL);
    });
    let status = match child.wait() {
        Ok(status) => status,
        Err(error) => {
            eprintln!("reel tool-guard: cannot wait for the tool: {error}");
            return CANNOT_START;
        }
    };
    if let Some(signal) = status.signal().and_then(Signal::from_named_raw) {
        // End as the tool did, so reel reports the signal, not a number.
        let _ = kill_process(getpid(), signal);
    }
    status.code().unwrap_or(128 + status.signal().unwrap_or(0))
}

/// Reads `LENGTH\n` and that many bytes.
fn read_arguments(input: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut header = String::new();
    input.by_ref().take(32).read_line(&mut header)?;
    let length: usize = header
        .trim()
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "no argument length"))?;
    if length > MAX_ARGUMENTS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("arguments of {length} bytes (the limit is {MAX_ARGUMENTS})"),
        ));
    }
    let mut arguments = vec![0; length];
    input.read_exact(&mut arguments)?;
    Ok(arguments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_framed_and_read_back_whole() {
        let arguments = "{\"a\":\n1}";
        let framed = frame_arguments(arguments);
        let mut input = std::io::Cursor::new([framed.as_slice(), b"more"].concat());
        assert_eq!(read_arguments(&mut input).unwrap(), arguments.as_bytes());
        let mut rest = String::new();
        input.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "more");
        assert!(read_arguments(&mut std::io::Cursor::new(b"x\n")).is_err());
        assert!(read_arguments(&mut std::io::Cursor::new(b"99999999999999\n")).is_err());
    }
}
