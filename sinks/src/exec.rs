//! `--sink exec:COMMAND`: the session's frames, one JSON line each (the log's own events among
//! them, as `backendEvent` frames with their ordinals), on a child process's stdin.
//!
//! It is a [`JsonlFrameSink`] writing to the child: a slow child slows the session (its pipe
//! fills, the write blocks, the session's bounded queue makes it wait), and a child that dies
//! makes the write fail, which detaches the sink with a `sink_failed` error while the run goes
//! on. The child's stdout goes to reel's stderr, never to reel's stdout, which carries frames.

use std::{
    io::{self, Write},
    os::fd::AsFd,
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use crate::JsonlFrameSink;

/// How long the child may take to exit once its input has ended.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The exec sink: [`ExecSink::spawn`] starts the child.
pub struct ExecSink;

impl ExecSink {
    /// Starts `argv` (program and arguments, no shell) and returns the sink writing to it.
    pub fn spawn(argv: &[String]) -> io::Result<JsonlFrameSink<ChildInput>> {
        let Some((program, args)) = argv.split_first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an empty command",
            ));
        };
        let stderr = io::stderr().as_fd().try_clone_to_owned()?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(stderr))
            .spawn()?;
        let stdin = child.stdin.take();
        let input = ChildInput {
            stdin,
            child,
            shown: argv.join(" "),
        };
        Ok(JsonlFrameSink::new(format!("exec:{program}"), input, true))
    }
}

/// The child's stdin; when dropped it closes it and waits for the child to exit (killing it
/// after [`EXIT_WAIT`]), so what it does with the last frames is done before reel exits.
pub struct ChildInput {
    stdin: Option<ChildStdin>,
    child: Child,
    shown: String,
}

impl Write for ChildInput {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.stdin {
            Some(stdin) => stdin.write(bytes),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.stdin {
            Some(stdin) => stdin.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for ChildInput {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    tracing::warn!("sink exec:{} exited with {status}", self.shown);
                    return;
                }
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if started.elapsed() > EXIT_WAIT => {
                    tracing::warn!(
                        "sink exec:{} did not exit {} s after its input ended; killed",
                        self.shown,
                        EXIT_WAIT.as_secs()
                    );
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}
