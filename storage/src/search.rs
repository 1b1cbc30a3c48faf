//! Full-text search over what the stored sessions said: messages, reasoning, tool arguments
//! and tool results (one document per entity, kept by the database's own triggers on
//! `entities`, see migration 0008). SQLite answers with FTS5 (its query syntax: words, "a
//! phrase", OR, NOT, prefix*), PostgreSQL with a `tsvector` GIN index (web-search syntax:
//! words, "a phrase", or, -word). Hits come newest first.

use reel_engine::StoreError;
use sqlx::Row;

use crate::{PostgresStore, SqliteStore, TimelineStore, rows::to_i64};

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
pub struct SnippetPart {
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub matched: bool,
}

/// Why a search could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The query is not one the database's search syntax takes.
    #[error(
        "the query {query:?} is not valid search syntax ({why}); put words or a \"quoted phrase\""
    )]
    Syntax { query: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the database marks a match in a snippet.
const OPEN: char = '\u{2}';
const CLOSE: char = '\u{3}';

const SQLITE_SEARCH: &str = "SELECT d.doc, d.session_id, d.entity_id, d.role, d.tool_name, d.status, d.ordinal, \
     coalesce(e.created_at, 0), snippet(search_fts, 0, char(2), char(3), '…', 16) \
     FROM search_fts JOIN search_docs d ON d.doc = search_fts.rowid \
     LEFT JOIN events e ON e.session_id = d.session_id AND e.ordinal = d.ordinal \
     WHERE search_fts MATCH $1 \
     AND ($2 IS NULL OR d.session_id = $2) AND ($3 IS NULL OR d.role = $3) \
     AND ($4 IS NULL OR d.tool_name = $4) AND ($5 IS NULL OR d.status = $5) \
     AND ($6 IS NULL OR e.created_at >= $6) AND ($7 IS NULL OR e.created_at < $7) \
     AND ($8 IS NULL OR search_fts.rowid < $8) \
     ORDER BY search_fts.rowid DESC LIMIT $9";

const POSTGRES_SEARCH: &str = "SELECT d.doc, d.session_id, d.entity_id, d.role, d.tool_name, d.status, d.ordinal, \
     coalesce(e.created_at, 0), ts_headline('simple', d.body, q, \
     'StartSel=' || chr(2) || ', StopSel=' || chr(3) || ', MaxWords=24, MinWords=8, MaxFragments=1') \
     FROM search_docs d CROSS JOIN websearch_to_tsquery('simple', $1) q \
     LEFT JOIN events e ON e.session_id = d.session_id AND e.ordinal = d.ordinal \
     WHERE d.tsv @@ q \
     AND ($2::text IS NULL OR d.session_id = $2) AND ($3::text IS NULL OR d.role = $3) \
     AND ($4::text IS NULL OR d.tool_name = $4) AND ($5::text IS NULL OR d.status = $5) \
     AND ($6::bigint IS NULL OR e.created_at >= $6) AND ($7::bigint IS NULL OR e.created_at < $7) \
     AND ($8::bigint IS NULL OR d.doc < $8) \
     ORDER BY d.doc DESC LIMIT $9";

impl TimelineStore {
    /// The newest places `query` matches.
    pub async fn search(&mut self, query: &SearchQuery) -> Result<Vec<SearchHit>, SearchError> {
        if query.text.trim().is_empty() {
            return Err(SearchError::Syntax {
                query: query.text.clone(),
                why: "it is empty".into(),
            });
        }
        match self {
            TimelineStore::Sqlite(store) => store.search(query).await,
            TimelineStore::Postgres(store) => store.search(query).await,
        }
    }
}

macro_rules! bind_query {
    ($sql:expr, $query:expr) => {
        sqlx::query($sql)
            .bind(&$query.text)
            .bind($query.session.as_deref())
            .bind($query.role.as_deref())
            .bind($query.tool.as_deref())
            .bind($query.status.as_deref())
            .bind($query.since_ms.map(to_i64))
            .bind($query.until_ms.map(to_i64))
            .bind($query.before)
            .bind(i64::from($query.limit))
    };
}

impl SqliteStore {
    async fn search(&mut self, query: &SearchQuery) -> Result<Vec<SearchHit>, SearchError> {
        let rows = bind_query!(SQLITE_SEARCH, query)
            .fetch_all(&mut *self.conn.lock().await)
            .await;
        match rows {
            Ok(rows) => Ok(rows.iter().map(|row| hit(row)).collect()),
            Err(sqlx::Error::Database(error)) if is_syntax(error.message()) => {
                Err(SearchError::Syntax {
                    query: query.text.clone(),
                    why: error.message().to_owned(),
                })
            }
            Err(error) => Err(self.error(error).into()),
        }
    }
}

impl PostgresStore {
    async fn search(&mut self, query: &SearchQuery) -> Result<Vec<SearchHit>, SearchError> {
        let rows = bind_query!(POSTGRES_SEARCH, query)
            .fetch_all(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows.iter().map(|row| hit(row)).collect())
    }
}

/// Whether SQLite's message says the FTS5 query could not be parsed.
fn is_syntax(message: &str) -> bool {
    message.contains("fts5")
        || message.contains("no such column")
        || message.contains("unterminated")
}

fn hit<R: Row>(row: &R) -> SearchHit
where
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    let unsigned = |value: i64| u64::try_from(value).unwrap_or(0);
    SearchHit {
        doc: row.get(0),
        session_id: row.get(1),
        entity_id: row.get(2),
        role: row.get(3),
        tool_name: row.get(4),
        status: row.get(5),
        ordinal: unsigned(row.get(6)),
        at_ms: unsigned(row.get(7)),
        snippet: snippet_parts(&row.get::<String, _>(8)),
    }
}

/// A snippet marked by the database (`OPEN`match`CLOSE`), in pieces.
fn snippet_parts(marked: &str) -> Vec<SnippetPart> {
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
