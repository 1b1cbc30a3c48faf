//! PostgreSQL's search documents, written by the store in the statement that writes their
//! entities (migration 0010), so the index is never behind nor ahead of the stored entities.
//!
//! Until migration 0010, statement triggers on `entities` wrote them, as SQLite's triggers
//! still do. On PostgreSQL that cost twice what the documents themselves cost: two PL/pgSQL
//! calls per upsert (its INSERT and its UPDATE triggers both fire), each reading a transition
//! table and starting an INSERT of its own, and every entity's payload parsed again as `jsonb`.
//! Here the writer, which has the payload in hand, computes each document's columns and
//! sends them beside the entities. In the server's log of `reel bench`'s conversation (two
//! documents a turn), the entities' statement took 0.30-0.33 ms with the triggers and
//! 0.13-0.16 ms this way, against 0.03-0.04 ms with no index (and planned once: see
//! `postgres_commit`).
//!
//! `tsv` is computed here too, not generated: PostgreSQL recomputes a generated column on every
//! UPDATE, and a tool call's status changes two or three times while its input does not.

use std::sync::LazyLock;

use reel_engine::StoreError;
use serde::Deserialize;
use sqlx::{AssertSqlSafe, PgConnection, Postgres, postgres::PgArguments, query::Query};

use crate::rows::{EntityRow, db};

/// The entity kinds that have a document: what a session said (as SQLite's triggers choose).
const SEARCHED_KINDS: [&str; 3] = ["ChatMessage", "ChatToolCall", "ChatToolResult"];

/// The upsert of documents: `$1` is the session, the columns' arrays of [`Documents`] follow
/// from `$first`. A document that is there already takes the new values when any differs (its
/// ordinal stays the one of the event that made it). Its `tsv` is computed again only when its
/// body changed: for an unchanged body the statement proposes an empty one, which the update
/// does not take. A new entity's document is not looked for.
pub(crate) fn upsert(first: usize) -> String {
    let [i, r, t, s, o, b, n] = std::array::from_fn(|at| first + at);
    format!(
        "INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body, tsv) \
         SELECT $1, d.i, d.r, d.t, d.s, d.o, d.b, CASE \
             WHEN d.n THEN {TSV} \
             WHEN d.b = (SELECT stored.body FROM search_docs stored \
                 WHERE stored.session_id = $1 AND stored.entity_id = d.i) THEN ''::tsvector \
             ELSE {TSV} END \
         FROM UNNEST(${i}::text[], ${r}::text[], ${t}::text[], ${s}::text[], ${o}::bigint[], ${b}::text[], ${n}::boolean[]) \
             AS d(i, r, t, s, o, b, n) \
         ON CONFLICT (session_id, entity_id) DO UPDATE SET role = excluded.role, \
             tool_name = excluded.tool_name, status = excluded.status, body = excluded.body, \
             tsv = CASE WHEN search_docs.body = excluded.body THEN search_docs.tsv ELSE excluded.tsv END \
         WHERE (search_docs.role, search_docs.tool_name, search_docs.status, search_docs.body) \
             IS DISTINCT FROM (excluded.role, excluded.tool_name, excluded.status, excluded.body)"
    )
}

/// A document's `tsvector`: the words of its body as written (the 'simple' configuration, any
/// language). A tsvector holds at most 1 MB: the first 100,000 characters are indexed.
const TSV: &str = "to_tsvector('simple', left(d.b, 100000))";

/// [`upsert`] on its own, for a writer that wrote the entities another way (a redaction).
static UPSERT: LazyLock<String> = LazyLock::new(|| upsert(2));

/// Writes the documents of `rows` of `session_id`, entities this transaction wrote anew after
/// removing the old ones (with their documents).
pub(crate) async fn write(
    conn: &mut PgConnection,
    session_id: &str,
    rows: &[EntityRow<'_>],
) -> Result<(), StoreError> {
    let documents = Documents::of(rows, 0);
    if documents.ids.is_empty() {
        return Ok(());
    }
    let query = sqlx::query(AssertSqlSafe(UPSERT.as_str())).bind(session_id);
    documents.bind(query).execute(conn).await.map_err(db)?;
    Ok(())
}

/// The documents of some entities, a column each, as `UNNEST` takes them.
#[derive(Default)]
pub(crate) struct Documents<'a> {
    ids: Vec<&'a str>,
    roles: Vec<String>,
    tool_names: Vec<String>,
    statuses: Vec<String>,
    ordinals: Vec<i64>,
    bodies: Vec<String>,
    /// Whether the entity is new, so that no document of it is stored yet.
    new: Vec<bool>,
}

impl<'a> Documents<'a> {
    /// The documents of those of `rows` that have one; an entity created by an event at or
    /// after `new_from` is new (its document is not looked for: when one was there after
    /// all, the statement still finds it by its conflict, and only computes a `tsv` more).
    pub(crate) fn of(rows: &'a [EntityRow<'a>], new_from: i64) -> Self {
        let mut documents = Self::default();
        for row in rows.iter().filter(|row| SEARCHED_KINDS.contains(&row.kind)) {
            documents.push(row, row.created_ordinal >= new_from);
        }
        documents
    }

    fn push(&mut self, row: &'a EntityRow<'a>, new: bool) {
        // A payload that does not parse is indexed without its words, as the triggers did: a
        // commit never fails for its document.
        let fields: Fields = serde_json::from_str(&row.payload_json).unwrap_or_default();
        let role = if row.kind != "ChatMessage" {
            "tool".to_owned()
        } else if fields.segment_type.as_deref() == Some("reasoning") {
            "reasoning".to_owned()
        } else {
            fields.role.unwrap_or_default()
        };
        let body = match row.tombstone {
            true => String::new(),
            false => (fields.text.or(fields.input).or(fields.result)).unwrap_or_default(),
        };
        self.ids.push(row.id);
        self.roles.push(without_nul(role));
        self.tool_names
            .push(without_nul(fields.tool_name.unwrap_or_default()));
        self.statuses
            .push(without_nul(fields.status.unwrap_or_default()));
        self.ordinals.push(row.created_ordinal);
        self.bodies.push(without_nul(body));
        self.new.push(new);
    }

    /// `query` with the seven columns bound, in [`upsert`]'s order.
    pub(crate) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.roles)
            .bind(&self.tool_names)
            .bind(&self.statuses)
            .bind(&self.ordinals)
            .bind(&self.bodies)
            .bind(&self.new)
    }
}

/// The fields of an entity's payload (canonical protobuf JSON) a document is made of; an
/// empty field is left out of that JSON, and reads as none.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Fields {
    role: Option<String>,
    tool_name: Option<String>,
    status: Option<String>,
    segment_type: Option<String>,
    text: Option<String>,
    input: Option<String>,
    result: Option<String>,
}

/// `text` without its NUL characters, which a PostgreSQL text cannot hold.
fn without_nul(text: String) -> String {
    match text.contains('\0') {
        true => text.replace('\0', ""),
        false => text,
    }
}
