//! The memory a long reply leaves behind (`--reply-deltas N`): one `--stdin-rpc` process with a
//! SQLite timeline database (this binary, as a child, over real pipes) streams one scripted
//! reply of N deltas; the resident set is read before the prompt and a second after its done,
//! then after a `snapshot` request, which reads the stored reply back. What stays is the
//! reply's text in the model context and what the allocator keeps: at 1,000,000 deltas it
//! must stay within 32 bytes per delta, or the command fails.

use std::{ffi::OsStr, io, thread, time::Duration};

use super::stdin_rpc::Served;

/// The most resident memory a long reply may leave per delta.
const MAX_BYTES_PER_DELTA: f64 = 32.0;

/// Replies at least this long are held to [`MAX_BYTES_PER_DELTA`]; shorter ones are printed
/// only (the allocator's constant costs weigh more in them).
const HELD_FROM_DELTAS: usize = 1_000_000;

/// Returns whether the reply stayed within its memory budget.
pub fn run(deltas: usize) -> io::Result<bool> {
    let folder = tempfile::tempdir()?;
    let db = folder.path().join("timeline.db");
    let flags: [&OsStr; 4] = [
        "--timeline-db".as_ref(),
        db.as_os_str(),
        "--session-id".as_ref(),
        "bench".as_ref(),
    ];
    let script = format!(
        "turns:\n  - - text: \"warm\"\n  - - repeat: {{times: {deltas}, steps: [{{text: \"tok \"}}]}}\n"
    );
    println!(
        "reel bench: one stdin-RPC process with a SQLite timeline database streams a reply of {deltas} deltas"
    );
    let mut served = Served::start_with(Some(&script), &flags)?;
    served.submit("warm", "warm up")?;
    served.read_until("warm", "\"done\"")?;
    let before = settled_rss(&served);
    served.submit("long", "a long one")?;
    served.read_until("long", "\"done\"")?;
    let after_reply = settled_rss(&served);
    served.send(r#"{"requestId":"whole","snapshot":{}}"#)?;
    served.read_until("whole", "\"done\"")?;
    let after_snapshot = settled_rss(&served);
    served.shutdown()?;
    let per_delta = |rss: u64| (rss.saturating_sub(before) * 1024) as f64 / deltas as f64;
    let (reply, snapshot) = (per_delta(after_reply), per_delta(after_snapshot));
    println!(
        "resident set: {before} KiB before the reply, {after_reply} KiB after it ({reply:.1} B per delta), {after_snapshot} KiB after a snapshot ({snapshot:.1} B per delta)"
    );
    if deltas < HELD_FROM_DELTAS {
        return Ok(true);
    }
    let held = reply.max(snapshot) <= MAX_BYTES_PER_DELTA;
    println!(
        "memory left per delta: {:.1} B (must stay within {MAX_BYTES_PER_DELTA} B at {HELD_FROM_DELTAS} deltas or more)",
        reply.max(snapshot)
    );
    Ok(held)
}

/// The child's resident set (KiB) once it has been idle for a second, as a session between
/// requests is.
fn settled_rss(served: &Served) -> u64 {
    thread::sleep(Duration::from_secs(1));
    served.status_kib("VmRSS")
}
