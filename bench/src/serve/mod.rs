//! `reel bench --serve`: one `reel serve` process (this binary, as a child) hosting N sessions
//! (default 1,000), each followed by two Server-Sent Events subscribers, with scripted replies;
//! and the same sessions as `reel --stdin-rpc` processes, for the memory they would take.
//!
//! In order, so that each figure is its own:
//! 1. the resident set per loaded idle session (each loaded by a `snapshot` request), then
//!    per subscriber (two per session);
//! 2. with 100 sessions streaming paced replies (a delta every 10 ms), the resident set per
//!    active session, and the time from posting a submit to its first delta at a subscriber,
//!    for probes sent one at a time to the other sessions (p50, p99);
//! 3. every session replying at once, as fast as it goes: frames delivered per second to all
//!    subscribers together;
//! 4. a sample of `reel run-command --stdin-rpc` processes, one session each, for the memory N
//!    of them would take beside the server's.
//!
//! It fails (non-zero) when a loaded idle session costs over 64 KB at 1,000 sessions or more:
//! memory is a bound this machine can hold. Rates and latencies are printed beside their
//! targets; they depend on the machine's load, so they do not fail it.

mod client;
mod waiting;

pub use waiting::run as run_waiting;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use client::{Seen, Server};
use tokio::sync::mpsc;

/// The most a loaded idle session may cost, held from [`HELD_FROM_SESSIONS`] sessions.
const MAX_IDLE_SESSION_BYTES: u64 = 64 * 1024;
const HELD_FROM_SESSIONS: usize = 1_000;
/// Sessions that stream paced replies while first deltas are timed.
const ACTIVE_RUNS: usize = 100;
/// Subscribers per session.
const SUBSCRIBERS: usize = 2;
/// `reel --stdin-rpc` processes started to weigh one.
const SAMPLED_PROCESSES: usize = 20;

/// What to measure.
pub struct ServeBench {
    pub sessions: usize,
    /// Text deltas of each session's reply in the throughput part.
    pub deltas: usize,
    /// First deltas timed.
    pub probes: usize,
}

pub async fn run(bench: ServeBench) -> anyhow::Result<bool> {
    let ServeBench {
        sessions,
        deltas,
        probes,
    } = bench;
    if sessions <= ACTIVE_RUNS {
        bail!(
            "--sessions must be more than {ACTIVE_RUNS} (that many stream while probes are timed)"
        );
    }
    check_open_files(sessions)?;
    let folder = tempfile::tempdir()?;
    write_commands(folder.path(), deltas)?;
    let server = Server::start(&folder.path().join("commands"), &folder.path().join("t.db"))?;
    println!(
        "reel bench --serve: one reel serve process, {sessions} sessions, {SUBSCRIBERS} SSE subscribers each"
    );
    let ids: Vec<String> = (0..sessions).map(|i| format!("s{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let command = if i < ACTIVE_RUNS { "busy" } else { "quick" };
        server.create(id, command).await?;
    }

    // 1. Loaded and idle, then followed.
    let empty = settled(&server).await;
    for id in &ids {
        server
            .request(id, r#"{"requestId":"load","snapshot":{}}"#)
            .await?;
    }
    let loaded = settled(&server).await;
    let frames = Arc::new(AtomicU64::new(0));
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let mut readers = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for _ in 0..SUBSCRIBERS {
            readers.push(
                server
                    .subscribe(i, id, Arc::clone(&frames), seen_tx.clone())
                    .await?,
            );
        }
    }
    let followed = settled(&server).await;
    let per_idle = kib_each(loaded - empty, sessions);
    let per_subscriber = kib_each(followed - loaded, sessions * SUBSCRIBERS);
    println!(
        "resident set: {empty} KiB with no session loaded, {loaded} KiB with {sessions} loaded and idle ({per_idle:.1} KiB each; target at most 64 KB), {followed} KiB with {} subscribers ({per_subscriber:.1} KiB each)",
        sessions * SUBSCRIBERS
    );

    // 2. First deltas while 100 runs stream.
    for id in &ids[..ACTIVE_RUNS] {
        server
            .request(id, r#"{"requestId":"busy","submit":{"prompt":"go"}}"#)
            .await?;
    }
    wait_for(&mut seen, ACTIVE_RUNS * SUBSCRIBERS, |s| {
        matches!(s, Seen::FirstDelta(..))
    })
    .await?;
    let active = settled(&server).await;
    let per_active = kib_each(active.saturating_sub(followed), ACTIVE_RUNS);
    let latencies = time_first_deltas(&server, &ids[ACTIVE_RUNS..], probes, &mut seen).await?;
    println!(
        "with {ACTIVE_RUNS} runs streaming: {active} KiB ({per_active:.1} KiB more per active session); submit to first delta at a subscriber over {probes} probes: p50 {:.2} ms, p99 {:.2} ms (target p99 under 20 ms)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    for id in &ids[..ACTIVE_RUNS] {
        server
            .request(id, r#"{"requestId":"stop","cancel":{}}"#)
            .await?;
    }
    wait_for(&mut seen, ACTIVE_RUNS * SUBSCRIBERS * 2, |s| {
        matches!(s, Seen::Done(..))
    })
    .await?;

    // 3. Every session replies at once.
    let quick = &ids[ACTIVE_RUNS..];
    let before = frames.load(Ordering::Relaxed);
    let started = Instant::now();
    for id in quick {
        server
            .request(id, r#"{"requestId":"all","submit":{"prompt":"go"}}"#)
            .await?;
    }
    wait_for(&mut seen, quick.len() * SUBSCRIBERS, |s| {
        matches!(s, Seen::Done(..))
    })
    .await?;
    let elapsed = started.elapsed();
    let delivered = frames.load(Ordering::Relaxed) - before;
    println!(
        "{} sessions replying {deltas} deltas each at once: {delivered} frames delivered to {} subscribers in {:.2} s, {:.0} frames/s (target at least 200,000)",
        quick.len(),
        quick.len() * SUBSCRIBERS,
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64()
    );
    let after_runs = settled(&server).await;
    println!(
        "resident set after the replies: {after_runs} KiB ({:.1} KiB per session, subscribers included)",
        kib_each(after_runs.saturating_sub(empty), sessions)
    );
    for reader in readers {
        reader.abort();
    }

    // 4. The same sessions as processes.
    let process_kib = tokio::task::spawn_blocking(stdin_rpc_process_kib).await??;
    let processes_kib = process_kib * sessions as u64;
    println!(
        "{sessions} reel --stdin-rpc processes, one session each: about {} MiB ({process_kib} KiB each, the mean of {SAMPLED_PROCESSES}); the server: {} MiB for them all, {:.0} times less",
        processes_kib / 1024,
        after_runs / 1024,
        processes_kib as f64 / after_runs.max(1) as f64
    );

    if sessions < HELD_FROM_SESSIONS {
        return Ok(true);
    }
    let held = per_idle * 1024.0 <= MAX_IDLE_SESSION_BYTES as f64;
    if !held {
        eprintln!(
            "reel bench --serve: a loaded idle session costs {per_idle:.1} KiB, over the 64 KB bound"
        );
    }
    Ok(held)
}

/// The command files: `busy` streams a delta every 10 ms for a long time; `quick` replies
/// `deltas` deltas flat out.
fn write_commands(folder: &Path, deltas: usize) -> anyhow::Result<()> {
    let commands = folder.join("commands");
    std::fs::create_dir(&commands)?;
    let scripts = [
        (
            "busy",
            "turns:\n  - - repeat: {times: 1000000, steps: [{text: \"tick \"}, {sleep_ms: 10}]}\n"
                .to_owned(),
        ),
        (
            "quick",
            format!("turns:\n  - - repeat: {{times: {deltas}, steps: [{{text: \"tok \"}}]}}\n"),
        ),
    ];
    for (name, script) in scripts {
        let script_path = folder.join(format!("{name}-script.yaml"));
        std::fs::write(&script_path, script)?;
        std::fs::write(
            commands.join(format!("{name}.yaml")),
            format!(
                "name: {name}\ndescription: reel bench --serve\nprompt: unused\nprovider:\n  script: {}\n",
                script_path.display()
            ),
        )?;
    }
    Ok(())
}

/// Times `probes` submits, one at a time over `ids`, from the post to the first delta a
/// subscriber reads (ms). Each probe's reply ends before the next one is sent.
async fn time_first_deltas(
    server: &Server,
    ids: &[String],
    probes: usize,
    seen: &mut mpsc::UnboundedReceiver<Seen>,
) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(probes);
    for probe in 0..probes {
        let index = ACTIVE_RUNS + probe % ids.len();
        let id = &ids[probe % ids.len()];
        let sent = Instant::now();
        server
            .request(id, r#"{"requestId":"probe","submit":{"prompt":"go"}}"#)
            .await?;
        let mut first = None;
        let mut done = 0;
        while done < SUBSCRIBERS {
            match next(seen).await? {
                Seen::FirstDelta(i, at) if i == index && first.is_none() => first = Some(at),
                Seen::Done(i) if i == index => done += 1,
                _ => {}
            }
        }
        let first = first.context("a probe's reply had no delta")?;
        latencies.push(first.duration_since(sent).as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}

/// Waits until `count` reports have matched `wanted` (others are dropped).
async fn wait_for(
    seen: &mut mpsc::UnboundedReceiver<Seen>,
    count: usize,
    wanted: impl Fn(&Seen) -> bool,
) -> anyhow::Result<()> {
    let mut matched = 0;
    while matched < count {
        if wanted(&next(seen).await?) {
            matched += 1;
        }
    }
    Ok(())
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> anyhow::Result<Seen> {
    match tokio::time::timeout(Duration::from_secs(120), seen.recv()).await {
        Ok(Some(report)) => Ok(report),
        Ok(None) => bail!("every event stream ended"),
        Err(_) => bail!("no frame the benchmark waits for came within 120 s"),
    }
}

/// The server's resident set once it has been quiet for a second.
async fn settled(server: &Server) -> u64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.rss_kib()
}

fn kib_each(kib: u64, count: usize) -> f64 {
    kib as f64 / count.max(1) as f64
}

fn percentile(sorted_or_not: &[f64], at: f64) -> f64 {
    let mut values = sorted_or_not.to_vec();
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 - 1.0) * at).round() as usize;
    values.get(rank).copied().unwrap_or(f64::NAN)
}

/// The mean resident set (KiB) of [`SAMPLED_PROCESSES`] `reel run-command --stdin-rpc`
/// processes, each with a SQLite timeline database, after one reply.
fn stdin_rpc_process_kib() -> anyhow::Result<u64> {
    let folder = tempfile::tempdir()?;
    let mut processes = Vec::new();
    for i in 0..SAMPLED_PROCESSES {
        let db = folder.path().join(format!("p{i}.db"));
        let flags: [&std::ffi::OsStr; 4] = [
            "--timeline-db".as_ref(),
            db.as_os_str(),
            "--session-id".as_ref(),
            "bench".as_ref(),
        ];
        let mut served = super::stdin_rpc::Served::start_with(None, &flags)?;
        served.submit("one", "a short prompt")?;
        served.read_until("one", "\"done\"")?;
        processes.push(served);
    }
    std::thread::sleep(Duration::from_secs(1));
    let total: u64 = processes.iter().map(|p| p.status_kib("VmRSS")).sum();
    for served in processes {
        served.shutdown()?;
    }
    Ok(total / SAMPLED_PROCESSES as u64)
}

/// Fails early, naming the fix, when this process may not open a socket per subscriber and
/// the server a connection per session.
fn check_open_files(sessions: usize) -> anyhow::Result<()> {
    let needed = sessions * (SUBSCRIBERS + 2) + 256;
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse::<usize>().ok());
    match soft {
        Some(soft) if soft < needed => bail!(
            "{sessions} sessions need about {needed} open files and the limit is {soft}: raise it (ulimit -n {needed}) or pass fewer --sessions"
        ),
        _ => Ok(()),
    }
}
