//! Full-text search over what the stored sessions said: messages, reasoning, tool arguments
//! and tool results (one document per entity, in the transaction that writes the entity: on
//! SQLite by the database's triggers on `entities`, migration 0008; on PostgreSQL by the store,
//! [`crate::postgres_search_docs`]). SQLite answers with FTS5 (its query syntax: words, "a
//! phrase", OR, NOT, prefix*), PostgreSQL with a `tsvector` GIN index (web-search syntax:
//! words, "a phrase", or, -word). Hits come newest first.
//!
//! SQLite's FTS5 takes new documents in batches (migration 0010), so a search there reads two
//! places in one transaction: FTS5 for the indexed documents, and the documents still waiting
//! for the next batch, matched by the same query in an FTS5 table of the connection's own.
//!
//! The query and hit types are the engine's ([`reel_engine::SearchQuery`]).

use reel_engine::{SearchHit, SearchQuery, StoreError, snippet_parts};
use sqlx::{Connection, Row, SqliteConnection};

use crate::{PostgresStore, SqliteStore, rows::to_i64};

// Every query marks a snippet's matches with char(2) and char(3), the markers
// `reel_engine::snippet_parts` takes apart.

/// SQLite's query of one FTS5 table over `search_docs`: the index (`search_fts`) or the
/// documents still waiting for it (`search_waiting`).
macro_rules! sqlite_search {
    ($fts:literal) => {
        concat!(
            "SELECT d.doc, d.session_id, d.entity_id, d.role, d.tool_name, d.status, d.ordinal, \
             coalesce(e.created_at, 0), snippet(",
            $fts,
            ", 0, char(2), char(3), '…', 16) \
             FROM ",
            $fts,
            " JOIN search_docs d ON d.doc = ",
            $fts,
            ".rowid \
             LEFT JOIN events e ON e.session_id = d.session_id AND e.ordinal = d.ordinal \
             WHERE ",
            $fts,
            " MATCH $1 \
             AND ($2 IS NULL OR d.session_id = $2) AND ($3 IS NULL OR d.role = $3) \
             AND ($4 IS NULL OR d.tool_name = $4) AND ($5 IS NULL OR d.status = $5) \
             AND ($6 IS NULL OR e.created_at >= $6) AND ($7 IS NULL OR e.created_at < $7) \
             AND ($8 IS NULL OR ",
            $fts,
            ".rowid < $8) \
             ORDER BY ",
            $fts,
            ".rowid DESC LIMIT $9"
        )
    };
}

const SQLITE_SEARCH: &str = sqlite_search!("search_fts");
const SQLITE_SEARCH_WAITING: &str = sqlite_search!("search_waiting");

/// The documents waiting for FTS5 (migration 0010) go into an FTS5 table of this connection's
/// own, tokenized as `search_fts` is, so that the same query matches them the same way. It
/// lives in memory (never in a file a redaction would have to reach), and each search fills it
/// inside its read transaction and rolls that back, so it holds nothing between searches.
/// `temp_store` is the connection's: searches run on reading connections (`reel search`,
/// `reel serve`'s reader), whose other work needs no temporary file of a size to matter.
const SQLITE_WAITING_TABLE: &str = "PRAGMA temp_store = MEMORY; \
     CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_waiting USING fts5(\
     body, tokenize = 'unicode61 remove_diacritics 2', columnsize = 0)";
/// Only the waiting documents the query's other filters leave (all but the time, which the
/// search itself checks): a page further back than every waiting one fills nothing. `CROSS
/// JOIN` keeps the few waiting rows outside: with the filters on `d`, SQLite's planner would
/// otherwise scan every document (130 ms at 1,000,000).
const SQLITE_FILL_WAITING: &str = "INSERT INTO temp.search_waiting (rowid, body) \
     SELECT d.doc, d.body FROM search_pending p CROSS JOIN search_docs d ON d.doc = p.doc \
     WHERE ($1 IS NULL OR d.session_id = $1) AND ($2 IS NULL OR d.role = $2) \
     AND ($3 IS NULL OR d.tool_name = $3) AND ($4 IS NULL OR d.status = $4) \
     AND ($5 IS NULL OR d.doc < $5)";

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

/// Refuses an empty query (there is nothing to look for).
pub(crate) fn check(query: &SearchQuery) -> Result<(), StoreError> {
    if query.text.trim().is_empty() {
        return Err(syntax(query, "it is empty"));
    }
    Ok(())
}

/// The error for a query the database's search syntax does not take.
fn syntax(query: &SearchQuery, why: &str) -> StoreError {
    StoreError::Query(format!(
        "the query {:?} is not valid search syntax ({why}); put words or a \"quoted phrase\"",
        query.text
    ))
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
    /// The newest places `query` matches (FTS5).
    pub(crate) async fn full_text_search(
        &mut self,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        check(query)?;
        // FTS5 reads a query that begins with `*` as a "special query" (`*reads`, `*id`)
        // that asks about the index rather than searching it; none of them is a search.
        if query.text.starts_with('*') {
            return Err(syntax(query, "it begins with *"));
        }
        let mut conn = self.conn.lock().await;
        let searched = Self::search_both(&mut conn, query).await;
        drop(conn);
        match searched {
            Ok(hits) => Ok(hits),
            Err(sqlx::Error::Database(error)) if is_syntax(error.message()) => {
                Err(syntax(query, error.message()))
            }
            Err(error) => Err(self.error(error)),
        }
    }

    /// The newest hits among the indexed documents and those waiting for the index, read in
    /// one transaction so that a batch moving into the index meanwhile is seen once.
    async fn search_both(
        conn: &mut SqliteConnection,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, sqlx::Error> {
        sqlx::raw_sql(SQLITE_WAITING_TABLE)
            .execute(&mut *conn)
            .await?;
        // Dropped unfinished (a client gone), the transaction rolls back at the connection's
        // next use.
        let mut read = conn.begin().await?;
        let waiting = sqlx::query(SQLITE_FILL_WAITING)
            .bind(query.session.as_deref())
            .bind(query.role.as_deref())
            .bind(query.tool.as_deref())
            .bind(query.status.as_deref())
            .bind(query.before)
            .execute(&mut *read)
            .await?;
        let mut hits = Vec::new();
        if waiting.rows_affected() > 0 {
            let rows = bind_query!(SQLITE_SEARCH_WAITING, query)
                .fetch_all(&mut *read)
                .await?;
            hits.extend(rows.iter().map(hit));
        }
        let rows = bind_query!(SQLITE_SEARCH, query)
            .fetch_all(&mut *read)
            .await?;
        hits.extend(rows.iter().map(hit));
        // Rolled back: nothing of the main database was written, and the waiting table empties.
        read.rollback().await?;
        hits.sort_unstable_by_key(|hit| std::cmp::Reverse(hit.doc));
        hits.truncate(usize::try_from(query.limit).unwrap_or(usize::MAX));
        Ok(hits)
    }
}

impl PostgresStore {
    /// The newest places `query` matches (the tsvector index).
    pub(crate) async fn full_text_search(
        &mut self,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        check(query)?;
        let rows = bind_query!(POSTGRES_SEARCH, query)
            .fetch_all(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows.iter().map(hit).collect())
    }
}

/// Whether SQLite's message says the FTS5 query could not be parsed: the parser's own
/// messages (sqlite3.c, `sqlite3Fts5ParseError`), and not "fts5: corruption …", which is the
/// database's fault and stays a storage error.
fn is_syntax(message: &str) -> bool {
    const PARSER_SAYS: [&str; 8] = [
        "fts5: syntax error",
        "fts5: parser stack overflow",
        "queries are not supported",
        "fts5 expression tree is too large",
        "unterminated string",
        "no such column",
        "expected integer, got",
        "unknown special query",
    ];
    PARSER_SAYS.iter().any(|says| message.contains(says))
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
