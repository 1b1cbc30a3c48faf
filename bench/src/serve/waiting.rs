//! `reel bench --waiting N`: one `reel serve` with N sessions whose runs each wait for a
//! person's decision (a call of an `approval: ask` tool), as an inbox of approvals that may be
//! answered in days.
//!
//! 1. The resident set once the waiting sessions have been evicted (`--idle-timeout 1s`):
//!    after the first half of them, then after all. A waiting run must cost what a session
//!    never loaded costs, nothing, since it waits in the store: the second half may add no
//!    memory (the first half fills what a server keeps whatever the count, such as SQLite's
//!    page caches and the allocator's free pages).
//! 2. The inbox (`GET /v1/sessions?waiting=true`) read whole: how long it takes.
//! 3. Approve to tool start for a session loaded from the store: `probes` approves, one at a
//!    time, each to an evicted session; the time from posting it to the moment the tool's
//!    process starts (the tool writes the clock, in nanoseconds, to a file), p50 and p99.
//!
//! It fails (non-zero) when each session of the second half leaves more than 1 KiB behind, at
//! 10,000 sessions or more (below, the fixed caches are still filling). The
//! latency is printed beside its target (p99 under 50 ms on SQLite); it depends on the
//! machine's load.

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::bail;

use super::{client::Server, kib_each, percentile, settled};

/// The most an evicted waiting session may leave in the server's memory.
const MAX_EVICTED_BYTES: f64 = 1024.0;
/// The bound is held from this many sessions: below, what a server keeps whatever the count
/// (SQLite's page caches, the allocator's free pages) is still filling in the second half
/// (measured: 3-4 KiB a session at 1,000 and 2,000 sessions, nothing at 10,000).
const HELD_FROM_SESSIONS: usize = 10_000;

pub async fn run(sessions: usize, probes: usize) -> anyhow::Result<bool> {
    if probes > sessions {
        bail!("--waiting-probes ({probes}) may not be more than --waiting ({sessions})");
    }
    let folder = tempfile::tempdir()?;
    let started_at = folder.path().join("started");
    std::fs::create_dir(&started_at)?;
    write_command(folder.path(), &started_at)?;
    let server = Server::start_evicting(
        &folder.path().join("commands"),
        &folder.path().join("t.db"),
        "1s",
        &[],
    )?;
    println!(
        "reel bench --waiting: one reel serve process, {sessions} sessions each waiting for a decision"
    );
    let empty = settled(&server).await;
    let ids: Vec<String> = (0..sessions).map(|i| format!("w{i}")).collect();
    let half = sessions / 2;
    let asking = Instant::now();
    let at_half = make_waiting(&server, &ids[..half]).await?;
    let evicted = make_waiting(&server, &ids[half..]).await?;
    let listed = wait_until_listed(&server, sessions).await?;
    println!(
        "{sessions} runs waiting, stored and evicted in {:.1} s",
        asking.elapsed().as_secs_f64()
    );
    let per_evicted = kib_each(evicted.saturating_sub(at_half), sessions - half);
    println!(
        "resident set: {empty} KiB with no session loaded, {at_half} KiB once {half} waiting sessions were evicted, {evicted} KiB once all {sessions} were: {per_evicted:.2} KiB more per waiting session (target: nothing, as for sessions never loaded)"
    );
    println!(
        "the inbox: {sessions} waiting sessions with their calls read in {:.1} ms",
        listed.as_secs_f64() * 1000.0
    );

    let mut latencies = Vec::with_capacity(probes);
    for id in ids.iter().take(probes) {
        let sent = now_ns();
        server
            .request(
                id,
                r#"{"requestId":"yes","approve":{"callId":"c1","decision":"allow_once"}}"#,
            )
            .await?;
        let started = tool_start(&started_at.join(id)).await?;
        latencies.push(started.saturating_sub(sent) as f64 / 1e6);
    }
    println!(
        "approve to tool start for a session loaded from the store, over {probes} probes: p50 {:.2} ms, p99 {:.2} ms (target p99 under 50 ms on SQLite)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    let held = sessions < HELD_FROM_SESSIONS || per_evicted * 1024.0 <= MAX_EVICTED_BYTES;
    if !held {
        eprintln!(
            "reel bench --waiting: each evicted waiting session left {per_evicted:.2} KiB behind, over the 1 KiB bound"
        );
    }
    Ok(held)
}

/// Makes each session of `ids` wait for a decision, waits until they are all stored and
/// evicted; the server's resident set then (KiB).
async fn make_waiting(server: &Server, ids: &[String]) -> anyhow::Result<u64> {
    let before = inbox_len(server).await?;
    for id in ids {
        server.create(id, "ask").await?;
        server
            .request(
                id,
                r#"{"requestId":"ask","submit":{"prompt":"Mail the team."}}"#,
            )
            .await?;
    }
    wait_until_listed(server, before + ids.len()).await?;
    wait_until_unloaded(server).await?;
    Ok(settled(server).await)
}

/// The command `ask`: its model calls `send` (approval: ask), which writes the moment it
/// starts (nanoseconds) to `started/SESSION`.
fn write_command(folder: &Path, started_at: &Path) -> anyhow::Result<()> {
    let commands = folder.join("commands");
    std::fs::create_dir(&commands)?;
    let script = folder.join("ask-script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {to: team}}\n  - - text: sent\n",
    )?;
    std::fs::write(
        commands.join("ask.yaml"),
        format!(
            "name: ask\ndescription: reel bench --waiting\nprompt: unused\nprovider:\n  script: {}\ntools:\n  - name: send\n    description: Sends a mail.\n    approval: ask\n    executor:\n      command: [sh, -c, 'date +%s%N > {}/$REEL_SESSION_ID']\n",
            script.display(),
            started_at.display()
        ),
    )?;
    Ok(())
}

/// Waits until the inbox lists `sessions` sessions; how long its last whole read took.
async fn wait_until_listed(server: &Server, sessions: usize) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let read = Instant::now();
        let listed = inbox_len(server).await?;
        let took = read.elapsed();
        if listed >= sessions {
            return Ok(took);
        }
        if Instant::now() > deadline {
            bail!("only {listed} of {sessions} sessions were waiting after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many sessions the inbox lists, page by page.
async fn inbox_len(server: &Server) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut after = String::new();
    loop {
        let path = if after.is_empty() {
            "/v1/sessions?waiting=true&limit=1000".to_owned()
        } else {
            format!("/v1/sessions?waiting=true&limit=1000&after={after}")
        };
        let page = server.get_json(&path).await?;
        count += page["sessions"].as_array().map_or(0, Vec::len);
        match page["next"].as_str() {
            Some(next) => after = next.to_owned(),
            None => return Ok(count),
        }
    }
}

/// Waits until the server holds no session loaded.
async fn wait_until_unloaded(server: &Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.gauge("reel_sessions_loaded").await? > 0.0 {
        if Instant::now() > deadline {
            bail!("sessions were still loaded two minutes after the last use");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The moment the tool wrote to `file` (nanoseconds since the epoch), once it has.
async fn tool_start(file: &Path) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(at) = text.trim().parse()
        {
            return Ok(at);
        }
        if Instant::now() > deadline {
            bail!("the tool of {} did not start within 30 s", file.display());
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .max(1)
}
