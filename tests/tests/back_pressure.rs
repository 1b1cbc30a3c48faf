//! A slow reader slows reel down instead of making it buffer: a 10,000-delta reply written into
//! a 64 KiB pipe that is read slowly completes, loses nothing, and costs no more memory than the
//! same reply read at full speed.
//!
//! Back-pressure is checked by a ratio within one run: the run cannot finish long before the
//! slow reader has read most of it (its `durationMs` against the reader's time from the first
//! delta to the run's end, so that neither the start-up before the run nor the frames after it
//! count). A reel that buffered the reply would finish in milliseconds while the reader needs
//! over a second.

use std::{
    io::{BufRead, BufReader},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use reel_tests::{PeakRss, reel, scripted_command};

const DELTAS: usize = 10_000;
/// Each delta carries 1 KiB of text: about 14 MB of frames in all.
const DELTA_TEXT: usize = 1024;

struct Reading {
    /// Peak resident set of the reel process in KiB, sampled from /proc.
    peak_rss_kib: u64,
    patches: usize,
    /// The run's own duration, from its ChatRunFinished event.
    run_ms: u64,
    /// How long the reader took from the first delta to the run's end.
    read_ms: u64,
}

/// Runs the reply, reading `chunk` lines and then pausing `pause` each time.
fn read_reply(command: &str, chunk: usize, pause: Duration) -> Reading {
    let mut child = reel(&["run-command", command, "--rpc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let peak = PeakRss::watch(pid);
    let mut lines = BufReader::with_capacity(4096, child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("\"hello\""));
    let (mut patches, mut run_ms) = (0, None);
    let (mut first_patch, mut read_ms) = (None, None);
    'read: loop {
        for _ in 0..chunk {
            let Some(line) = lines.next() else {
                break 'read;
            };
            let line = line.unwrap();
            if line.contains("\"ChatTextPatch\"") {
                patches += 1;
                first_patch.get_or_insert_with(Instant::now);
            }
            if line.contains("\"ChatRunFinished\"") {
                read_ms = first_patch.map(|at| at.elapsed().as_millis() as u64);
                let frame: serde_json::Value = serde_json::from_str(&line).unwrap();
                run_ms = frame["uiEvent"]["payload"]["durationMs"]
                    .as_str()
                    .map(|d| d.parse().unwrap());
            }
        }
        thread::sleep(pause);
    }
    assert!(child.wait().unwrap().success());
    let peak = peak.stop();
    Reading {
        peak_rss_kib: peak,
        patches,
        run_ms: run_ms.expect("ChatRunFinished"),
        read_ms: read_ms.expect("a ChatTextPatch before ChatRunFinished"),
    }
}

#[test]
fn a_slow_reader_gets_everything_with_back_pressure_and_flat_memory() {
    let dir = tempfile::tempdir().unwrap();
    let text = "x".repeat(DELTA_TEXT - 1) + " ";
    let script = format!(
        "turns:\n  - - repeat:\n        times: {DELTAS}\n        steps: [{{text: \"{text}\"}}]\n"
    );
    let command = scripted_command(dir.path(), &script);

    let fast = read_reply(&command, usize::MAX, Duration::ZERO);
    // About 45 lines (64 KiB) every 5 ms: over a second for the whole reply.
    let slow = read_reply(&command, 45, Duration::from_millis(5));
    eprintln!(
        "read at full speed: peak RSS {} KiB, run {} ms, read {} ms; read slowly: peak RSS {} KiB, run {} ms, read {} ms",
        fast.peak_rss_kib, fast.run_ms, fast.read_ms, slow.peak_rss_kib, slow.run_ms, slow.read_ms
    );
    assert_eq!(fast.patches, DELTAS);
    assert_eq!(slow.patches, DELTAS, "the slow reader lost nothing");
    assert!(
        slow.run_ms * 5 >= slow.read_ms * 2,
        "the run waited for its reader: it took {} ms of the reader's {} ms",
        slow.run_ms,
        slow.read_ms
    );
    assert!(
        slow.peak_rss_kib < fast.peak_rss_kib + 8 * 1024,
        "reading slowly must not make reel buffer the reply: {} KiB vs {} KiB",
        slow.peak_rss_kib,
        fast.peak_rss_kib
    );
}
