//! The long-session benchmark (`--turns N`): one stdin-RPC process with a SQLite timeline
//! database and a context window small enough that compaction runs every hundred turns or so,
//! N sequential submits of echoed replies, and what each tenth of the session cost: CPU time
//! and resident memory. A session's cost must not grow with its age: the last tenth's CPU is
//! compared with the first's, and the memory kept per turn is printed. Then the session is
//! re-run against its recording (`reel rerun`, a child process), for what a recorded re-run
//! costs per turn beside the run it replays (target: no more).

use std::{ffi::OsStr, io, time::Instant};

use super::{
    cpu_time::{children_cpu_seconds, cpu_seconds},
    stdin_rpc::Served,
};

pub fn run(turns: usize) -> io::Result<()> {
    let turns = turns.max(10);
    let folder = tempfile::tempdir()?;
    let db = folder.path().join("timeline.db");
    let window = WINDOW_TOKENS.to_string();
    let flags: [&OsStr; 6] = [
        "--timeline-db".as_ref(),
        db.as_os_str(),
        "--session-id".as_ref(),
        "bench".as_ref(),
        "--context-window".as_ref(),
        window.as_ref(),
    ];
    println!(
        "reel bench: one stdin-RPC session of {turns} turns (echoed replies) into a SQLite timeline database, compacting in a {WINDOW_TOKENS}-token window"
    );
    println!("    turns    CPU s   CPU us/turn   RSS KiB   compactions");
    let mut served = Served::start_with(None, &flags)?;
    let decile = turns / 10;
    let started = Instant::now();
    let (mut cpu_before, rss_start) = (cpu_seconds(served.pid()), served.status_kib("VmRSS"));
    let cpu_start = cpu_before;
    let mut per_turn = Vec::new();
    let mut compactions = 0;
    for turn in 1..=turns {
        let rid = format!("t{turn}");
        served.submit(&rid, "what did we say")?;
        compactions += served.read_counting(&rid, "\"done\"", "\"ChatContextCompacted\"")?;
        if turn % decile == 0 {
            let cpu = cpu_seconds(served.pid());
            let us = (cpu - cpu_before) * 1e6 / decile as f64;
            per_turn.push(us);
            let rss = served.status_kib("VmRSS");
            println!(
                "{turn:>9} {:>8.2} {us:>13.0} {rss:>9} {compactions:>13}",
                cpu - cpu_before
            );
            cpu_before = cpu;
        }
    }
    let rss_end = served.status_kib("VmRSS");
    let original_cpu = cpu_seconds(served.pid()) - cpu_start;
    served.shutdown()?;
    let (first, last) = (per_turn[0], per_turn[per_turn.len() - 1]);
    let kept = (rss_end.saturating_sub(rss_start) * 1024) as f64 / turns as f64;
    println!(
        "CPU per turn, last tenth / first: {:.2}; memory kept per turn: {kept:.0} B; {:.1} s in all",
        last / first.max(1.0),
        started.elapsed().as_secs_f64()
    );
    let (rerun_cpu, rerun_seconds) = rerun(folder.path(), &db, &window)?;
    let (ran, reran) = (
        original_cpu * 1e6 / turns as f64,
        rerun_cpu * 1e6 / turns as f64,
    );
    println!(
        "recorded re-run of the {turns} turns: {reran:.0} us CPU per turn, {:.0} turns/s; the run it replays: {ran:.0} us per turn; re-run / run: {:.2} (target at most 1)",
        turns as f64 / rerun_seconds,
        reran / ran.max(1.0)
    );
    Ok(())
}

/// Re-runs the session `bench` of `db` against its recording in a `reel rerun` child (with the
/// same command and window); its CPU time and wall time, in seconds.
fn rerun(folder: &std::path::Path, db: &std::path::Path, window: &str) -> io::Result<(f64, f64)> {
    let command = folder.join("bench.yaml");
    std::fs::write(
        &command,
        "name: bench\ndescription: bench\nprompt: unused\n",
    )?;
    let before = children_cpu_seconds();
    let started = Instant::now();
    let output = std::process::Command::new(std::env::current_exe()?)
        .args([
            "rerun".as_ref(),
            "bench".as_ref(),
            "--command".as_ref(),
            command.as_os_str(),
        ])
        .args(["--timeline-db".as_ref(), db.as_os_str()])
        .args(["--context-window", window])
        .output()?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "reel rerun did not re-run the session the same way: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok((children_cpu_seconds() - before, seconds))
}

/// The context window the session runs in: an echoed turn is about 16 tokens by reel's
/// estimate, so the session compacts every few dozen turns.
const WINDOW_TOKENS: u64 = 1000;
