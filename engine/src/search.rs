//! Full-text search over what stored sessions said: the query a reader asks
//! ([`crate::SessionCatalog::search`]) and the hits a store answers, newest first. Each hit
//! names the event that made the entity, so a reader can open the session at that point.

/// What to look for, and where.
#[derive(Clone, Debug, Default)]
pub struct SearchQuery {
    pub text: String,
    pub session: Option<String>,
    /// `user`, `assistant`, `reasoning` or `tool`.
    pub role: Option<String>,
    pub tool: Option<String>,
    /// The entity's status (a tool call's `completed`, a result's `error`, ...).
    pub status: Option<String>,
    /// Only what was said at or after this time (milliseconds since the epoch).
    pub since_ms: Option<u64>,
    /// Only what was said before this time.
    pub until_ms: Option<u64>,
    pub limit: u32,
    /// Only hits older than this one (its `doc`): the next page.
    pub before: Option<i64>,
}

/// One place a query matched.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SearchHit {
    pub session_id: String,
    /// The event that made the entity: `reel show SESSION --at ORDINAL` opens the spot.
    pub ordinal: u64,
    pub entity_id: String,
    pub role: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    pub status: String,
    /// When it was said, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The text around the match, in pieces; the matched ones have `matched: true`.
    pub snippet: Vec<SnippetPart>,
    /// Where this hit is in the order: the cursor for the page after it.
    pub doc: i64,
}

/// A piece of a snippet.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnippetPart {
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub matched: bool,
}

/// Where a store marks a match in a snippet (SQL's `char(2)` and `char(3)`): [`OPEN`], the
/// matched text, [`CLOSE`].
const OPEN: char = '\u{2}';
const CLOSE: char = '\u{3}';

/// A snippet marked by the database (`OPEN`match`CLOSE`), in pieces.
pub fn snippet_parts(marked: &str) -> Vec<SnippetPart> {
    let mut parts = Vec::new();
    let mut rest = marked;
    while let Some(start) = rest.find(OPEN) {
        let (before, after) = rest.split_at(start);
        if !before.is_empty() {
            parts.push(SnippetPart {
                text: before.to_owned(),
                matched: false,
            });
        }
        let after = &after[OPEN.len_utf8()..];
        let end = after.find(CLOSE).unwrap_or(after.len());
        parts.push(SnippetPart {
            text: after[..end].to_owned(),
            matched: true,
        });
        rest = after.get(end + CLOSE.len_utf8()..).unwrap_or("");
    }
    if !rest.is_empty() {
        parts.push(SnippetPart {
            text: rest.to_owned(),
            matched: false,
        });
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_snippet_comes_apart_into_pieces() {
        let parts = snippet_parts("it is \u{2}sunny\u{3} in \u{2}Paris\u{3}");
        let texts: Vec<(&str, bool)> = parts.iter().map(|p| (p.text.as_str(), p.matched)).collect();
        assert_eq!(
            texts,
            [
                ("it is ", false),
                ("sunny", true),
                (" in ", false),
                ("Paris", true)
            ]
        );
    }
}
