//! A search document's `tsvector` made by the writer, equal to what PostgreSQL's
//! `to_tsvector('simple', body)` makes, for plain text: ASCII words and numbers between spaces
//! and common punctuation. Any other text (non-ASCII letters, `/`, `@`, a `-`, `:` or `.` inside
//! a word, a number with an exponent...) is left to PostgreSQL, whose parser turns such runs into
//! hosts, paths, e-mails, versions or hyphenated words by rules this module does not repeat.
//!
//! Why: PostgreSQL's default text-search parser classifies every character through the locale's
//! wide-character functions; `to_tsvector` took about 10 µs of a 20-word document, about as much as
//! its row and its GIN entries together. Sent in `tsvector`'s binary form, the same value costs the
//! server a copy. Where the two must agree is tested against the server itself (a generated corpus
//! in `postgres_search_docs_tests`), and every store checks a sample of the rules against its own
//! database before it uses this (see [`PROBE`]): a database whose `simple` configuration was
//! altered, or whose locale lowercases `I` otherwise, gets `to_tsvector`.

use std::collections::HashMap;

use sqlx::{
    Encode, Postgres, Type,
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, types::Oid},
};

/// The most characters of a body indexed (the documents' `left(body, 100000)`).
const MAX_BODY: usize = 100_000;
/// The last position `to_tsvector` counts to (PostgreSQL's `MAXENTRYPOS - 1`); a longer text is
/// left to it.
const MAX_POSITION: u16 = 16_383;
/// Positions `to_tsvector` keeps of one lexeme (`MAXNUMPOS - 1`); more occurrences are left to
/// it.
const MAX_POSITIONS: usize = 255;
/// The longest lexeme (`MAXSTRLEN`); PostgreSQL leaves a longer word out, with a notice.
const MAX_LEXEME: usize = 2_047;

/// Characters PostgreSQL's parser reads as blanks between ASCII words and numbers, in any
/// number and order. A `.`, `:` or `-` is one only before a space or the end ("Note: it is
/// late.", "- a list item").
const BLANKS: &[u8] = b" \t\n\r,;!?()[]{}\"'*_=#%`|";

/// A `tsvector`: its lexemes in byte order, each with its positions in increasing order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TsVector {
    lexemes: Vec<(String, Vec<u16>)>,
}

impl TsVector {
    /// `to_tsvector('simple', body)`, when `body` is plain text as this module defines it;
    /// `None` for anything else.
    pub(crate) fn of(body: &str) -> Option<Self> {
        if body.len() > MAX_BODY {
            return None;
        }
        // Words that differ only in case are one lexeme: read from a lowercase copy, each
        // lexeme's positions come in order.
        let lowercase = body.to_ascii_lowercase();
        let bytes = lowercase.as_bytes();
        let mut words: HashMap<&str, Vec<u16>> = HashMap::new();
        let mut position = 0u16;
        let mut at = 0;
        while at < bytes.len() {
            let byte = bytes[at];
            if byte.is_ascii_alphanumeric() {
                let start = at;
                while at < bytes.len() && bytes[at].is_ascii_alphanumeric() {
                    at += 1;
                }
                let word = &lowercase[start..at];
                // A number followed by `e` may be read as a float ("1e5x" is 1e5 and x).
                let float_like =
                    word.starts_with(|c: char| c.is_ascii_digit()) && word.contains('e');
                if float_like || word.len() > MAX_LEXEME || position == MAX_POSITION {
                    return None;
                }
                position += 1;
                let positions = words.entry(word).or_default();
                if positions.len() == MAX_POSITIONS {
                    return None;
                }
                positions.push(position);
            } else if matches!(byte, b'.' | b':' | b'-') {
                // Before a word these begin a host, a URL, a path or a signed number.
                match bytes.get(at + 1) {
                    None | Some(b' ' | b'\t' | b'\n' | b'\r') => at += 1,
                    Some(_) => return None,
                }
            } else if BLANKS.contains(&byte) {
                at += 1;
            } else {
                return None;
            }
        }
        let mut lexemes: Vec<(String, Vec<u16>)> = (words.into_iter())
            .map(|(word, positions)| (word.to_owned(), positions))
            .collect();
        lexemes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some(Self { lexemes })
    }

    /// Its text form, as PostgreSQL prints it (`'lexeme':1,3 'other':2`), for the tests.
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        let lexemes = self.lexemes.iter().map(|(lexeme, positions)| {
            let positions: Vec<String> = positions.iter().map(u16::to_string).collect();
            format!("'{lexeme}':{}", positions.join(","))
        });
        lexemes.collect::<Vec<_>>().join(" ")
    }
}

/// A sample of the rules [`TsVector::of`] relies on, which a store compares with its database's
/// own `to_tsvector('simple', ...)` before it sends any `tsvector` of its own.
pub(crate) const PROBE: &str = "It's I, WORLD; no. Note: - item - Word123 2nd 0x1F 1,000 (x) [y] {z} \"q\" \
     a_b a*b a=b a#b 50% `c` a|b a;b a!b a?b\tt\r\nend.";

/// `tsvector`'s built-in type ids (fixed in every PostgreSQL).
const TSVECTOR: Oid = Oid(3614);
const TSVECTOR_ARRAY: Oid = Oid(3643);

impl Type<Postgres> for TsVector {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(TSVECTOR)
    }
}

impl PgHasArrayType for TsVector {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(TSVECTOR_ARRAY)
    }
}

impl Encode<'_, Postgres> for TsVector {
    /// The binary form `tsvectorrecv` reads: the number of lexemes, then each as a
    /// NUL-terminated string, its number of positions and the positions (weight D, the
    /// default), all integers big-endian. Lexemes in byte order need no sort on the server.
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend_from_slice(&i32::try_from(self.lexemes.len())?.to_be_bytes());
        for (lexeme, positions) in &self.lexemes {
            buf.extend_from_slice(lexeme.as_bytes());
            buf.push(0);
            buf.extend_from_slice(&u16::try_from(positions.len())?.to_be_bytes());
            for position in positions {
                buf.extend_from_slice(&position.to_be_bytes());
            }
        }
        Ok(IsNull::No)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(body: &str) -> Option<String> {
        TsVector::of(body).map(|vector| vector.text())
    }

    #[test]
    fn plain_words_become_lowercase_lexemes_with_their_positions() {
        assert_eq!(
            text("The cat, the HAT. 2nd try!").as_deref(),
            Some("'2nd':5 'cat':2 'hat':4 'the':1,3 'try':6")
        );
        assert_eq!(text("").as_deref(), Some(""));
        assert_eq!(text("don't").as_deref(), Some("'don':1 't':2"));
        assert_eq!(
            text("Note: two -\n- items").as_deref(),
            Some("'items':3 'note':1 'two':2")
        );
    }

    #[test]
    fn text_the_parser_reads_by_other_rules_is_left_to_postgresql() {
        for body in [
            "e-mail", "a/b", "x@y", "http://x", "e.g.", "3.5", "1e5x", "wait...", "café", "<b>",
            "&amp;", "+5",
        ] {
            assert_eq!(TsVector::of(body), None, "{body}");
        }
    }

    #[test]
    fn limits_the_parser_applies_are_left_to_it() {
        assert_eq!(TsVector::of(&"w ".repeat(255)).map(|_| ()), Some(()));
        assert_eq!(TsVector::of(&"w ".repeat(256)), None);
        assert_eq!(TsVector::of(&"a".repeat(2_048)), None);
        assert_eq!(TsVector::of(&"x ".repeat(50_001)), None);
        // Distinct words of three letters: 16,384 of them fit in the indexed length.
        let word = |i: usize| -> String {
            [i / 676, i / 26 % 26, i % 26]
                .map(|letter| char::from(b'a' + letter as u8))
                .into_iter()
                .collect()
        };
        let words = |count: usize| (0..count).map(word).collect::<Vec<_>>();
        assert!(TsVector::of(&words(16_383).join(" ")).is_some());
        assert_eq!(TsVector::of(&words(16_384).join(" ")), None);
    }

    #[test]
    fn the_probe_is_plain_text() {
        assert!(TsVector::of(PROBE).is_some());
    }
}
