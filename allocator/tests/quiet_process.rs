//! A process that goes quiet gives back what it freed last: mimalloc purges a free span only
//! when some thread looks for spans that are due, and in a quiet process only reel's purging
//! thread does. Its own process (an integration test), so that no other test allocates or
//! frees meanwhile.

#![cfg(target_os = "linux")]

use std::{
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

#[global_allocator]
static ALLOCATOR: reel_allocator::Allocator = reel_allocator::Allocator;

/// Memory the test allocates and frees: far above what the process holds otherwise.
const BLOCKS: usize = 16_384;
const BLOCK_BYTES: usize = 4096;

#[test]
fn a_quiet_process_gives_what_it_freed_back_to_the_system() {
    reel_allocator::return_freed_memory_soon().unwrap();
    let before = resident_kib();
    let (measured_tx, measured) = mpsc::channel();
    let (end_tx, end) = mpsc::channel::<()>();
    // The blocks are freed by a thread that then waits without allocating, as a session's
    // thread does once its reply ended: if it exited, mimalloc would collect its heap then.
    let freeing = thread::spawn(move || {
        let blocks: Vec<Vec<u8>> = (0..BLOCKS)
            .map(|i| vec![u8::try_from(i % 251).unwrap(); BLOCK_BYTES])
            .collect();
        let held = resident_kib();
        drop(blocks);
        measured_tx.send(held).unwrap();
        let _ = end.recv();
    });
    let held = measured.recv().unwrap();
    let allocated_kib = (BLOCKS * BLOCK_BYTES / 1024) as u64;
    assert!(
        held >= before + allocated_kib / 2,
        "the blocks made the process {held} KiB from {before} KiB: they were not allocated"
    );
    // The purge delay and the thread's period are well under a second; a loaded machine may
    // take longer to run the thread.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = resident_kib();
    while now > before + allocated_kib / 4 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
        now = resident_kib();
    }
    end_tx.send(()).unwrap();
    freeing.join().unwrap();
    assert!(
        now <= before + allocated_kib / 4,
        "{allocated_kib} KiB freed 10 s ago: the process holds {now} KiB, {before} KiB before"
    );
}

/// The process's resident set, in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
