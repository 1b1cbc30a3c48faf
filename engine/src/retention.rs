//! Retention: which whole sessions go for their age (`reel prune`, `reel serve --retain`),
//! chosen from the catalog's summaries. Removing them is the store's and the host's: each
//! under its lease, never one a process holds.

use std::time::Duration;

use crate::catalog::SessionSummary;

/// Which sessions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Those not written for this long.
    OlderThan(Duration),
    /// All but the N written last.
    KeepLast(usize),
}

impl Retention {
    /// The sessions of `sessions` (newest first, as the catalog lists them) this retention
    /// removes, at `now_ms`.
    pub fn expired(
        self,
        sessions: &[SessionSummary],
        now_ms: u64,
    ) -> impl Iterator<Item = &SessionSummary> {
        let (keep, cutoff) = match self {
            Retention::KeepLast(n) => (n, i64::MAX),
            Retention::OlderThan(age) => {
                let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
                (0, now.saturating_sub(age))
            }
        };
        sessions
            .iter()
            .skip(keep)
            .filter(move |session| session.updated_at_ms < cutoff)
    }
}
