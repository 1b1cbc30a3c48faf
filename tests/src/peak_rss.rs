//! Samples a process's resident set from /proc while a test drives it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

/// Samples `/proc/PID/status` every 2 ms and keeps the highest VmRSS seen.
pub struct PeakRss {
    peak: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
    sampler: Option<thread::JoinHandle<()>>,
}

impl PeakRss {
    pub fn watch(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let running = Arc::new(AtomicBool::new(true));
        let sampler = {
            let (peak, running) = (Arc::clone(&peak), Arc::clone(&running));
            thread::spawn(move || {
                while running.load(Ordering::Relaxed) {
                    if let Some(rss) = rss_kib(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    thread::sleep(Duration::from_millis(2));
                }
            })
        };
        Self {
            peak,
            running,
            sampler: Some(sampler),
        }
    }

    /// Stops sampling; the highest resident set seen, in KiB.
    pub fn stop(mut self) -> u64 {
        self.running.store(false, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            sampler.join().expect("sampler");
        }
        self.peak.load(Ordering::Relaxed)
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix("VmRSS:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}
