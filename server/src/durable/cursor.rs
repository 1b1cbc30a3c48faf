//! `Stream-Cursor`: the number of the 20-second interval since 2024-10-09, as the protocol
//! (section 10.1) says, so that a cache keys the long-polls of one interval together and a
//! reader's next request is never the same URL as its last.

use std::{
    hash::{BuildHasher, RandomState},
    time::{SystemTime, UNIX_EPOCH},
};

/// 2024-10-09T00:00:00Z, the protocol's epoch for cursors.
const EPOCH_SECS: u64 = 1_728_432_000;

/// Seconds per interval.
const INTERVAL_SECS: u64 = 20;

/// The most jitter added to a cursor the client is already at (the protocol's 3,600 s).
const MAX_JITTER_SECS: u64 = 3600;

/// The cursor of a live response to a request that echoed `given`: the current interval, or
/// past `given` when the client is at it or ahead (then by a random 1 to 3,600 seconds' worth
/// of intervals), so that cursors never go back and never repeat.
pub fn next(given: Option<&str>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let current = now.saturating_sub(EPOCH_SECS) / INTERVAL_SECS;
    match given.and_then(|text| text.parse::<u64>().ok()) {
        Some(given) if given >= current => given.saturating_add(jitter_intervals()),
        _ => current,
    }
    .to_string()
}

/// 1 to 180 intervals (1 to 3,600 seconds, rounded up to intervals).
fn jitter_intervals() -> u64 {
    // The standard library's per-process random keys: jitter needs no stronger randomness.
    let random = RandomState::new().hash_one(SystemTime::now());
    let seconds = 1 + random % MAX_JITTER_SECS;
    seconds.div_ceil(INTERVAL_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_the_interval_and_always_moves_past_the_clients() {
        let current: u64 = next(None).parse().unwrap();
        assert!(current > 40_000, "{current}: intervals since 2024-10-09");
        assert_eq!(next(Some("12")), current.to_string(), "an old cursor");
        assert_eq!(next(Some("garbage")), current.to_string());
        for _ in 0..100 {
            let at: u64 = next(Some(&current.to_string())).parse().unwrap();
            assert!((current + 1..=current + 180).contains(&at), "{at}");
        }
        let ahead = current + 1000;
        let moved: u64 = next(Some(&ahead.to_string())).parse().unwrap();
        assert!(moved > ahead);
    }
}
