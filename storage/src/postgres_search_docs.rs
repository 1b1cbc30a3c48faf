//! PostgreSQL's search documents, written by the store in the statement that writes their
//! entities (migration 0010), so the index is never behind nor ahead of the stored entities.
//!
//! Until migration 0010, statement triggers on `entities` wrote them, as SQLite's triggers
//! still do. On PostgreSQL that cost twice what the documents themselves cost: two PL/pgSQL
//! calls per upsert (its INSERT and its UPDATE triggers both fire), each reading a transition
//! table and starting an INSERT of its own, and every entity's payload parsed again as `jsonb`.
//! Here the writer, which has the decoded payload in hand, takes each document's columns from
//! it and sends them beside the entities. In the server's log of `reel bench`'s conversation (two
//! documents a turn), the entities' statement took 0.30-0.33 ms with the triggers and
//! 0.13-0.16 ms this way, against 0.03-0.04 ms with no index (and planned once: see
//! `postgres_commit`).
//!
//! `tsv` is computed here too, not generated: PostgreSQL recomputes a generated column on every
//! UPDATE, and a tool call's status changes two or three times while its input does not. For
//! plain text the writer sends the `tsvector` itself (see [`crate::simple_tsvector`]); the
//! statement calls `to_tsvector` for the rest.

use std::{borrow::Cow, sync::LazyLock};

use reel_engine::StoreError;
use reel_proto::{Any, rpc::SnapshotEntity};
use serde::Deserialize;
use sqlx::{AssertSqlSafe, PgConnection, Postgres, postgres::PgArguments, query::Query};

use crate::{
    rows::{db, entity_json, to_i64},
    simple_tsvector::{PROBE, TsVector},
};

/// The entity kinds that have a document: what a session said (as SQLite's triggers choose).
const SEARCHED_KINDS: [&str; 3] = ["ChatMessage", "ChatToolCall", "ChatToolResult"];

/// How a store's commits write the search documents of their entities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum DocumentWriting {
    /// Not at all: `reel bench`'s store without the index.
    Off,
    /// Each `tsv` made by the database's `to_tsvector`.
    #[default]
    Parsed,
    /// The `tsv` of plain text made by the writer, the rest by `to_tsvector`.
    Computed,
}

impl DocumentWriting {
    /// How the database on `conn` can take documents: with the writer's own `tsvector`s when
    /// its `to_tsvector('simple', ...)` agrees with [`TsVector::of`] on [`PROBE`] (a database
    /// whose `simple` configuration was altered, or whose locale lowercases otherwise, does not).
    pub(crate) async fn of_database(conn: &mut PgConnection) -> Result<Self, sqlx::Error> {
        let Some(probe) = TsVector::of(PROBE) else {
            return Ok(Self::Parsed);
        };
        let agrees: bool = sqlx::query_scalar("SELECT to_tsvector('simple', $1) = $2")
            .bind(PROBE)
            .bind(probe)
            .fetch_one(conn)
            .await?;
        if !agrees {
            tracing::debug!(
                "this database's to_tsvector('simple', ...) reads plain text otherwise than reel: it computes every search document's tsvector"
            );
        }
        Ok(if agrees { Self::Computed } else { Self::Parsed })
    }
}

/// The upsert of documents: `$1` is the session, the columns' arrays of [`Documents`] follow
/// from `$first`. A document that is there already takes the new values when any differs (its
/// ordinal stays the one of the event that made it). Its `tsv`, when the writer sent none, is
/// computed again only when its body changed: for an unchanged body the statement proposes an
/// empty one, which the update does not take. A new entity's document is not looked for.
pub(crate) fn upsert(first: usize) -> String {
    let [i, r, t, s, o, b, n, v] = std::array::from_fn(|at| first + at);
    format!(
        "INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body, tsv) \
         SELECT $1, d.i, d.r, d.t, d.s, d.o, d.b, CASE \
             WHEN d.v IS NOT NULL THEN d.v \
             WHEN d.n THEN {TSV} \
             WHEN d.b = (SELECT stored.body FROM search_docs stored \
                 WHERE stored.session_id = $1 AND stored.entity_id = d.i) THEN ''::tsvector \
             ELSE {TSV} END \
         FROM UNNEST(${i}::text[], ${r}::text[], ${t}::text[], ${s}::text[], ${o}::bigint[], ${b}::text[], ${n}::boolean[], ${v}::tsvector[]) \
             AS d(i, r, t, s, o, b, n, v) \
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

/// Writes the documents of `entities` of `session_id`, which this transaction wrote anew after
/// removing the old ones (with their documents).
pub(crate) async fn write(
    conn: &mut PgConnection,
    session_id: &str,
    entities: &[SnapshotEntity],
    writing: DocumentWriting,
) -> Result<(), StoreError> {
    let documents = Documents::of(entities, 0, writing);
    if documents.ids.is_empty() {
        return Ok(());
    }
    let query = sqlx::query(AssertSqlSafe(UPSERT.as_str())).bind(session_id);
    documents.bind(query).execute(conn).await.map_err(db)?;
    Ok(())
}

/// The documents of some entities, a column each, as `UNNEST` takes them; the texts borrowed
/// from the entities where they need no change.
#[derive(Default)]
pub(crate) struct Documents<'a> {
    ids: Vec<&'a str>,
    roles: Vec<Cow<'a, str>>,
    tool_names: Vec<Cow<'a, str>>,
    statuses: Vec<Cow<'a, str>>,
    ordinals: Vec<i64>,
    bodies: Vec<Cow<'a, str>>,
    /// Whether the entity is new, so that no document of it is stored yet.
    new: Vec<bool>,
    /// The body's `tsvector` where the writer made it (plain text, when the database agrees).
    vectors: Vec<Option<TsVector>>,
    writing: DocumentWriting,
}

impl<'a> Documents<'a> {
    /// The documents of those of `entities` that have one; an entity created by an event at or
    /// after `new_from` is new (its document is not looked for: when one was there after
    /// all, the statement still finds it by its conflict, and only computes a `tsv` more).
    pub(crate) fn of(
        entities: &'a [SnapshotEntity],
        new_from: u64,
        writing: DocumentWriting,
    ) -> Self {
        let mut documents = Self {
            writing,
            ..Self::default()
        };
        let searched = |entity: &&SnapshotEntity| SEARCHED_KINDS.contains(&entity.kind.as_str());
        for entity in entities.iter().filter(searched) {
            documents.push(entity, entity.created_ordinal >= new_from);
        }
        documents
    }

    fn push(&mut self, entity: &'a SnapshotEntity, new: bool) {
        let fields = Fields::of(entity);
        let role = if entity.kind != "ChatMessage" {
            Cow::Borrowed("tool")
        } else if fields.segment_type.as_deref() == Some("reasoning") {
            Cow::Borrowed("reasoning")
        } else {
            fields.role.unwrap_or_default()
        };
        let body = match entity.tombstone {
            true => Cow::Borrowed(""),
            false => (fields.text.or(fields.input).or(fields.result)).unwrap_or_default(),
        };
        self.ids.push(&entity.id);
        self.roles.push(without_nul(role));
        self.tool_names
            .push(without_nul(fields.tool_name.unwrap_or_default()));
        self.statuses
            .push(without_nul(fields.status.unwrap_or_default()));
        self.ordinals.push(to_i64(entity.created_ordinal));
        let body = without_nul(body);
        let vector = match self.writing {
            DocumentWriting::Computed => TsVector::of(&body),
            DocumentWriting::Off | DocumentWriting::Parsed => None,
        };
        self.bodies.push(body);
        self.new.push(new);
        self.vectors.push(vector);
    }

    /// `query` with the eight columns bound, in [`upsert`]'s order.
    pub(crate) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        let texts = |column: &'q [Cow<'a, str>]| -> Vec<&'q str> {
            column.iter().map(AsRef::as_ref).collect()
        };
        query
            .bind(&self.ids)
            .bind(texts(&self.roles))
            .bind(texts(&self.tool_names))
            .bind(texts(&self.statuses))
            .bind(&self.ordinals)
            .bind(texts(&self.bodies))
            .bind(&self.new)
            .bind(&self.vectors)
    }
}

/// The fields of an entity's payload a document is made of, by their names in its canonical
/// protobuf JSON (as SQLite's triggers read them there); an empty field is left out of that
/// JSON, and reads as none.
#[derive(Default)]
struct Fields<'a> {
    role: Option<Cow<'a, str>>,
    tool_name: Option<Cow<'a, str>>,
    status: Option<Cow<'a, str>>,
    segment_type: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    input: Option<Cow<'a, str>>,
    result: Option<Cow<'a, str>>,
}

impl<'a> Fields<'a> {
    /// Read from the decoded payload for the three kinds of searched entities (no JSON made
    /// and parsed back on the commit's path), from its JSON for any other payload.
    fn of(entity: &'a SnapshotEntity) -> Self {
        let field = |text: &'a String| (!text.is_empty()).then_some(Cow::Borrowed(text.as_str()));
        match &entity.payload {
            Some(Any::ChatMessageEntity(message)) => Self {
                role: field(&message.role),
                status: field(&message.status),
                segment_type: field(&message.segment_type),
                text: field(&message.text),
                ..Self::default()
            },
            Some(Any::ToolCallEntity(call)) => Self {
                tool_name: field(&call.tool_name),
                status: field(&call.status),
                input: field(&call.input),
                ..Self::default()
            },
            Some(Any::ToolResultEntity(result)) => Self {
                tool_name: field(&result.tool_name),
                status: field(&result.status),
                result: field(&result.result),
                ..Self::default()
            },
            _ => JsonFields::of(entity).into(),
        }
    }
}

/// [`Fields`] read from a payload's JSON.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct JsonFields {
    role: Option<String>,
    tool_name: Option<String>,
    status: Option<String>,
    segment_type: Option<String>,
    text: Option<String>,
    input: Option<String>,
    result: Option<String>,
}

impl JsonFields {
    /// A payload that does not encode or parse is indexed without its words, as the triggers
    /// did: a commit never fails for its document.
    fn of(entity: &SnapshotEntity) -> Self {
        let json = entity_json(entity).unwrap_or_default();
        serde_json::from_str(&json).unwrap_or_default()
    }
}

impl From<JsonFields> for Fields<'_> {
    fn from(json: JsonFields) -> Self {
        Self {
            role: json.role.map(Cow::Owned),
            tool_name: json.tool_name.map(Cow::Owned),
            status: json.status.map(Cow::Owned),
            segment_type: json.segment_type.map(Cow::Owned),
            text: json.text.map(Cow::Owned),
            input: json.input.map(Cow::Owned),
            result: json.result.map(Cow::Owned),
        }
    }
}

/// `text` without its NUL characters, which a PostgreSQL text cannot hold.
fn without_nul(text: Cow<'_, str>) -> Cow<'_, str> {
    match text.contains('\0') {
        true => Cow::Owned(text.replace('\0', "")),
        false => text,
    }
}
