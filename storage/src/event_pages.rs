//! Reading a page of a session's log (every replay, resume, export and verify reads through
//! here). sqlx's PostgreSQL driver decodes rows on the reading task; its SQLite driver steps
//! the statement on a worker thread and sends each row across a channel, which cost as much as
//! decoding the events (a tenth of a million-event export went to the hand-over alone). So on
//! SQLite the page comes over as one value, the events packed one after another.

use reel_engine::{LogEntry, StoreError};
use sqlx::Row;

use crate::{
    PostgresStore, SqliteStore,
    rows::{event_from, to_i64},
};

/// The page's events in order.
const EVENTS_PAGE: &str = "SELECT ordinal, payload_json, created_at FROM events \
     WHERE session_id = $1 AND ordinal > $2 ORDER BY ordinal LIMIT $3";

/// The page's events as one text (NULL for none): for each, in order, `BYTES:ORDINAL:TIME:`
/// and then the payload, BYTES long in UTF-8.
const PACKED_EVENTS_PAGE: &str = "SELECT group_concat(\
     octet_length(payload_json) || ':' || ordinal || ':' || created_at || ':' || payload_json, '') \
     FROM (SELECT ordinal, payload_json, created_at FROM events \
     WHERE session_id = $1 AND ordinal > $2 ORDER BY ordinal LIMIT $3)";

/// Reads events as rows, on either backend.
macro_rules! event_rows {
    ($store:ty) => {
        impl $store {
            /// Up to `limit` of the session's events after ordinal `after`, a row each.
            pub(crate) async fn event_rows(
                &mut self,
                session_id: &str,
                after: u64,
                limit: u32,
            ) -> Result<Vec<LogEntry>, StoreError> {
                let rows = sqlx::query(EVENTS_PAGE)
                    .bind(session_id)
                    .bind(to_i64(after))
                    .bind(i64::from(limit))
                    .fetch_all(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                rows.iter()
                    .map(|row| event_from(session_id, row.get(0), row.get(1), row.get(2)))
                    .collect()
            }
        }
    };
}

event_rows!(SqliteStore);
event_rows!(PostgresStore);

impl SqliteStore {
    /// Up to `limit` of the session's events after ordinal `after`, packed; as rows when the
    /// packed page would pass SQLite's limit on one value (1 GB: a page of large tool results).
    pub(crate) async fn read_page(
        &mut self,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let packed = sqlx::query_scalar::<_, Option<String>>(PACKED_EVENTS_PAGE)
            .bind(session_id)
            .bind(to_i64(after))
            .bind(i64::from(limit))
            .fetch_one(&mut *self.conn.lock().await)
            .await;
        match packed {
            Ok(packed) => unpack(session_id, packed.as_deref().unwrap_or_default()),
            Err(error) if too_big(&error) => self.event_rows(session_id, after, limit).await,
            Err(error) => Err(self.error(error)),
        }
    }
}

impl PostgresStore {
    /// Up to `limit` of the session's events after ordinal `after` (rows: PostgreSQL hands
    /// them over on the reading task).
    pub(crate) async fn read_page(
        &mut self,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.event_rows(session_id, after, limit).await
    }
}

/// SQLITE_TOOBIG: a value would pass the length SQLite allows.
fn too_big(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "18")
}

/// The events of a packed page.
fn unpack(session_id: &str, mut packed: &str) -> Result<Vec<LogEntry>, StoreError> {
    let damaged = || {
        StoreError::Damaged(format!(
            "session {session_id:?}: a page of its events does not unpack"
        ))
    };
    let mut page = Vec::new();
    while !packed.is_empty() {
        let (bytes, rest) = number(packed).ok_or_else(damaged)?;
        let (ordinal, rest) = number(rest).ok_or_else(damaged)?;
        let (created_at, rest) = number(rest).ok_or_else(damaged)?;
        let bytes = usize::try_from(bytes).map_err(|_| damaged())?;
        if !rest.is_char_boundary(bytes) {
            return Err(damaged());
        }
        let (payload, rest) = rest.split_at(bytes);
        page.push(event_from(session_id, ordinal, payload, created_at)?);
        packed = rest;
    }
    Ok(page)
}

/// The integer before the next `:`, and what follows the `:`.
fn number(text: &str) -> Option<(i64, &str)> {
    let (number, rest) = text.split_once(':')?;
    Some((number.parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELTA: &str = r#"{"@type":"type.googleapis.com/reel.chat.v1.ChatTextDelta","messageId":"m","text":"é:1"}"#;

    #[test]
    fn unpacks_events_in_order() {
        let packed = format!("{}:7:100:{DELTA}{}:8:-1:{DELTA}", DELTA.len(), DELTA.len());
        let page = unpack("s", &packed).unwrap();
        let ordinals: Vec<_> = page.iter().map(|e| (e.ordinal, e.recorded_at_ms)).collect();
        assert_eq!(ordinals, [(7, 100), (8, u64::MAX)]);
        assert!(unpack("s", "").unwrap().is_empty());
    }

    #[test]
    fn a_damaged_page_is_an_error_not_a_panic() {
        let n = DELTA.len();
        for packed in [
            format!("{}:7:100:{DELTA}", n + 1),
            format!("{}:7:100:{DELTA}", n - 3),
            format!("{n}:7:100"),
            format!("x:7:100:{DELTA}"),
            format!("-1:7:100:{DELTA}"),
            "5".to_owned(),
        ] {
            assert!(
                matches!(unpack("s", &packed), Err(StoreError::Damaged(_))),
                "{packed}"
            );
        }
    }
}
