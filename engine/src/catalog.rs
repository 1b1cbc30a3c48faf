//! The read side of a durable store: what sessions it holds, and their logs page by page.
//!
//! Readers (`reel sessions`, `show`, `export`, `fork`, `tail`) never take a session's lease
//! and never hold a whole log in memory: they page through events and fold them as they go, so
//! a session of a million events costs no more memory than its timeline.

use std::{sync::Arc, time::Duration};

use reel_proto::{Any, rpc::SnapshotEntity};

use crate::{
    log::LogEntry,
    search::{SearchHit, SearchQuery},
    store::{SessionState, StoreError},
    vocabulary::{RunStatus, ToolCallStatus},
};

/// One row of `reel sessions`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionSummary {
    pub session_id: String,
    /// The first prompt.
    pub title: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Events in the log (its last ordinal).
    pub events: u64,
    pub runs: u64,
    /// How the newest run ended: `finished`, `stopped`, `failed`, or `running` while (or if,
    /// after a crash) it has not; empty for a session without runs.
    pub last_run_status: String,
}

/// A session whose run waits for a person: a row of the inbox (`reel serve`'s
/// `GET /v1/sessions?waiting=true`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingSession {
    #[serde(flatten)]
    pub summary: SessionSummary,
    /// The calls that wait for a decision, in the order the model made them.
    pub pending: Vec<PendingApproval>,
}

/// A tool call waiting for a person's decision.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingApproval {
    /// What an `approve` request names (`callId`).
    pub call_id: String,
    pub tool_name: String,
    /// The call's arguments, as the model wrote them (JSON text).
    pub arguments: String,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub asked_at_ms: u64,
    /// When it is decided `expired` if nobody decides first (its tool's approval_timeout);
    /// `null` when it waits as long as it takes.
    pub expires_at_ms: Option<u64>,
}

/// Reading sessions from a store.
#[async_trait::async_trait]
pub trait SessionCatalog: Send + 'static {
    /// Every session, newest (most recently updated) first.
    async fn sessions(&mut self) -> Result<Vec<SessionSummary>, StoreError>;

    /// Up to `limit` of the sessions whose run waits for a person's decision, newest first,
    /// after session `after` in that order (from the first when empty), with the calls that
    /// wait.
    async fn waiting(
        &mut self,
        after: &str,
        limit: usize,
    ) -> Result<Vec<WaitingSession>, StoreError>;

    /// Up to `limit` of the sessions with a call waiting for a person whose deadline is at or
    /// before `now_ms` (milliseconds since the Unix epoch), the earliest deadline first (see
    /// [`crate::DeadlineChanges`]).
    async fn approvals_due(&mut self, now_ms: u64, limit: usize)
    -> Result<Vec<String>, StoreError>;

    /// One session's summary, if the store holds it.
    async fn summary(&mut self, session_id: &str) -> Result<Option<SessionSummary>, StoreError>;

    /// The newest places `query` matches in what the stored sessions said (see
    /// [`crate::SearchQuery`]); [`StoreError::Query`] for a query the store's syntax does not
    /// take.
    async fn search(&mut self, _query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        Err(StoreError::Unusable(
            "this store keeps no search index".into(),
        ))
    }

    /// When the session was pruned for its age (milliseconds since the epoch), if it was and
    /// has not been made again: a reader is told it is gone, not that it never existed.
    async fn pruned_at(&mut self, _session_id: &str) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// Up to `limit` events after ordinal `after`, in ordinal order.
    async fn events_page(
        &mut self,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError>;

    /// The session's materialized entities, in creation order (see
    /// [`crate::TimelineProjection::merged`]).
    async fn stored_entities(
        &mut self,
        session_id: &str,
    ) -> Result<Vec<SnapshotEntity>, StoreError>;

    /// The newest stored snapshot at or before `ordinal` (the empty state when there is none),
    /// its timeline whole (entities a live session let go are taken back from the store).
    async fn snapshot_at_most(
        &mut self,
        session_id: &str,
        ordinal: u64,
    ) -> Result<SessionState, StoreError>;

    /// The process writing the session now, if one is (a live lease holder).
    async fn writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// Waits until new events of the session may have been committed: a store that hears of
    /// commits (PostgreSQL's LISTEN/NOTIFY) returns when one is announced or after a second,
    /// one that does not waits `poll`. Followers call [`SessionCatalog::events_page`] after it.
    async fn wait_for_commits(
        &mut self,
        _session_id: &str,
        poll: Duration,
    ) -> Result<(), StoreError> {
        tokio::time::sleep(poll).await;
        Ok(())
    }
}

/// What a batch of events adds to a session's run count, and the status of its newest run if
/// the batch says (`running` when a run started and did not end in it).
pub fn run_tally(events: &[Arc<LogEntry>]) -> (u64, Option<RunStatus>) {
    let mut runs = 0;
    let mut status = None;
    for entry in events {
        match &entry.event {
            Any::ChatRunStarted(_) => {
                runs += 1;
                status = Some(RunStatus::Running);
            }
            Any::ChatRunFinished(_) => status = Some(RunStatus::Finished),
            Any::ChatRunStopped(_) => status = Some(RunStatus::Stopped),
            Any::ChatRunFailed(_) => status = Some(RunStatus::Failed),
            _ => {}
        }
    }
    (runs, status)
}

/// How a batch of events changes a session's count of calls waiting for a person: whether a
/// run ended in it (then nothing of that run waits any more: the count starts again from 0),
/// and what the events after that add (+1 a question, -1 a decision).
pub fn approval_tally(events: &[Arc<LogEntry>]) -> (bool, i64) {
    let mut reset = false;
    let mut delta = 0;
    for entry in events {
        match &entry.event {
            Any::ChatToolApprovalRequested(_) => delta += 1,
            // A remembered "allow always" answered no question.
            Any::ChatToolApprovalDecided(decided) if !decided.remembered => delta -= 1,
            Any::ChatRunFinished(_) | Any::ChatRunStopped(_) | Any::ChatRunFailed(_) => {
                reset = true;
                delta = 0;
            }
            _ => {}
        }
    }
    (reset, delta)
}

/// The calls waiting for a decision among a session's tool call entities.
pub fn pending_approvals(entities: &[SnapshotEntity]) -> Vec<PendingApproval> {
    entities
        .iter()
        .filter_map(|entity| match &entity.payload {
            Some(Any::ToolCallEntity(call))
                if !entity.tombstone
                    && ToolCallStatus::parse(&call.status)
                        == Some(ToolCallStatus::AwaitingApproval) =>
            {
                Some(PendingApproval {
                    call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    arguments: call.input.clone(),
                    asked_at_ms: call.approval_requested_at_ms,
                    expires_at_ms: Some(call.approval_expires_at_ms).filter(|at| *at > 0),
                })
            }
            _ => None,
        })
        .collect()
}

/// The most characters of the first prompt a session's title keeps.
pub const TITLE_CHARS: usize = 200;

/// A session's title: its first prompt on one line (control characters, NUL included, become
/// spaces; runs of whitespace one space), cut to [`TITLE_CHARS`] characters. A title is for
/// lists; the prompt itself is in the log, byte for byte.
pub fn session_title(prompt: &str) -> String {
    let mut title = String::new();
    let mut chars = 0;
    for word in prompt
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !title.is_empty() {
            title.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars >= TITLE_CHARS {
                return title;
            }
            title.push(c);
            chars += 1;
        }
    }
    title
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_one_clean_line() {
        assert_eq!(
            session_title("  What is\n\tthe\0weather?\u{1b}[31m "),
            "What is the weather? [31m"
        );
        assert_eq!(session_title(&"x".repeat(500)).chars().count(), TITLE_CHARS);
        assert_eq!(session_title(""), "");
    }
}
