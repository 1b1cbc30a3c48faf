//! The session: the one writer of a session's log.
//!
//! [`Session::append`] assigns the next ordinal, folds the entry into the timeline and the model
//! context, and hands the entry with its ui events to every sink, as one step under `&mut self`.
//! There is no other way to add an event, so ordinals have no gaps and every sink sees events
//! in ordinal order.

use std::sync::Arc;

use reel_proto::{
    Any,
    chat::{
        ChatProviderCallFinished, ChatRunFailed, ChatToolCallFinished, ChatToolResultReady,
        ToolCallEntity,
    },
    rpc::{DoneFrame, ErrorFrame, HelloFrame},
};

use crate::{
    catalog::SessionCatalog,
    context::ModelContextProjection,
    fanout::{Fanout, SinkFailure},
    id::new_id,
    log::EventLog,
    output::{CommittedEvent, Output, OutputKind},
    projection::Projection,
    store::SessionState,
    timeline::TimelineProjection,
    tools::Toolbox,
    usage::UsageProjection,
    vocabulary::{
        DoneStatus, DropReason, ErrorCode, FinishClass, QueuedPromptKind, RunStatus,
        ToolCallStatus, ToolResultStatus,
    },
};

/// One conversation: its log, the projections of that log, and the sinks that follow it.
pub struct Session {
    id: Arc<str>,
    log: EventLog,
    timeline: TimelineProjection,
    context: ModelContextProjection,
    usage: UsageProjection,
    outputs: Fanout,
    /// Set once the terminal `storage_failed` error has been written.
    storage_failure_reported: bool,
    /// The durable store that holds the session's entities, read for whole snapshots once
    /// settled entities were let go (see [`Session::settle`]).
    archive: Option<Box<dyn SessionCatalog>>,
    /// The `approval: ask` tools a person allowed for the rest of the session, from its log.
    pub(crate) allowed_always: crate::tools::AllowedAlways,
    /// Fingerprints its model calls (each hashes only the messages added since the last).
    pub(crate) fingerprinter: crate::fingerprint::Fingerprinter,
}

impl Session {
    /// A new, empty session writing to `outputs`.
    pub fn new(id: impl Into<String>, outputs: Fanout) -> Self {
        Self {
            id: Arc::from(id.into()),
            log: EventLog::new(),
            timeline: TimelineProjection::new(),
            context: ModelContextProjection::new(),
            usage: UsageProjection::new(),
            outputs,
            storage_failure_reported: false,
            archive: None,
            allowed_always: Default::default(),
            fingerprinter: Default::default(),
        }
    }

    /// Lets the session hold only the entities that can still change: `archive` reads the
    /// durable store its timeline sink writes, for whole snapshots.
    pub fn keep_entities_in(&mut self, archive: Box<dyn SessionCatalog>) {
        self.archive = Some(archive);
    }

    /// Between requests: lets go of the entities no event can change any more, when a durable
    /// store holds them (every done waits for the store, so it does by now). A session then
    /// costs memory for what it is doing, not for everything it has said.
    pub fn settle(&mut self) {
        if self.archive.is_some() && !self.storage_failed() {
            self.timeline.evict_settled();
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// What says when the session waits for a request and nothing else.
    pub(crate) fn idle_signal(&self) -> crate::IdleSignal {
        self.outputs.idle_signal()
    }

    /// The sinks that run on the writer's task, as one future for the writer to run.
    pub(crate) fn take_writer_task_sinks(&mut self) -> impl Future<Output = ()> + Send + use<> {
        self.outputs.take_writer_task_sinks()
    }

    /// Adds `sink` to the session's outputs (before its first output: it gets them all).
    pub fn attach(&mut self, sink: Box<dyn crate::sink::Sink>) {
        self.outputs.attach(sink);
    }

    /// What the session's store has committed (see [`Fanout::store_committed`]).
    pub fn store_committed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.outputs.store_committed()
    }

    /// A session continuing a stored one: its log continues after the stored events, its
    /// projections start from the stored state. Call [`Session::close_interrupted_run`] once
    /// the stream has begun (after hello).
    pub fn resume(
        id: impl Into<String>,
        outputs: Fanout,
        state: SessionState,
        log: EventLog,
    ) -> Self {
        Self {
            id: Arc::from(id.into()),
            log,
            timeline: state.timeline,
            context: state.context,
            usage: state.usage,
            outputs,
            storage_failure_reported: false,
            archive: None,
            allowed_always: state.allowed_always,
            fingerprinter: Default::default(),
        }
    }

    /// Closes a run that the log shows as started and never ended: the process that ran it
    /// died. A run that waits for a person's decision is not closed (it still waits), nor one
    /// whose interrupted tool calls run again or ask whether to (see `on_interrupted`): the
    /// host takes it up ([`Session::resume_waiting_run`]). It is closed by appending `ChatProviderCallFinished` (if a model call was open) and
    /// `ChatRunFailed` (`interrupted`), never by editing history; tool calls left without a
    /// result get an error result first. Returns whether there was one.
    pub async fn close_interrupted_run(&mut self, request_id: &Arc<str>, tools: &Toolbox) -> bool {
        // Prompts queued for the dead process never reached the model, and never will: a
        // follow-up is not run silently by another process. Its request ends here, stopped.
        let dropped = self
            .drop_queued(request_id, None, DropReason::Interrupted)
            .await;
        for queued in dropped.iter().filter(|q| q.is(QueuedPromptKind::FollowUp)) {
            let rid: Arc<str> = Arc::from(queued.request_id.as_str());
            self.emit_done(&rid, DoneStatus::Stopped).await;
        }
        // A run waiting for a person is not interrupted: it goes on when a decision comes
        // (see Session::resume_waiting_run).
        if self.timeline.awaits_decision() {
            return false;
        }
        // A tool step whose calls may run again (on_interrupted: retry or ask) goes on too.
        if self.interrupted_step_goes_on(request_id, tools).await {
            return false;
        }
        let Some(run) = self.timeline.open_run().cloned() else {
            // A compaction asked for between runs may have died in its summarization call.
            if let Some(correlation) = self.timeline.open_call().cloned() {
                let finished = ChatProviderCallFinished {
                    stop_reason: "interrupted".into(),
                    finish_class: FinishClass::Error.into(),
                    correlation: Some(correlation),
                    ..Default::default()
                };
                self.append(request_id, finished).await;
                return true;
            }
            return false;
        };
        if run.call_open {
            let finished = ChatProviderCallFinished {
                stop_reason: "interrupted".into(),
                finish_class: FinishClass::Error.into(),
                correlation: run.correlation.clone(),
                ..Default::default()
            };
            self.append(request_id, finished).await;
        }
        // The model must see a result for every call it made, or the next call is refused.
        for call in self.timeline.unanswered_tool_calls() {
            self.answer_interrupted(request_id, call).await;
        }
        let failed = ChatRunFailed {
            message_id: new_id(),
            status: RunStatus::Failed.into(),
            error: "interrupted: the process ended before the run did".into(),
            correlation: run.correlation,
            duration_ms: 0,
            usage: Some(self.usage.run()),
            session_usage: Some(self.usage.session()),
            interrupted: true,
        };
        self.append(request_id, failed).await;
        true
    }

    /// Answers `call`, which its process left unfinished: an error result the model reads, and
    /// its end, `interrupted`.
    pub(crate) async fn answer_interrupted(&mut self, request_id: &Arc<str>, call: ToolCallEntity) {
        let result = ChatToolResultReady {
            message_id: new_id(),
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            result: "interrupted: the process ended before the tool call finished".into(),
            status: ToolResultStatus::Error.into(),
            correlation: call.correlation.clone(),
            is_error: true,
        };
        self.append(request_id, result).await;
        let finished = ChatToolCallFinished {
            message_id: call.message_id,
            tool_call_id: call.tool_call_id,
            tool_name: call.tool_name,
            status: ToolCallStatus::Interrupted.into(),
            correlation: call.correlation,
        };
        self.append(request_id, finished).await;
    }

    /// Gives the session the id its client chose. Only a session with an empty log can change
    /// its id: events already appended carry the old one.
    pub fn bind_id(&mut self, id: &str) -> bool {
        if self.log.last_ordinal() > 0 {
            return false;
        }
        self.id = Arc::from(id);
        true
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    pub fn timeline(&self) -> &TimelineProjection {
        &self.timeline
    }

    pub fn context(&self) -> &ModelContextProjection {
        &self.context
    }

    pub fn usage(&self) -> &UsageProjection {
        &self.usage
    }

    /// Outputs detached after failing, so far.
    pub fn sink_failures(&self) -> &[SinkFailure] {
        self.outputs.failures()
    }

    /// Appends `event` to the log, projects it and fans it out. Returns its ordinal.
    pub async fn append(&mut self, request_id: &Arc<str>, event: impl Into<Any>) -> u64 {
        let entry = self.log.append(event.into());
        let ui_events = self.timeline.apply(&entry);
        self.context.apply(&entry);
        self.usage.apply(&entry);
        self.allowed_always.apply(&entry);
        let ordinal = entry.ordinal;
        let settled = matches!(
            entry.event,
            Any::ChatRunFinished(_)
                | Any::ChatRunStopped(_)
                | Any::ChatRunFailed(_)
                | Any::ChatContextCompacted(_)
        );
        let context = settled.then(|| self.context.clone());
        let committed = CommittedEvent {
            entry,
            ui_events,
            context,
        };
        self.emit(request_id, OutputKind::Event(Arc::new(committed)))
            .await;
        ordinal
    }

    /// Sends an output to every sink. Frames that are not log events (hello, snapshots, errors,
    /// done) mark boundaries a reader waits for, so they are delivered at once.
    pub async fn emit(&mut self, request_id: &Arc<str>, kind: OutputKind) {
        let boundary = !matches!(kind, OutputKind::Event(_));
        let output = Output {
            session_id: Arc::clone(&self.id),
            request_id: Arc::clone(request_id),
            kind,
        };
        self.outputs.send(output).await;
        if boundary {
            self.outputs.flush().await;
        }
    }

    /// Delivers every output produced so far to the sinks. Call it before waiting for anything.
    pub async fn flush(&mut self) {
        self.outputs.flush().await;
    }

    pub async fn emit_hello(&mut self, request_id: &Arc<str>, hello: HelloFrame) {
        self.emit(request_id, OutputKind::Hello(Arc::new(hello)))
            .await;
    }

    /// Sends the timeline as of the newest event: with entities let go, the store's merged
    /// with memory's, once the store holds everything so far.
    pub async fn emit_snapshot(&mut self, request_id: &Arc<str>) {
        let snapshot = if self.timeline.is_partial() {
            match self.stored_entities().await {
                Ok(stored) => self.timeline.merged(stored),
                Err(error) => {
                    let message = format!(
                        "cannot read the stored timeline for a snapshot: {}",
                        crate::store::error_chain(&error)
                    );
                    tracing::error!("{message}");
                    self.emit_error(request_id, ErrorCode::StorageFailed, &message, false)
                        .await;
                    return;
                }
            }
        } else {
            self.timeline.snapshot()
        };
        self.emit(request_id, OutputKind::Snapshot(Arc::new(snapshot)))
            .await;
    }

    /// The entities the store holds, once it holds everything appended so far.
    async fn stored_entities(
        &mut self,
    ) -> Result<Vec<reel_proto::rpc::SnapshotEntity>, StoredEntitiesError> {
        self.outputs
            .wait_committed(self.log.last_ordinal())
            .await
            .map_err(StoredEntitiesError::Output)?;
        let id = Arc::clone(&self.id);
        match self.archive.as_mut() {
            Some(archive) => Ok(archive.stored_entities(&id).await?),
            None => Err(StoredEntitiesError::NoStore),
        }
    }

    /// Sends the entities created or changed after `ordinal` (see
    /// [`TimelineProjection::snapshot_since`]).
    pub async fn emit_snapshot_since(&mut self, request_id: &Arc<str>, ordinal: u64) {
        let snapshot = self.timeline.snapshot_since(ordinal);
        self.emit(request_id, OutputKind::Snapshot(Arc::new(snapshot)))
            .await;
    }

    pub async fn emit_error(
        &mut self,
        request_id: &Arc<str>,
        code: ErrorCode,
        message: &str,
        terminal: bool,
    ) {
        let error = ErrorFrame {
            code: code.into(),
            message: message.into(),
            detail: String::new(),
            terminal,
        };
        self.emit(request_id, OutputKind::Error(Arc::new(error)))
            .await;
    }

    /// Ends a request. Done is written only once every durable sink has committed everything
    /// up to the newest ordinal, so a client that sees done knows it is on disk. When a durable
    /// sink has failed, the done is `failed` after a terminal `storage_failed` error.
    pub async fn emit_done(&mut self, request_id: &Arc<str>, status: DoneStatus) {
        let mut status = status;
        if let Err(failure) = self.outputs.wait_committed(self.log.last_ordinal()).await {
            self.report_storage_failure(request_id, &failure).await;
            status = DoneStatus::Failed;
        }
        let done = DoneFrame {
            status: status.into(),
        };
        self.emit(request_id, OutputKind::Done(Arc::new(done)))
            .await;
    }

    /// Writes the terminal `storage_failed` error for `failure`, once per session.
    pub async fn report_storage_failure(&mut self, request_id: &Arc<str>, failure: &SinkFailure) {
        if self.storage_failure_reported {
            return;
        }
        self.storage_failure_reported = true;
        let message = format!(
            "{} failed; what came after the last done may not be stored: {}",
            failure.sink, failure.message
        );
        self.emit_error(request_id, ErrorCode::StorageFailed, &message, true)
            .await;
    }

    /// Waits until every durable sink has committed the log so far. Called before each side
    /// effect of a run (a model call, a tool execution): when the database has failed, nothing
    /// more may happen that the log could not record.
    pub async fn storage_holds(&mut self) -> Result<(), SinkFailure> {
        if !self.outputs.has_durable() {
            // Nothing to wait for, and a failed durable sink has been found already: the
            // outputs need not be flushed for this.
            return match self.outputs.failures().iter().find(|f| f.durable) {
                Some(failure) => Err(failure.clone()),
                None => Ok(()),
            };
        }
        self.outputs.wait_committed(self.log.last_ordinal()).await
    }

    /// Whether a durable store keeps the session (and has not failed): only then can a run
    /// wait for a person beyond this process.
    pub fn is_durable(&self) -> bool {
        self.outputs.has_durable() && !self.storage_failed()
    }

    /// Whether a durable sink has failed: continuing would lose data, so the session must end.
    pub fn storage_failed(&self) -> bool {
        self.outputs
            .failures()
            .iter()
            .any(|failure| failure.durable)
    }

    /// Closes the sinks, waits until each has written everything, and returns the failures.
    pub async fn close(self) -> Vec<SinkFailure> {
        self.outputs.close().await
    }
}

/// Why the stored entities of a session could not be read for a snapshot.
#[derive(Debug, thiserror::Error)]
enum StoredEntitiesError {
    #[error("{}", .0.message)]
    Output(crate::fanout::SinkFailure),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("no store holds the session's entities")]
    NoStore,
}
