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
//! mimalloc also commits each arena it reserves at once on Linux (`arena_eager_commit`), which
//! left `reel --version` with 14 MB resident where 9 are used. The first arena is reserved by
//! the first allocation, before `main`, so this crate turns that off in a constructor that the
//! loader runs before any Rust code allocates ([`commits_arenas_on_demand`] says whether it
//! ran).
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

/// `mi_option_arena_eager_commit`, by its place in mimalloc 3's `mi_option_t`; 2 by default
/// (commit at once where the OS overcommits, as Linux does), 0 once the constructor ran.
const ARENA_EAGER_COMMIT: mi_option_t = 4;

/// Run by the loader with the other constructors, before `main` and before the Rust runtime's
/// first allocation: from then on mimalloc commits an arena's memory as it hands it out.
#[used]
#[allow(unsafe_code)]
// SAFETY: `.init_array` holds `extern "C" fn()` pointers the loader calls once, in order, on
// the main thread before `main`; this one only sets an integer option. Priority 101 (the
// first a program may use) runs it before the constructors without one, mimalloc's own
// `mi_process_attach` among them, whose set-up takes the first arena.
#[unsafe(link_section = ".init_array.00101")]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand_at_load;

#[allow(unsafe_code)]
extern "C" fn commit_arenas_on_demand_at_load() {
    // SAFETY: as in `return_freed_memory_at_once`: one entry of mimalloc's option table.
    unsafe { mi_option_set(ARENA_EAGER_COMMIT, 0) }
}

/// Whether mimalloc commits arenas on demand (the constructor ran), as reel wants it.
#[allow(unsafe_code)]
pub fn commits_arenas_on_demand() -> bool {
    // SAFETY: mi_option_get takes an integer and reads one entry of mimalloc's option table.
    unsafe { mi_option_get(ARENA_EAGER_COMMIT) == 0 }
}

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
    fn arenas_are_committed_on_demand_from_the_start() {
        assert!(commits_arenas_on_demand());
    }

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
