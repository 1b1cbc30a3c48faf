//! The streaming benchmark: a long scripted reply through the whole path (log, projections, JSONL
//! encoding in the stdout sink's thread, a writer that discards and counts) and prints deltas per
//! second, bytes per delta and memory.
//!
//! It runs a short reply and a reply ten times longer in one process and compares them: bytes
//! per delta must not grow with the reply (no frame re-sends accumulated text), so a ratio above
//! 1.05 fails the command. Memory is read from /proc (peak and current resident set).

use std::{
    io::{self, Write},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use reel_engine::{Fanout, RunOutcome, Session, new_id};
use reel_providers::{Repeat, Script, ScriptedProvider, Step};
use reel_sinks::JsonlFrameSink;

/// A writer that discards everything and counts the bytes.
#[derive(Clone, Default)]
struct CountingWriter(Arc<AtomicU64>);

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Figures {
    deltas: usize,
    seconds: f64,
    bytes: u64,
    log_entries: u64,
    rss_growth_kib: u64,
    peak_rss_kib: u64,
}

impl Figures {
    fn deltas_per_second(&self) -> f64 {
        self.deltas as f64 / self.seconds
    }

    fn bytes_per_delta(&self) -> f64 {
        self.bytes as f64 / self.deltas as f64
    }
}

pub async fn run(deltas: usize) -> u8 {
    let long = deltas.max(10);
    println!(
        "reel bench: one scripted reply of N text deltas of 5 bytes, through log, projections and the JSONL sink"
    );
    println!(
        "{:>10} {:>10} {:>12} {:>12} {:>12} {:>14} {:>12}",
        "deltas",
        "seconds",
        "deltas/s",
        "bytes/delta",
        "log entries",
        "RSS growth KiB",
        "peak RSS KiB"
    );
    let mut rows = Vec::new();
    for deltas in [long / 10, long] {
        let Some(figures) = stream_reply(deltas).await else {
            eprintln!("reel bench: the run did not finish");
            return 1;
        };
        println!(
            "{:>10} {:>10.3} {:>12.0} {:>12.1} {:>12} {:>14} {:>12}",
            figures.deltas,
            figures.seconds,
            figures.deltas_per_second(),
            figures.bytes_per_delta(),
            figures.log_entries,
            figures.rss_growth_kib,
            figures.peak_rss_kib
        );
        rows.push(figures);
    }
    let ratio = rows[1].bytes_per_delta() / rows[0].bytes_per_delta();
    let memory_per_delta = |f: &Figures| f.rss_growth_kib as f64 * 1024.0 / f.deltas as f64;
    println!("bytes per delta, long / short reply: {ratio:.3} (must stay below 1.05)");
    println!(
        "RSS growth per delta: short {:.0} B, long {:.0} B (the timeline and the model context keep the reply's text)",
        memory_per_delta(&rows[0]),
        memory_per_delta(&rows[1])
    );
    if ratio > 1.05 { 1 } else { 0 }
}

async fn stream_reply(deltas: usize) -> Option<Figures> {
    // A repeat plays as it goes: a list of a million steps would be copied for the call and
    // counted as the session's memory.
    let script = Script {
        turns: vec![vec![Step::Repeat(Repeat {
            times: deltas as u64,
            steps: vec![Step::Text("word ".into())],
        })]],
        summary: None,
    };
    let provider = ScriptedProvider::new(script);
    let written = CountingWriter::default();
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(JsonlFrameSink::new(
        "null",
        written.clone(),
        false,
    )));
    let mut session = Session::new(new_id(), fanout);
    let rss_before = proc_status_kib("VmRSS");

    let started = Instant::now();
    let outcome = super::run_prompt(&mut session, &provider).await;
    let log_entries = session.log().last_ordinal();
    let rss_after = proc_status_kib("VmRSS");
    let failures = session.close().await;
    let seconds = started.elapsed().as_secs_f64();
    (outcome == RunOutcome::Finished && failures.is_empty()).then(|| Figures {
        deltas,
        seconds,
        bytes: written.0.load(Ordering::Relaxed),
        log_entries,
        rss_growth_kib: rss_after.saturating_sub(rss_before),
        peak_rss_kib: proc_status_kib("VmHWM"),
    })
}

fn proc_status_kib(key: &str) -> u64 {
    super::proc_status_kib("self", key)
}
