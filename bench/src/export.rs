//! The export and listing benchmark: `reel export` of a stored session to jsonl, HTML and
//! Parquet, and `reel verify` of it, for a session and one ten times longer (wall time, peak memory of the
//! process, output size), and `reel sessions` over a database holding many sessions.
//!
//! Each command runs as its own process, as a user runs it, so its peak memory is its own. An
//! export or a verify holds the session's text, never its events: the longer session's peak
//! must stay within three times the shorter's (a tenfold log), or the benchmark fails.

use std::{
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use reel_engine::{Commit, LogEntry, LogStore, new_id};
use reel_proto::chat::{ChatRunFinished, ChatRunStarted, ChatUserMessageAccepted};
use reel_storage::{Access, Location, open_timeline};

pub async fn run(events: usize, sessions: usize) -> anyhow::Result<bool> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("export.db").display().to_string();
    let location = Location::path(&db);
    println!("reel bench: reel export of a stored session (one process per export)");
    println!(
        "{:>10} {:>9} {:>10} {:>14} {:>14}",
        "events", "format", "seconds", "peak RSS KiB", "output bytes"
    );
    // format -> (peak RSS, events per second) of the shorter session, then of the longer.
    let mut measured: std::collections::BTreeMap<&str, Vec<(f64, f64)>> = Default::default();
    let mut verify_peaks = Vec::new();
    for deltas in [events / 10, events] {
        let session = format!("export-{}", new_id());
        super::durable::store_reply(&location, &session, deltas as u64).await?;
        let (seconds, peak) = measure(&["verify", &session, "--timeline-db", &db])?;
        println!(
            "{:>10} {:>9} {seconds:>10.3} {peak:>14} {:>14}",
            deltas + 6,
            "verify",
            "-"
        );
        verify_peaks.push(peak as f64);
        for format in ["jsonl", "html", "parquet"] {
            let out = dir.path().join(format!("{session}.{format}"));
            let (seconds, peak) = measure(&[
                "export",
                &session,
                "--format",
                format,
                "-o",
                &out.display().to_string(),
                "--timeline-db",
                &db,
            ])?;
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            println!(
                "{:>10} {format:>9} {seconds:>10.3} {peak:>14} {bytes:>14}",
                deltas + 6
            );
            let rate = (deltas + 6) as f64 / seconds;
            measured
                .entry(format)
                .or_default()
                .push((peak as f64, rate));
            let _ = std::fs::remove_file(&out);
        }
    }
    let growth = |format: &str| measured[format][1].0 / measured[format][0].0;
    let (jsonl, html, parquet) = (growth("jsonl"), growth("html"), growth("parquet"));
    let verify = verify_peaks[1] / verify_peaks[0];
    println!(
        "peak RSS, ten times the events / the shorter session: jsonl {jsonl:.2}, html {html:.2}, parquet {parquet:.2}, verify {verify:.2} (must stay below 3)"
    );
    let (peak, rate) = measured["parquet"][1];
    println!(
        "parquet, the longer session: {rate:.0} events/s (target: 500,000 or more for 1,000,000), peak RSS {:.1} MB (target: under 64 MB)",
        peak / 1024.0
    );

    add_sessions(&location, sessions).await?;
    let (seconds, peak) = measure(&["sessions", "--json", "--timeline-db", &db])?;
    println!(
        "reel sessions --json over {} sessions (two of them long): {seconds:.3} s, peak RSS {peak} KiB",
        sessions + 2
    );
    Ok(jsonl < 3.0 && html < 3.0 && parquet < 3.0 && verify < 3.0)
}

/// Runs `reel ARGS`; returns its wall time and peak resident set (sampled from /proc).
fn measure(args: &[&str]) -> anyhow::Result<(f64, u64)> {
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id().to_string();
    let mut peak = 0;
    let status = loop {
        // VmHWM only grows; the last reading before the exit is the peak, give or take 2 ms.
        peak = peak.max(super::proc_status_kib(&pid, "VmHWM"));
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(anyhow::anyhow!("reel {} failed", args.join(" ")));
    }
    Ok((seconds, peak))
}

/// Adds `count` small sessions (a prompt and a finished run each) to the database.
async fn add_sessions(location: &Location, count: usize) -> anyhow::Result<()> {
    let mut store = open_timeline(location, Access::ReadWrite).await?;
    for n in 0..count {
        let id = format!("listed-{n:06}");
        store.lease(&id).await?;
        let entry = |ordinal: u64, event: reel_proto::Any| {
            Arc::new(LogEntry {
                ordinal,
                recorded_at_ms: 0,
                event,
            })
        };
        let prompt = format!("question number {n}");
        let commit = Commit {
            events: vec![
                entry(
                    1,
                    ChatUserMessageAccepted {
                        text: prompt.clone(),
                        ..Default::default()
                    }
                    .into(),
                ),
                entry(2, ChatRunStarted::default().into()),
                entry(3, ChatRunFinished::default().into()),
            ],
            title: Some(prompt),
            ..Commit::default()
        };
        store.commit(&id, &commit).await?;
    }
    Ok(())
}
