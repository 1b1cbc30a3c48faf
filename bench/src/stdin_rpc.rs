//! The stdin-RPC benchmark: one `reel run-command --rpc --stdin-rpc` process (this binary, as a
//! child) driven over real pipes, the way editors and scripts drive it.
//!
//! * N sequential submits with short echoed replies: submits per second, and the resident set
//!   after N/2 and N submits. Memory per submit stays the same: it is the log's growth.
//! * N requests that add nothing to the log (a cancel with nothing to cancel: an error and a
//!   done each): the resident set must not move, so a request leaves nothing behind.
//! * The time from writing a cancel line to reading the cancelled submit's done, while a reply
//!   streams: paced (a delta every millisecond) and flat out (deltas as fast as reel goes).

use std::{
    io::{self, BufRead, BufReader, Write},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

/// A served session: the child process and its pipes.
pub(super) struct Served {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
    /// Holds the command and script files for the child's lifetime.
    _files: tempfile::TempDir,
}

impl Served {
    fn start(script: Option<&str>) -> io::Result<Self> {
        Self::start_with(script, &[])
    }

    /// A session served with `extra` flags (a database, a session id).
    pub(super) fn start_with(script: Option<&str>, extra: &[&std::ffi::OsStr]) -> io::Result<Self> {
        let files = tempfile::tempdir()?;
        let mut command = String::from("name: bench\ndescription: bench\nprompt: unused\n");
        if let Some(script) = script {
            std::fs::write(files.path().join("script.yaml"), script)?;
            command.push_str("provider:\n  script: script.yaml\n");
        }
        let command_path = files.path().join("command.yaml");
        std::fs::write(&command_path, command)?;
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "run-command".as_ref(),
                command_path.as_os_str(),
                "--rpc".as_ref(),
                "--stdin-rpc".as_ref(),
            ])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::with_capacity(64 * 1024, child.stdout.take().expect("piped"));
        let mut served = Self {
            child,
            stdin,
            stdout,
            line: String::new(),
            _files: files,
        };
        served.read_until("", "\"hello\"")?;
        Ok(served)
    }

    pub(super) fn send(&mut self, line: &str) -> io::Result<()> {
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()
    }

    /// Reads frames until one of request `rid` (any when empty) that contains `marker`.
    pub(super) fn read_until(&mut self, rid: &str, marker: &str) -> io::Result<()> {
        self.read_counting(rid, marker, "").map(|_| ())
    }

    /// Reads frames until one of `rid` holds `marker`; returns how many lines on the way held
    /// `counted` (none when it is empty).
    pub(super) fn read_counting(
        &mut self,
        rid: &str,
        marker: &str,
        counted: &str,
    ) -> io::Result<usize> {
        let stamp = format!("\"requestId\":\"{rid}\"");
        let mut count = 0;
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("no {marker} for {rid:?}"),
                ));
            }
            if !counted.is_empty() && self.line.contains(counted) {
                count += 1;
            }
            if (rid.is_empty() || self.line.contains(&stamp)) && self.line.contains(marker) {
                return Ok(count);
            }
        }
    }

    pub(super) fn submit(&mut self, rid: &str, prompt: &str) -> io::Result<()> {
        self.send(&format!(
            r#"{{"requestId":"{rid}","submit":{{"prompt":"{prompt}"}}}}"#
        ))
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn status_kib(&self, key: &str) -> u64 {
        super::proc_status_kib(&self.child.id().to_string(), key)
    }

    pub(super) fn shutdown(mut self) -> io::Result<()> {
        self.send(r#"{"requestId":"bye","shutdown":{}}"#)?;
        self.read_until("bye", "\"done\"")?;
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("reel exited with {status}")))
        }
    }
}

pub fn run(submits: usize, cancels: usize) -> io::Result<()> {
    let submits = submits.max(2);
    println!("reel bench: one stdin-RPC process, requests over real pipes");
    sequential_submits(submits)?;
    println!();
    cancel_latency(cancels.max(1))
}

fn sequential_submits(submits: usize) -> io::Result<()> {
    let mut served = Served::start(None)?;
    for i in 0..100 {
        served.submit(&format!("w{i}"), "warm up")?;
        served.read_until(&format!("w{i}"), "\"done\"")?;
    }
    let rss_start = served.status_kib("VmRSS");
    let started = Instant::now();
    let mut rss_half = 0;
    for i in 0..submits {
        let rid = format!("s{i}");
        served.submit(&rid, "a short question")?;
        served.read_until(&rid, "\"done\"")?;
        if i + 1 == submits / 2 {
            rss_half = served.status_kib("VmRSS");
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss_end = served.status_kib("VmRSS");
    for i in 0..submits {
        let rid = format!("n{i}");
        served.send(&format!(r#"{{"requestId":"{rid}","cancel":{{}}}}"#))?;
        served.read_until(&rid, "\"done\"")?;
    }
    let rss_after_idle = served.status_kib("VmRSS");
    let peak = served.status_kib("VmHWM");
    served.shutdown()?;

    let half = (submits / 2) as f64;
    println!(
        "{submits} sequential submits (echoed 3-word replies, 9 log events each): {:.0} submits/s",
        submits as f64 / seconds
    );
    println!(
        "resident set: {rss_start} KiB after warm-up, {rss_half} KiB after {}, {rss_end} KiB after {submits}; peak {peak} KiB",
        submits / 2
    );
    println!(
        "growth per submit: first half {:.0} B, second half {:.0} B (the timeline and context of one exchange)",
        (rss_half.saturating_sub(rss_start)) as f64 * 1024.0 / half,
        (rss_end.saturating_sub(rss_half)) as f64 * 1024.0 / half
    );
    println!(
        "then {submits} requests that add nothing to the log: resident set {rss_end} -> {rss_after_idle} KiB ({:+} KiB)",
        rss_after_idle as i64 - rss_end as i64
    );
    Ok(())
}

fn cancel_latency(cancels: usize) -> io::Result<()> {
    let paced = "  - - text: \"start \"\n    - repeat: {times: 1000000, steps: [{sleep_ms: 1}, {text: \"tok \"}]}\n";
    let flat =
        "  - - text: \"start \"\n    - repeat: {times: 100000000, steps: [{text: \"tok \"}]}\n";
    let script = format!("turns:\n{}{}", paced.repeat(cancels), flat.repeat(cancels));
    let mut served = Served::start(Some(&script))?;
    println!(
        "time from a cancel line to the cancelled submit's done, while its reply streams ({cancels} each):"
    );
    for kind in ["a delta every 1 ms", "deltas flat out"] {
        let mut latencies = Vec::with_capacity(cancels);
        for i in 0..cancels {
            let rid = format!("{}{i}", &kind[..1]);
            served.submit(&rid, "stream")?;
            served.read_until(&rid, "\"ChatTextPatch\"")?;
            // Let the reply get going before cancelling it.
            std::thread::sleep(Duration::from_millis(20));
            let sent = Instant::now();
            served.send(&format!(r#"{{"requestId":"x{rid}","cancel":{{}}}}"#))?;
            served.read_until(&rid, "\"done\"")?;
            latencies.push(sent.elapsed());
        }
        latencies.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "  {kind:<20} median {:.2} ms, p90 {:.2} ms, max {:.2} ms (target: under 10 ms)",
            ms(latencies[latencies.len() / 2]),
            ms(latencies[latencies.len() * 9 / 10]),
            ms(*latencies.last().expect("at least one"))
        );
    }
    served.shutdown()
}
