//! How events, entities and snapshots become column values, and back, in every backend.

use reel_engine::{ContextMessage, LogEntry, RunStatus, SessionState, StoreError};
use reel_proto::{Any, chat::UsageInfo, json, rpc::SnapshotEntity};

/// A failed statement inside a transaction (the store names its database around it, with
/// [`StoreError::within`]).
pub fn db(error: sqlx::Error) -> StoreError {
    StoreError::database("", error)
}

/// An event's payload as canonical protobuf JSON ("@type" first).
pub fn event_json(entry: &LogEntry) -> Result<String, StoreError> {
    json::payload_to_string(&entry.event)
        .map_err(|e| StoreError::database(format!("cannot encode event {}", entry.ordinal), e))
}

/// An entity as its row of `entities` holds it: the values after `session_id`, in the order
/// of [`ENTITY_COLUMNS`]. Every backend writes entities from this, so they store the same.
pub struct EntityRow<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub created_ordinal: i64,
    pub last_event_ordinal: i64,
    pub tombstone: bool,
    pub payload_json: String,
}

/// The columns of `entities`, in the order an [`EntityRow`] is bound.
pub const ENTITY_COLUMNS: &str = "entities (session_id, entity_id, kind, created_ordinal, last_event_ordinal, tombstone, payload_json)";

/// What an insert of an entity that is there already does: the row takes the new values.
pub const ENTITY_UPSERT: &str = "ON CONFLICT (session_id, entity_id) DO UPDATE SET kind = excluded.kind, \
     created_ordinal = excluded.created_ordinal, last_event_ordinal = excluded.last_event_ordinal, \
     tombstone = excluded.tombstone, payload_json = excluded.payload_json";

impl<'a> EntityRow<'a> {
    pub fn of(entity: &'a SnapshotEntity) -> Result<Self, StoreError> {
        Ok(Self {
            id: &entity.id,
            kind: &entity.kind,
            created_ordinal: to_i64(entity.created_ordinal),
            last_event_ordinal: to_i64(entity.last_event_ordinal),
            tombstone: entity.tombstone,
            payload_json: entity_json(entity)?,
        })
    }
}

/// An entity's payload as canonical protobuf JSON.
pub fn entity_json(entity: &SnapshotEntity) -> Result<String, StoreError> {
    match &entity.payload {
        Some(payload) => json::to_string(payload)
            .map_err(|e| StoreError::database(format!("cannot encode entity {}", entity.id), e)),
        None => Ok("null".to_owned()),
    }
}

/// A stored event, decoded.
pub fn event_from(
    session_id: &str,
    ordinal: i64,
    payload_json: &str,
    created_at: i64,
) -> Result<LogEntry, StoreError> {
    let event: Any = serde_json::from_str(payload_json).map_err(|e| {
        StoreError::Damaged(format!(
            "event {ordinal} of session {session_id:?} does not decode: {e}"
        ))
    })?;
    Ok(LogEntry {
        ordinal: ordinal as u64,
        recorded_at_ms: created_at as u64,
        event,
    })
}

/// A stored entity row, decoded.
pub fn entity_from(
    session_id: &str,
    id: String,
    kind: String,
    created_ordinal: i64,
    last_event_ordinal: i64,
    tombstone: bool,
    payload_json: &str,
) -> Result<SnapshotEntity, StoreError> {
    let payload = serde_json::from_str(payload_json).map_err(|e| {
        StoreError::Damaged(format!(
            "entity {id:?} of session {session_id:?} does not decode: {e}"
        ))
    })?;
    Ok(SnapshotEntity {
        id,
        kind,
        created_ordinal: created_ordinal as u64,
        last_event_ordinal: last_event_ordinal as u64,
        tombstone,
        payload,
    })
}

/// A stored snapshot, decoded.
pub fn state_from(
    session_id: &str,
    ordinal: i64,
    state_json: &str,
) -> Result<SessionState, StoreError> {
    serde_json::from_str(state_json).map_err(|e| {
        StoreError::Damaged(format!(
            "the snapshot of session {session_id:?} at ordinal {ordinal} does not decode: {e}"
        ))
    })
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored turn's status, decoded.
pub fn run_status(session_id: &str, run_id: &str, text: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(text).ok_or_else(|| {
        StoreError::Damaged(format!(
            "turn {run_id:?} of session {session_id:?} has the status {text:?}, which is none of reel's"
        ))
    })
}

/// A turn's conversation as JSON.
pub fn context_json(context: &[std::sync::Arc<ContextMessage>]) -> Result<String, StoreError> {
    serde_json::to_string(context).map_err(|e| StoreError::database("cannot encode a turn", e))
}

/// A stored turn's conversation, decoded.
pub fn context_from(
    session_id: &str,
    run_id: &str,
    json: &str,
) -> Result<Vec<std::sync::Arc<ContextMessage>>, StoreError> {
    serde_json::from_str(json).map_err(|e| {
        StoreError::Damaged(format!(
            "turn {run_id:?} of session {session_id:?} does not decode: {e}"
        ))
    })
}

/// A usage's columns: every input token (cached ones included), output tokens, cached input
/// tokens, cost in US dollars.
pub fn usage_columns(usage: &UsageInfo) -> (i64, i64, i64, f64) {
    (
        to_i64(reel_engine::input_tokens(usage)),
        i64::from(usage.output_tokens),
        to_i64(reel_engine::cached_tokens(usage)),
        usage.cost_usd,
    )
}

/// A usage from its columns (in the OpenAI-style form: cached tokens counted in the input).
pub fn usage_from(input: i64, output: i64, cached: i64, cost_usd: f64) -> UsageInfo {
    let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    UsageInfo {
        input_tokens: count(input),
        output_tokens: count(output),
        cached_tokens: count(cached),
        cost_usd,
        ..Default::default()
    }
}
