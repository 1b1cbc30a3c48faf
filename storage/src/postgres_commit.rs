//! A commit of a session's log to PostgreSQL: one transaction that locks the session's row,
//! checks that the commit continues the stored log, writes the events (one `UNNEST` statement
//! for any count), the entities with their search documents and the snapshot, brings the row
//! up to date and notifies the followers. The statements are the shared SQL of
//! [`crate::sql_store`] where there is one.

use std::sync::LazyLock;

use reel_engine::{Commit, DeadlineChanges, RunStatus, StoreError, approval_tally, run_tally};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

use crate::{
    postgres_notices::notify_commit,
    postgres_search_docs::{self, DocumentWriting, Documents},
    rows::{ENTITY_COLUMNS, ENTITY_UPSERT, EntityRow, db, event_json, now_ms, to_i64},
    sql_store::{
        CLEAR_DEADLINES, CREATE_SESSION, INSERT_SNAPSHOT, LAST_ORDINAL, PRUNE_SNAPSHOTS,
        REMOVE_DEADLINE, SET_DEADLINE, UPDATE_SESSION, check_continues,
    },
};

/// Writes `commit` of `session_id` (ending at ordinal `last`) in one transaction, with the
/// search documents of its entities written as `documents` says; `place` names the database in
/// errors. A failed statement rolls it back.
pub(crate) async fn write(
    conn: &mut PgConnection,
    (session_id, commit, last): (&str, &Commit, u64),
    documents: DocumentWriting,
    place: &str,
) -> Result<(), StoreError> {
    let mut tx = conn.begin_with(BEGIN).await.map_err(db)?;
    begin_commit(&mut tx, session_id, commit, place).await?;
    insert_events(&mut tx, session_id, commit).await?;
    upsert_entities(&mut tx, session_id, commit, documents).await?;
    end_commit(&mut tx, session_id, commit, last).await?;
    // Followers (`reel tail`) hear of the commit when it becomes visible.
    notify_commit(&mut tx, session_id).await?;
    tx.commit().await.map_err(db)
}

/// A commit's transaction plans its statements once per connection. PostgreSQL otherwise
/// plans a prepared statement anew each time while its generic plan looks dearer than the
/// custom ones, as it does for every `UNNEST` of an array parameter (estimated at 10 rows,
/// where a custom plan sees the commit's own count): planning the entities' statement with
/// their search documents took as long as running it (0.1 ms a commit, in the server's log).
const BEGIN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

/// Makes sure the session has its row and that `commit` continues its stored log.
async fn begin_commit(
    conn: &mut PgConnection,
    session_id: &str,
    commit: &Commit,
    place: &str,
) -> Result<(), StoreError> {
    let now = now_ms();
    sqlx::query(CREATE_SESSION)
        .bind(session_id)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(db)?;
    // The row stays locked until the commit ends: one writer at a time.
    let sql = format!("{LAST_ORDINAL} FOR UPDATE");
    let stored: i64 = sqlx::query(AssertSqlSafe(sql))
        .bind(session_id)
        .fetch_one(&mut *conn)
        .await
        .map_err(db)?
        .get(0);
    check_continues(session_id, place, stored, commit)
}

/// Stores the commit's snapshot, if any, and brings the session's row up to date.
async fn end_commit(
    conn: &mut PgConnection,
    session_id: &str,
    commit: &Commit,
    last: u64,
) -> Result<(), StoreError> {
    if let Some((ordinal, state)) = &commit.snapshot {
        sqlx::query(INSERT_SNAPSHOT)
            .bind(session_id)
            .bind(to_i64(*ordinal))
            .bind(state)
            .bind(now_ms())
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        sqlx::query(PRUNE_SNAPSHOTS)
            .bind(session_id)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    let (runs, status) = run_tally(&commit.events);
    let (reset, asking) = approval_tally(&commit.events);
    let deadlines = DeadlineChanges::of(&commit.events);
    // A run's end clears the session's deadlines in the same statement: no trip of its own.
    let update = if deadlines.cleared {
        UPDATE_SESSION_CLEARING.as_str()
    } else {
        UPDATE_SESSION
    };
    sqlx::query(AssertSqlSafe(update))
        .bind(to_i64(last))
        .bind(now_ms())
        .bind(commit.entities_ordinal.map(to_i64))
        .bind(commit.title.as_deref())
        .bind(to_i64(runs))
        .bind(status.map(RunStatus::as_str))
        .bind(session_id)
        .bind(reset)
        .bind(asking)
        .execute(&mut *conn)
        .await
        .map_err(db)?;
    write_deadlines(conn, session_id, &deadlines).await
}

/// [`UPDATE_SESSION`] after [`CLEAR_DEADLINES`], in one statement (a data-modifying `WITH`
/// runs whether or not the statement reads it).
static UPDATE_SESSION_CLEARING: LazyLock<String> = LazyLock::new(|| {
    let clear = CLEAR_DEADLINES.replace("$1", "$7");
    format!("WITH cleared AS ({clear}) {UPDATE_SESSION}")
});

/// The commit's changes to the session's approval deadlines after the clearing (which
/// [`UPDATE_SESSION_CLEARING`] did).
async fn write_deadlines(
    conn: &mut PgConnection,
    session_id: &str,
    changes: &DeadlineChanges,
) -> Result<(), StoreError> {
    for call_id in &changes.removed {
        let removed = sqlx::query(REMOVE_DEADLINE).bind(session_id).bind(call_id);
        removed.execute(&mut *conn).await.map_err(db)?;
    }
    for (call_id, until_ms) in &changes.set {
        let set = sqlx::query(SET_DEADLINE)
            .bind(session_id)
            .bind(call_id)
            .bind(to_i64(*until_ms));
        set.execute(&mut *conn).await.map_err(db)?;
    }
    Ok(())
}

/// The commit's events, in one `INSERT ... SELECT FROM UNNEST` (one statement, any count).
async fn insert_events(
    conn: &mut PgConnection,
    session_id: &str,
    commit: &Commit,
) -> Result<(), StoreError> {
    if commit.events.is_empty() {
        return Ok(());
    }
    let mut ordinals = Vec::with_capacity(commit.events.len());
    let mut names = Vec::with_capacity(commit.events.len());
    let mut payloads = Vec::with_capacity(commit.events.len());
    let mut times = Vec::with_capacity(commit.events.len());
    for entry in &commit.events {
        ordinals.push(to_i64(entry.ordinal));
        names.push(entry.name().to_owned());
        payloads.push(event_json(entry)?);
        times.push(to_i64(entry.recorded_at_ms));
    }
    sqlx::query(
            "INSERT INTO events (session_id, ordinal, name, payload_json, created_at) \
             SELECT $1, o, n, p, t FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS e(o, n, p, t)",
        )
        .bind(session_id)
        .bind(&ordinals)
        .bind(&names)
        .bind(&payloads)
        .bind(&times)
        .execute(&mut *conn)
        .await
        .map_err(db)?;
    Ok(())
}

/// The statement of [`upsert_entities`] without the documents, made once.
static UPSERT_ENTITIES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO {ENTITY_COLUMNS} \
         SELECT $1, i, k, c, l, d, p FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::boolean[], $7::text[]) AS e(i, k, c, l, d, p) \
         {ENTITY_UPSERT}"
    )
});

/// [`UPSERT_ENTITIES`] with their search documents in a `WITH` of the same statement (see
/// [`crate::postgres_search_docs`]), made once.
static UPSERT_ENTITIES_AND_DOCUMENTS: LazyLock<String> = LazyLock::new(|| {
    let documents = postgres_search_docs::upsert(8);
    format!("WITH documents AS ({documents}) {}", *UPSERT_ENTITIES)
});

/// The commit's entities and (with `documents`) their search documents, inserted or updated in
/// one statement.
async fn upsert_entities(
    conn: &mut PgConnection,
    session_id: &str,
    commit: &Commit,
    documents: DocumentWriting,
) -> Result<(), StoreError> {
    if commit.entities.is_empty() {
        return Ok(());
    }
    let rows = (commit.entities.iter())
        .map(EntityRow::of)
        .collect::<Result<Vec<_>, _>>()?;
    // One array a column: UNNEST makes them rows again.
    let ids: Vec<&str> = rows.iter().map(|row| row.id).collect();
    let kinds: Vec<&str> = rows.iter().map(|row| row.kind).collect();
    let created: Vec<i64> = rows.iter().map(|row| row.created_ordinal).collect();
    let changed: Vec<i64> = rows.iter().map(|row| row.last_event_ordinal).collect();
    let tombstones: Vec<bool> = rows.iter().map(|row| row.tombstone).collect();
    let payloads: Vec<&str> = rows.iter().map(|row| row.payload_json.as_str()).collect();
    let statement = match documents {
        DocumentWriting::Parsed | DocumentWriting::Computed => {
            UPSERT_ENTITIES_AND_DOCUMENTS.as_str()
        }
        DocumentWriting::Off => UPSERT_ENTITIES.as_str(),
    };
    let query = sqlx::query(AssertSqlSafe(statement))
        .bind(session_id)
        .bind(&ids)
        .bind(&kinds)
        .bind(&created)
        .bind(&changed)
        .bind(&tombstones)
        .bind(&payloads);
    // The entities the commit's own events created have no document yet.
    let first = commit
        .events
        .first()
        .map_or(u64::MAX, |entry| entry.ordinal);
    let documents = (documents != DocumentWriting::Off)
        .then(|| Documents::of(&commit.entities, first, documents));
    let query = match &documents {
        Some(documents) => documents.bind(query),
        None => query,
    };
    query.execute(&mut *conn).await.map_err(db)?;
    Ok(())
}
