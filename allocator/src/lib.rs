//! The process's memory allocator: mimalloc, set to give freed memory back to the system soon
//! after a span of it is free, also in a process that has gone quiet.
//!
//! reel uses mimalloc because events are allocated on the session's thread and freed on the
//! sinks' threads, which glibc's malloc handled slowly (a third of the streaming path, measured
//! with `perf`). mimalloc is built to override `malloc` too, so C code in the process (SQLite,
//! which copies a stored row twice) allocates from it as well: glibc's malloc kept such buffers
//! for good.
//!
//! mimalloc purges a free span (gives it back to the system) once it has been free for its
//! purge delay (1 s by default), but it looks for spans that are due only when a thread next
//! allocates or frees: a session that went quiet after a long reply kept what the reply's end
//! had freed resident until the next burst, 40-50 bytes per delta of a 1,000,000-delta reply.
//! With no delay at all, each free that empties a span hands it back itself; but a busy server
//! then gives back pages it takes again a moment later, and every one of them is a system call
//! and a page fault per page (a fifth of the streaming worker's time in `reel serve`'s burst).
//! So the delay is short ([`PURGE_DELAY_MS`]) and a thread of this crate's, woken every
//! [`PURGE_EVERY`], purges what is due when no other thread does: a quiet process gives its
//! freed memory back within about half a second, a busy one reuses it (see
//! docs/benchmarks.md).
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
//!     reel_allocator::return_freed_memory_soon();
//! }
//! ```

/// The global allocator.
pub use mimalloc::MiMalloc as Allocator;

use std::{ffi::c_long, time::Duration};

use libmimalloc_sys::{mi_collect, mi_option_get, mi_option_set, mi_option_t};

/// `mi_option_purge_delay`, by its place in mimalloc 3's `mi_option_t` (include/mimalloc.h):
/// libmimalloc-sys names no constant for it. The tests check it is the option whose default is
/// mimalloc's documented purge delay.
const PURGE_DELAY: mi_option_t = 15;

/// How long a free span stays with the process before it is given back: longer than the gaps
/// between a busy server's bursts of frees and allocations, short enough that a quiet process
/// is soon small again.
pub const PURGE_DELAY_MS: c_long = 100;

/// How often the purging thread looks for spans that are due.
pub const PURGE_EVERY: Duration = Duration::from_millis(500);

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
    // SAFETY: as in `return_freed_memory_soon`: one entry of mimalloc's option table.
    unsafe { mi_option_set(ARENA_EAGER_COMMIT, 0) }
}

/// Whether mimalloc commits arenas on demand (the constructor ran), as reel wants it.
#[allow(unsafe_code)]
pub fn commits_arenas_on_demand() -> bool {
    // SAFETY: mi_option_get takes an integer and reads one entry of mimalloc's option table.
    unsafe { mi_option_get(ARENA_EAGER_COMMIT) == 0 }
}

/// Makes mimalloc give a freed span back to the system once it has been free for
/// [`PURGE_DELAY_MS`], and starts the thread (`reel-purge`) that gives back what is due every
/// [`PURGE_EVERY`] when no other thread allocates or frees. Call it first thing in `main`. An
/// error says the thread could not start: the process then runs on with the delay, and its
/// freed memory goes back at its next frees.
#[allow(unsafe_code)]
pub fn return_freed_memory_soon() -> std::io::Result<()> {
    // SAFETY: mi_option_set takes two integers and writes one entry of mimalloc's option
    // table, which mimalloc reads atomically; it may be called at any time, from any thread.
    unsafe { mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) }
    // Without the thread a quiet process would keep what it freed last (see the module doc).
    std::thread::Builder::new()
        .name("reel-purge".into())
        .stack_size(64 * 1024)
        .spawn(purge_forever)
        .map(drop)
}

/// The purging thread's loop: a look took about 55 µs of CPU when nothing was due (0.11 ms a
/// second in an idle `reel serve`, measured with its `schedstat`), and the thread allocates
/// nothing.
#[allow(unsafe_code)]
fn purge_forever() {
    loop {
        std::thread::sleep(PURGE_EVERY);
        // SAFETY: mi_collect takes a bool and collects the calling thread's own (empty) heap,
        // then purges the spans of every arena whose delay has passed; any thread may call it.
        unsafe { mi_collect(false) }
    }
}

/// mimalloc's purge delay in milliseconds: 1000 by default, [`PURGE_DELAY_MS`] once
/// [`return_freed_memory_soon`] ran.
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
    fn the_purge_delay_goes_from_mimallocs_default_to_reels() {
        // The default proves PURGE_DELAY names the purge delay (no other option defaults to 1000),
        // unless the environment set it.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay_ms(), 1000);
        }
        return_freed_memory_soon().unwrap();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
