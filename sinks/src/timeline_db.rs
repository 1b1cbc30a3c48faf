//! The timeline database sink: makes the log durable, with the timeline entities and snapshots
//! derived from it, and acknowledges what it has committed.
//!
//! It keeps its own projection of the log (a pure fold, so it agrees with the session's) and
//! writes in transactions: when its queue runs empty (the session is waiting for something),
//! when 4,096 events are pending, and always at the end of a run. Each commit holds the new
//! events (compact deltas: bytes per delta do not grow with the reply); at a run's end it also
//! materializes the entities the run changed; now and then it stores a snapshot of the whole
//! projection state, so that resuming replays only the events after it. It is a durable sink:
//! after each commit it acknowledges the committed ordinal, which the session waits for before
//! writing `done` and before a run's next side effect.

use std::sync::Arc;

use reel_engine::{
    Acks, Commit, Durability, LogEntry, LogStore, OutputBatch, OutputKind, Projection,
    SessionState, Sink, SinkError, session_title,
};
use reel_proto::{Any, json};
use tokio::sync::mpsc;

/// Events pending before a commit is forced.
const MAX_PENDING: usize = 4096;
/// A snapshot is due after this many events since the last one...
const SNAPSHOT_EVERY: u64 = 50_000;
/// ...or after an eighth of the log, whichever is more: snapshot bytes stay linear in the log.
const SNAPSHOT_FRACTION: u64 = 8;

/// Writes a session's log to a [`LogStore`].
pub struct TimelineDbSink<S> {
    store: S,
    session_id: String,
    /// The ordinal stored when the sink starts (a resumed session's).
    stored: u64,
    /// The timeline and usage as of the newest event received, and the model context as of
    /// `context_ordinal`: the session hands it over at run ends (an O(1) clone sharing its
    /// messages), so this sink holds no second copy of the conversation.
    state: SessionState,
    context_ordinal: u64,
    /// The ordinal the stored entities are as of.
    entities_ordinal: u64,
    /// The ordinal of the newest stored snapshot.
    snapshot_ordinal: u64,
    title_known: bool,
}

impl<S: LogStore> TimelineDbSink<S> {
    /// A sink continuing `state` (the stored session as of its newest stored ordinal), whose
    /// stored entities are as of `entities_ordinal`.
    pub fn new(
        store: S,
        session_id: impl Into<String>,
        state: SessionState,
        entities_ordinal: u64,
    ) -> Self {
        let ordinal = state.ordinal();
        Self {
            store,
            session_id: session_id.into(),
            stored: ordinal,
            state,
            context_ordinal: ordinal,
            entities_ordinal,
            snapshot_ordinal: ordinal,
            // A resumed session may have no title yet (its first events were no prompt: `reel
            // serve` records a session's command first). The first prompt after a resume is
            // offered; the store keeps a title once it has one.
            title_known: false,
        }
    }

    /// Folds the batch's events in; returns whether a run ended in it.
    fn absorb(
        &mut self,
        batch: &OutputBatch,
        pending: &mut Vec<Arc<LogEntry>>,
        title: &mut Option<String>,
    ) -> bool {
        let mut run_ended = false;
        for output in batch.iter() {
            match &output.kind {
                OutputKind::Event(committed) => {
                    let entry = &committed.entry;
                    self.state.timeline.fold(entry);
                    self.state.usage.apply(entry);
                    // Snapshots carry the tools allowed for the session, like the session's own
                    // state does.
                    self.state.allowed_always.apply(entry);
                    if let Some(context) = &committed.context {
                        self.state.context = context.clone();
                        self.context_ordinal = entry.ordinal;
                    }
                    match &entry.event {
                        Any::ChatUserMessageAccepted(m) if !self.title_known => {
                            *title = Some(session_title(&m.text));
                            self.title_known = true;
                        }
                        Any::ChatRunFinished(_)
                        | Any::ChatRunStopped(_)
                        | Any::ChatRunFailed(_) => run_ended = true,
                        // A question to a person may wait for days, and the store's entities
                        // are what lists it (the inbox of reel serve): they are brought up to
                        // date now, not at the run's end.
                        Any::ChatToolApprovalRequested(_) => run_ended = true,
                        _ => {}
                    }
                    pending.push(Arc::clone(entry));
                }
                OutputKind::Done(_) => run_ended = true,
                _ => {}
            }
        }
        run_ended
    }

    async fn commit(
        &mut self,
        pending: &mut Vec<Arc<LogEntry>>,
        title: &mut Option<String>,
        materialize: bool,
        acks: &Acks,
    ) -> Result<(), SinkError> {
        let ordinal = self.state.ordinal();
        let materialize = materialize && ordinal > self.entities_ordinal;
        if pending.is_empty() && !materialize {
            return Ok(());
        }
        let mut commit = Commit {
            events: std::mem::take(pending),
            title: title.take(),
            ..Commit::default()
        };
        if materialize {
            // This commit stores every entity, so the ones nothing can change any more need
            // not stay in memory, nor go into the snapshot it may carry (which then stays
            // small): they move into the commit. Should the commit fail, the sink fails for
            // good: nothing is lost.
            commit.entities = self
                .state
                .timeline
                .take_since(self.entities_ordinal)
                .entities;
            commit.entities_ordinal = Some(ordinal);
        }
        let since_snapshot = ordinal - self.snapshot_ordinal;
        // A snapshot is taken where the context is known: at a run's end or a compaction.
        let context_known = self.context_ordinal == ordinal;
        if context_known && since_snapshot >= SNAPSHOT_EVERY.max(ordinal / SNAPSHOT_FRACTION) {
            let state =
                json::to_string(&self.state).map_err(|e| SinkError::Encode(e.to_string()))?;
            commit.snapshot = Some((ordinal, state));
        }
        self.store
            .commit(&self.session_id, &commit)
            .await
            .map_err(SinkError::from)?;
        if materialize {
            self.entities_ordinal = ordinal;
        }
        if commit.snapshot.is_some() {
            self.snapshot_ordinal = ordinal;
        }
        acks.committed(ordinal);
        Ok(())
    }
}

#[async_trait::async_trait]
impl<S: LogStore> Sink for TimelineDbSink<S> {
    fn name(&self) -> String {
        "timeline-db".into()
    }

    fn durability(&self) -> Durability {
        Durability::Durable {
            acknowledged: self.stored,
        }
    }

    async fn run(
        mut self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        acks: Acks,
    ) -> Result<(), SinkError> {
        let mut pending = Vec::new();
        let mut title = None;
        // While the session waits, it holds its lease: the store renews every lease of the
        // process at once (an idle session has no timer of its own).
        while let Some(batch) = acks.next_batch(&mut input).await {
            let mut run_ended = self.absorb(&batch, &mut pending, &mut title);
            while pending.len() < MAX_PENDING {
                match input.try_recv() {
                    Ok(batch) => run_ended |= self.absorb(&batch, &mut pending, &mut title),
                    Err(_) => break,
                }
            }
            self.commit(&mut pending, &mut title, run_ended, &acks)
                .await?;
        }
        self.commit(&mut pending, &mut title, true, &acks).await?;
        self.store
            .release(&self.session_id)
            .await
            .map_err(SinkError::from)
    }
}

#[cfg(test)]
mod tests {
    use reel_engine::{LogStore, SessionCatalog};
    use reel_storage::{Access, Location, open_timeline};

    use super::*;
    use crate::tests::run_sink;

    #[tokio::test]
    async fn the_log_entities_and_title_are_stored_before_done() {
        let dir = tempfile::tempdir().unwrap();
        let at = Location::path(dir.path().join("t.db"));
        let mut store = open_timeline(&at, Access::ReadWrite).await.unwrap();
        store.lease("s1").await.unwrap();
        let sink = TimelineDbSink::new(store, "s1", SessionState::default(), 0);
        assert_eq!(sink.durability(), Durability::Durable { acknowledged: 0 });
        // The session's done waits for the sink's acknowledgement of ordinal 6.
        assert!(run_sink(sink).await.is_empty());

        let mut stored = open_timeline(&at, Access::ReadOnly).await.unwrap();
        let summary = stored.summary("s1").await.unwrap().expect("stored");
        assert_eq!((summary.events, summary.runs), (6, 1));
        assert_eq!(summary.title, "Say hello");
        assert_eq!(summary.last_run_status, "finished");
        let (ordinal, entities) = stored.entities("s1").await.unwrap();
        assert_eq!(ordinal, 6, "entities materialized at the run's end");
        assert!(!entities.is_empty());
        let (state, log) = stored.load("s1").await.unwrap().replay().unwrap();
        assert_eq!(log.last_ordinal(), 6);
        assert_eq!(state.context.messages().len(), 2);
    }

    #[tokio::test]
    async fn a_store_that_fails_the_commit_fails_the_sink_durably() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut store = open_timeline(&Location::path(&path), Access::ReadWrite)
            .await
            .unwrap();
        store.lease("s1").await.unwrap();
        let sink = TimelineDbSink::new(store, "s1", SessionState::default(), 0);
        // The database is deleted under the writer: its commit must fail, not vanish.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let failures = run_sink(sink).await;
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].durable);
        assert!(failures[0].message.contains("deleted"), "{failures:?}");
    }
}
