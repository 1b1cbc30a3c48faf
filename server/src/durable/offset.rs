//! Durable Streams offsets for a session's stream: where a reader is, as the protocol
//! (section 8) wants them, opaque strings that sort as the positions do.
//!
//! A position in a session's stream is always between two events: a response carries every
//! frame of each event it holds, so no offset ever falls between two frames of one event (the
//! SSE route's `N.K` cursors exist only because that route sends frames one at a time). The
//! offset after event N is N in twenty decimal digits, zero-padded: every u64 fits, and
//! strings of one length sort as their numbers do.

use std::fmt;

/// Digits of an offset: enough for every u64.
const DIGITS: usize = 20;

/// Where a reader asks to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// After event N (0: the beginning; `-1` and no offset mean that too).
    After(u64),
    /// `now`: the tail, whatever it is when the request is answered.
    Now,
}

impl Start {
    /// An offset as a client sends it; `None` when it is not one this server made.
    pub fn parse(given: Option<&str>) -> Option<Self> {
        match given {
            None | Some("-1") => Some(Self::After(0)),
            Some("now") => Some(Self::Now),
            Some(text) if text.len() == DIGITS && text.bytes().all(|b| b.is_ascii_digit()) => {
                text.parse().ok().map(Self::After)
            }
            Some(_) => None,
        }
    }
}

/// The offset after event `ordinal`, as responses name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Offset(pub u64);

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:0width$}", self.0, width = DIGITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_sort_as_their_ordinals_and_parse_back() {
        let ordinals = [0, 1, 9, 10, 99, 1_000_000, u64::MAX];
        let offsets: Vec<String> = ordinals.iter().map(|o| Offset(*o).to_string()).collect();
        let mut sorted = offsets.clone();
        sorted.sort();
        assert_eq!(sorted, offsets);
        for (ordinal, offset) in ordinals.iter().zip(&offsets) {
            assert_eq!(offset.len(), DIGITS);
            assert_eq!(Start::parse(Some(offset)), Some(Start::After(*ordinal)));
        }
    }

    #[test]
    fn sentinels_and_malformed_offsets() {
        assert_eq!(Start::parse(None), Some(Start::After(0)));
        assert_eq!(Start::parse(Some("-1")), Some(Start::After(0)));
        assert_eq!(Start::parse(Some("now")), Some(Start::Now));
        let too_big = "99999999999999999999";
        for bad in [
            "",
            "12",
            "x",
            "-2",
            "NOW",
            " 00000000000000000001",
            too_big,
            "0000000000000000000a",
        ] {
            assert_eq!(Start::parse(Some(bad)), None, "{bad:?}");
        }
    }
}
