//! The process's memory allocator: mimalloc, set to give freed memory back to the system as
//! soon as a span of it is free.
//!
//! reel uses mimalloc because events are allocated on the session's thread and freed on the
//! sinks' threads, which glibc's malloc handled slowly (a third of the streaming path, measured
//! with `perf`). mimalloc purges freed pages after a delay (1 s), but it checks the delay only
//! when a thread next frees a page: a session that goes quiet after a long reply kept what the
//! reply's end had freed (the text copied into frames, rows and snapshots) resident until the
//! next burst, 40-50 bytes per delta of a 1,000,000-delta reply. With the delay at zero the free
//! that empties a span hands it back itself. mimalloc is built to override `malloc` too, so C
//! code in the process (SQLite, which copies a stored row twice) allocates from it as well:
//! glibc's malloc kept such buffers for good. Together they took a real session from 42-50
//! bytes per delta after such a reply to 11-13 (see docs/benchmarks.md).
//!
//! This crate is the one place reel calls C: the rest of the workspace forbids `unsafe`.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOCATOR: reel_allocator::Allocator = reel_allocator::Allocator;
//!
//! fn main() {
//!     reel_allocator::return_freed_memory_at_once();
//! }
//! ```

/// The global allocator.
pub use mimalloc::MiMalloc as Allocator;

use std::ffi::c_long;

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

/// `mi_option_purge_delay`, by its place in mimalloc 3's `mi_option_t` (include/mimalloc.h):
/// libmimalloc-sys names no constant for it. The tests check it is the option whose default is
/// mimalloc's documented purge delay.
const PURGE_DELAY: mi_option_t = 15;

/// Makes mimalloc give freed memory back to the system at the free that empties a span,
/// instead of after a delay checked only at a later free. Call it first thing in `main`.
#[allow(unsafe_code)]
pub fn return_freed_memory_at_once() {
    // SAFETY: mi_option_set takes two integers and writes one entry of mimalloc's option
    // table, which mimalloc reads atomically; it may be called at any time, from any thread.
    unsafe { mi_option_set(PURGE_DELAY, 0) }
}

/// mimalloc's purge delay in milliseconds: 1000 by default, 0 once
/// [`return_freed_memory_at_once`] ran.
#[allow(unsafe_code)]
pub fn purge_delay_ms() -> c_long {
    // SAFETY: mi_option_get takes an integer and reads one entry of mimalloc's option table.
    unsafe { mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_goes_from_mimallocs_default_to_zero() {
        // The default proves PURGE_DELAY names the purge delay (no other option defaults to 1000),
        // unless the environment set it.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay_ms(), 1000);
        }
        return_freed_memory_at_once();
        assert_eq!(purge_delay_ms(), 0);
    }
}
