//! `reel bench --serve`: one `reel serve` process (this binary, as a child) hosting N sessions
//! (default 1,000), each followed by one Server-Sent Events subscriber (one, so that 10,000
//! sessions fit in the 20,000 file descriptors a process may have here), with scripted replies;
//! and the same sessions as `reel --stdin-rpc` processes, for the memory they would take.
//!
//! In order, so that each figure is its own:
//! 1. per loaded idle session: the resident set, file descriptors and tasks it adds (each
//!    loaded by a `snapshot` request; an idle session should hold no descriptor or task of
//!    its own), and the CPU the server uses while they sit idle (none, ideally); then the
//!    resident set per subscriber, and per Durable Streams long-poll waiting at a session's
//!    tail (one a session, up to 4,000);
//! 2. with up to 1,000 sessions streaming paced replies (a delta every 20 ms, a model's pace),
//!    the resident set per active session, and the time from posting a submit to its first
//!    delta at a subscriber, for probes sent one at a time to the other sessions (p50, p99);
//! 3. every session replying at once, as fast as it goes: frames delivered per second to all
//!    subscribers together;
//! 4. a sample of `reel run-command --stdin-rpc` processes, one session each, for the memory N
//!    of them would take beside the server's.
//!
//! It fails (non-zero) when a loaded idle session costs over 64 KB at 1,000 sessions or more:
//! memory is a bound this machine can hold. The other figures are printed beside their
//! targets; rates and latencies depend on the machine's load, so they do not fail it.

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
/// Sessions that stream paced replies while first deltas are timed, at most (nine in ten of
/// them below that; the rest take the probes).
const MAX_ACTIVE_RUNS: usize = 1_000;
/// Subscribers per session.
const SUBSCRIBERS: usize = 1;
/// Durable Streams long-polls at most, one a session: as many as the descriptor limit leaves
/// beside 10,000 subscribers (fewer would leave the figure to a few allocator pages).
const MAX_WAITERS: usize = 4_000;
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

/// What one loaded idle session adds to the server.
struct Weight {
    kib: u64,
    descriptors: usize,
    tasks: f64,
}

impl Weight {
    async fn of(server: &Server) -> anyhow::Result<Self> {
        let kib = settled(server).await;
        Ok(Self {
            kib,
            descriptors: server.descriptors(),
            tasks: server.gauge("reel_tasks_alive").await?,
        })
    }
}

pub async fn run(bench: ServeBench) -> anyhow::Result<bool> {
    let ServeBench {
        sessions,
        deltas,
        probes,
    } = bench;
    if sessions < 20 {
        bail!("--sessions must be 20 at least (nine in ten stream while the others are probed)");
    }
    let active = (sessions * 9 / 10).min(MAX_ACTIVE_RUNS);
    let waiters = sessions.min(MAX_WAITERS);
    let limit = check_open_files(sessions * SUBSCRIBERS + waiters)?;
    let folder = tempfile::tempdir()?;
    write_commands(folder.path(), deltas)?;
    // Every connection the benchmark opens is taken (the default keeps a quarter of the
    // descriptor limit for other files).
    let max_connections = limit.saturating_sub(1024).to_string();
    let server = Server::start_with(
        &folder.path().join("commands"),
        &folder.path().join("t.db"),
        &["--max-connections", &max_connections],
    )?;
    println!(
        "reel bench --serve: one reel serve process, {sessions} sessions, {SUBSCRIBERS} SSE subscriber each"
    );
    let ids: Vec<String> = (0..sessions).map(|i| format!("s{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let command = if i < active { "busy" } else { "quick" };
        server.create(id, command).await?;
    }

    // 1. Loaded and idle, then followed, then waited on.
    let empty = Weight::of(&server).await?;
    let empty_cpu = idle_cpu_ms(&server).await;
    for id in &ids {
        server
            .request(id, r#"{"requestId":"load","snapshot":{}}"#)
            .await?;
    }
    let loaded = Weight::of(&server).await?;
    let per_idle = kib_each(loaded.kib - empty.kib, sessions);
    println!(
        "per loaded idle session: {per_idle:.1} KiB (target at most 32 KB), {:.3} file descriptors and {:.3} tasks (target none of its own); {} KiB with none loaded, {} KiB with {sessions}",
        loaded.descriptors.saturating_sub(empty.descriptors) as f64 / sessions as f64,
        (loaded.tasks - empty.tasks) / sessions as f64,
        empty.kib,
        loaded.kib,
    );
    println!(
        "CPU while they sit idle: {:.1} ms a second, {:.1} with none loaded (an idle session should cost none)",
        idle_cpu_ms(&server).await,
        empty_cpu
    );
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
    let per_subscriber = kib_each(followed - loaded.kib, sessions * SUBSCRIBERS);
    let per_waiter = weigh_long_polls(&server, &ids[..waiters], followed).await?;
    println!(
        "per SSE subscriber: {per_subscriber:.1} KiB ({} of them); per Durable Streams long-poll waiting at a tail: {per_waiter:.1} KiB ({waiters} of them) (targets at most 16 KB each)",
        sessions * SUBSCRIBERS
    );

    // 2. First deltas while the paced runs stream.
    for id in &ids[..active] {
        server
            .request(id, r#"{"requestId":"busy","submit":{"prompt":"go"}}"#)
            .await?;
    }
    wait_for(&mut seen, active * SUBSCRIBERS, |s| {
        matches!(s, Seen::FirstDelta(..))
    })
    .await?;
    let streaming = settled(&server).await;
    let per_active = kib_each(streaming.saturating_sub(followed), active);
    let latencies = time_first_deltas(&server, &ids[active..], active, probes, &mut seen).await?;
    println!(
        "with {active} runs streaming (a delta every 20 ms each): {streaming} KiB ({per_active:.1} KiB more per active session); submit to first delta at a subscriber over {probes} probes: p50 {:.2} ms, p99 {:.2} ms (target p99 under 20 ms)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    for id in &ids[..active] {
        server
            .request(id, r#"{"requestId":"stop","cancel":{}}"#)
            .await?;
    }
    wait_for(&mut seen, active * SUBSCRIBERS * 2, |s| {
        matches!(s, Seen::Done(..))
    })
    .await?;

    // 3. Every session replies at once (the paced ones play their script's second turn).
    let before = frames.load(Ordering::Relaxed);
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    for id in &ids {
        server
            .request(id, r#"{"requestId":"all","submit":{"prompt":"go"}}"#)
            .await?;
    }
    // The submits go one after another, each waiting for the busy server to take it: when
    // they take most of the time, the rate says how fast the server answers while it streams.
    let submitted = started.elapsed();
    wait_for(&mut seen, sessions * SUBSCRIBERS, |s| {
        matches!(s, Seen::Done(..))
    })
    .await?;
    let elapsed = started.elapsed();
    let delivered = frames.load(Ordering::Relaxed) - before;
    // The server's CPU a frame moves less than the rate when a shared machine's speed drifts,
    // so it is what to compare between two builds measured an hour apart.
    let cpu_us = (server.cpu_seconds() - cpu_before) * 1e6 / delivered.max(1) as f64;
    println!(
        "{sessions} sessions replying {deltas} deltas each at once: {delivered} frames delivered to {} subscribers in {:.2} s, {:.0} frames/s (target at least 300,000); the server's CPU: {cpu_us:.1} µs a frame; posting the {sessions} submits, one after another, took {:.2} s of it",
        sessions * SUBSCRIBERS,
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64(),
        submitted.as_secs_f64()
    );
    let after_runs = settled(&server).await;
    println!(
        "resident set after the replies: {after_runs} KiB ({:.1} KiB per session, subscribers included)",
        kib_each(after_runs.saturating_sub(empty.kib), sessions)
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

/// The resident set (KiB) each Durable Streams long-poll adds while it waits at the tail of
/// one of `ids` (idle, loaded sessions); `before` is the resident set without them. The
/// long-polls are let go (their connections closed) before it returns.
async fn weigh_long_polls(server: &Server, ids: &[String], before: u64) -> anyhow::Result<f64> {
    let polls: Vec<_> = ids.iter().map(|id| server.long_poll(id)).collect();
    wait_for_gauge(server, "reel_stream_readers", ids.len() as f64).await?;
    let waiting = settled(server).await;
    for poll in polls {
        poll.abort();
    }
    // A closed connection ends its long-poll at once; none is left to wake in what follows.
    wait_for_gauge(server, "reel_stream_readers", 0.0).await?;
    Ok(kib_each(waiting.saturating_sub(before), ids.len()))
}

/// Waits (up to a minute) until the server's gauge `name` reads `value`.
async fn wait_for_gauge(server: &Server, name: &str, value: f64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = server.gauge(name).await?;
        if now == value {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} is {now}, not {value}, after a minute");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The command files: `busy` streams a delta every 20 ms for a long time, then (its second
/// turn) replies `deltas` deltas flat out; `quick` replies `deltas` deltas flat out.
fn write_commands(folder: &Path, deltas: usize) -> anyhow::Result<()> {
    let commands = folder.join("commands");
    std::fs::create_dir(&commands)?;
    let flat_out = format!("  - - repeat: {{times: {deltas}, steps: [{{text: \"tok \"}}]}}\n");
    let scripts = [
        (
            "busy",
            format!(
                "turns:\n  - - repeat: {{times: 1000000, steps: [{{text: \"tick \"}}, {{sleep_ms: 20}}]}}\n{flat_out}"
            ),
        ),
        ("quick", format!("turns:\n{flat_out}")),
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

/// Times `probes` submits, one at a time over `ids` (the sessions from `first_index` on), from
/// the post to the first delta a subscriber reads (ms). Each probe's reply ends before the
/// next one is sent.
async fn time_first_deltas(
    server: &Server,
    ids: &[String],
    first_index: usize,
    probes: usize,
    seen: &mut mpsc::UnboundedReceiver<Seen>,
) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(probes);
    for probe in 0..probes {
        let index = first_index + probe % ids.len();
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

/// The CPU time the server uses while nobody asks it anything, in milliseconds a second, over
/// a window longer than any of its periodic work (the leases' heartbeat: 5 s).
async fn idle_cpu_ms(server: &Server) -> f64 {
    const WINDOW: Duration = Duration::from_secs(6);
    let before = server.cpu_seconds();
    tokio::time::sleep(WINDOW).await;
    (server.cpu_seconds() - before) * 1000.0 / WINDOW.as_secs_f64()
}

/// The server's resident set once it has been quiet for a second: the least of five looks
/// over the next two, so that what a moment's work allocated and is freeing (a sweep of the
/// store, an answer being written) is not taken for what the server keeps.
async fn settled(server: &Server) -> u64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut least = server.rss_kib();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        least = least.min(server.rss_kib());
    }
    least
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

/// The descriptor limit this process (and the server it starts) has; fails early, naming the
/// fix, when it may not open `sockets` connections, each of which the server holds too.
fn check_open_files(sockets: usize) -> anyhow::Result<usize> {
    let needed = sockets + 256;
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse::<usize>().ok());
    match soft {
        Some(soft) if soft < needed => bail!(
            "{sockets} connections need about {needed} open files and the limit is {soft}: raise it (ulimit -n {needed}) or pass fewer --sessions"
        ),
        Some(soft) => Ok(soft),
        None => Ok(needed + 1024),
    }
}
