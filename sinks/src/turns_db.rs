//! The turns database sink: after each run, the model context the next run starts from.
//!
//! It folds the log into its own model-context projection, and when a run ends (finished,
//! stopped or failed) it stores that conversation as the run's turn, with the run's and the
//! session's usage that event carries. It acknowledges every
//! ordinal it has dealt with, so a run's done also waits for its turn to be stored.

use reel_engine::{
    Acks, Durability, ModelContextProjection, OutputBatch, OutputKind, Projection, RunStatus, Sink,
    SinkError, Turn, TurnStore,
};
use reel_proto::{Any, chat::UsageInfo};
use tokio::sync::mpsc;

/// A run's usage and its session's, as the run's last event carries them.
type Usages = (Option<UsageInfo>, Option<UsageInfo>);

/// Writes a turn to a [`TurnStore`] at the end of every run.
pub struct TurnsDbSink<S> {
    store: S,
    session_id: String,
    context: ModelContextProjection,
    /// The run in progress.
    run_id: String,
    last_ordinal: u64,
}

impl<S: TurnStore> TurnsDbSink<S> {
    /// A sink continuing `context` as of `ordinal`.
    pub fn new(
        store: S,
        session_id: impl Into<String>,
        context: ModelContextProjection,
        ordinal: u64,
    ) -> Self {
        Self {
            store,
            session_id: session_id.into(),
            context,
            run_id: String::new(),
            last_ordinal: ordinal,
        }
    }

    async fn save(&mut self, status: RunStatus, usage: Usages) -> Result<(), SinkError> {
        let turn = Turn {
            session_id: self.session_id.clone(),
            run_id: std::mem::take(&mut self.run_id),
            status,
            last_ordinal: self.last_ordinal,
            model_calls: self.context.calls(),
            context: self.context.messages().iter().cloned().collect(),
            usage: usage.0.unwrap_or_default(),
            session_usage: usage.1.unwrap_or_default(),
        };
        self.store.save_turn(&turn).await.map_err(SinkError::from)
    }
}

#[async_trait::async_trait]
impl<S: TurnStore> Sink for TurnsDbSink<S> {
    fn name(&self) -> String {
        "turns-db".into()
    }

    fn durability(&self) -> Durability {
        Durability::Durable {
            acknowledged: self.last_ordinal,
        }
    }

    async fn run(
        mut self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        acks: Acks,
    ) -> Result<(), SinkError> {
        while let Some(batch) = acks.next_batch(&mut input).await {
            for output in batch.iter() {
                let OutputKind::Event(committed) = &output.kind else {
                    continue;
                };
                let entry = &committed.entry;
                self.context.apply(entry);
                self.last_ordinal = entry.ordinal;
                let ended = match &entry.event {
                    Any::ChatRunStarted(run) => {
                        self.run_id = run
                            .correlation
                            .as_ref()
                            .map(|c| c.run_id.clone())
                            .unwrap_or_default();
                        None
                    }
                    Any::ChatRunFinished(e) => {
                        Some((RunStatus::Finished, (e.usage, e.session_usage)))
                    }
                    Any::ChatRunStopped(e) => {
                        Some((RunStatus::Stopped, (e.usage, e.session_usage)))
                    }
                    Any::ChatRunFailed(e) => Some((RunStatus::Failed, (e.usage, e.session_usage))),
                    _ => None,
                };
                if let Some((status, usage)) = ended {
                    self.save(status, usage).await?;
                }
            }
            acks.committed(self.last_ordinal);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use reel_engine::{RunStatus, TurnStore};
    use reel_storage::{Access, Location, open_timeline};

    use super::*;
    use crate::tests::run_sink;

    #[tokio::test]
    async fn each_run_end_stores_the_context_the_next_run_starts_from() {
        let dir = tempfile::tempdir().unwrap();
        let at = Location::path(dir.path().join("turns.db"));
        let store = open_timeline(&at, Access::ReadWrite).await.unwrap();
        let sink = TurnsDbSink::new(store, "s1", ModelContextProjection::new(), 0);
        assert!(run_sink(sink).await.is_empty());
        let mut stored = open_timeline(&at, Access::ReadOnly).await.unwrap();
        let turn = stored.latest_turn("s1").await.unwrap().expect("a turn");
        assert_eq!(turn.status, RunStatus::Finished);
        assert_eq!(turn.last_ordinal, 6);
        let texts: Vec<&str> = turn.context.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["Say hello", "Hello"]);
    }
}
