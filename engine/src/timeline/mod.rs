//! The timeline projection: folds log events into timeline entities and ui events.
//!
//! [`TimelineProjection::apply`] is a pure function of the projection's state and one log entry.
//! The live session and a replay call the same function, so a replayed log gives exactly the
//! snapshots and ui events the live run gave.
//!
//! The log keeps streamed text compact (`ChatTextDelta` holds only the new characters); the
//! projection turns each delta into a `ChatTextPatch` in append mode with its `offset` (in
//! Unicode scalar values) and `sequence`, so no frame ever re-sends accumulated text. Segments
//! end when the model call or run ends, or when the model switches between reasoning and text;
//! their `...SegmentFinished` event carries the whole text once.

use std::collections::HashMap;

use reel_proto::{
    Any,
    chat::{ChatMessageEntity, CorrelationInfo, ToolCallEntity, ToolResultEntity},
    rpc::{SnapshotEntity, SnapshotFrame, UiEventFrame},
};

use crate::{
    log::LogEntry,
    projection::Projection,
    vocabulary::{CallPurpose, FinishClass, MessageStatus, ToolCallStatus},
};

mod archive;
mod changes;
mod queue;
mod segments;

pub use queue::QueuedPrompt;

use changes::ChangeIndex;
use segments::{OpenStream, ProseStart, StreamKind};

/// Entity kind of chat messages (user, assistant, thinking, error).
pub const KIND_MESSAGE: &str = "ChatMessage";
/// Entity kind of tool calls.
pub const KIND_TOOL_CALL: &str = "ChatToolCall";
/// Entity kind of tool results.
pub const KIND_TOOL_RESULT: &str = "ChatToolResult";

/// Timeline entities plus what is needed to project the next event. Serializable, so that a
/// durable store can keep it as a materialized snapshot and resume from there.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TimelineProjection {
    /// Entities in creation order (which is ordinal order).
    entities: Vec<SnapshotEntity>,
    /// Entity id -> position in `entities`, looked up at every streamed delta: hashed with
    /// foldhash (randomly seeded), which costs less than the standard SipHash.
    index: HashMap<String, usize, foldhash::fast::RandomState>,
    /// The entities by when they last changed (see [`changes`]).
    #[serde(skip)]
    changes: ChangeIndex,
    /// Provider tool call id -> reel's entity id of the newest call with that id.
    tool_calls: HashMap<String, String>,
    /// Open segments in the order they opened, so they finish in that order.
    streams: Vec<(String, OpenStream)>,
    /// Correlation of the model call in progress, copied onto the entities it creates.
    call: Option<CorrelationInfo>,
    /// The highest ordinal applied.
    last_ordinal: u64,
    /// The run in progress: started and not yet finished, stopped or failed.
    #[serde(default)]
    open_run: Option<OpenRun>,
    /// Prompts queued and not yet delivered or dropped (see [`queue`]).
    #[serde(default)]
    queue: Vec<QueuedPrompt>,
    /// Entities created up to this ordinal that no event could change any more were let go
    /// (see [`archive`]): a durable store holds them. 0: every entity is here.
    #[serde(default)]
    evicted_through: u64,
}

/// A run that has started and not ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenRun {
    /// The user message the run answers.
    pub message_id: String,
    pub correlation: Option<CorrelationInfo>,
    /// Whether a model call of the run is in progress.
    pub call_open: bool,
    /// The reply calls the run has made (what its max iterations counts).
    #[serde(default)]
    pub reply_calls: u32,
}

impl TimelineProjection {
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest ordinal folded in.
    pub fn last_ordinal(&self) -> u64 {
        self.last_ordinal
    }

    /// The run that started and has not ended, if any: after a crash, the interrupted one.
    pub fn open_run(&self) -> Option<&OpenRun> {
        self.open_run.as_ref()
    }

    /// The model call in progress (started, not finished), in a run or not: after a crash, the
    /// interrupted one.
    pub fn open_call(&self) -> Option<&CorrelationInfo> {
        self.call.as_ref()
    }

    /// Tool calls the model asked for that have no result yet (pending, executing or awaiting
    /// the client): after a crash, the ones the interrupted run never answered.
    pub fn unanswered_tool_calls(&self) -> Vec<ToolCallEntity> {
        self.entities
            .iter()
            .filter_map(|e| match &e.payload {
                Some(Any::ToolCallEntity(call))
                    if matches!(
                        ToolCallStatus::parse(&call.status),
                        Some(
                            ToolCallStatus::Pending
                                | ToolCallStatus::Executing
                                | ToolCallStatus::AwaitingClient
                                | ToolCallStatus::AwaitingApproval
                        )
                    ) =>
                {
                    Some((**call).clone())
                }
                _ => None,
            })
            .collect()
    }

    /// Whether the open run waits for a person's decision: its tool step has a call whose
    /// question is on the log and nobody has decided (the process that ran it ended first).
    pub fn awaits_decision(&self) -> bool {
        self.open_run.as_ref().is_some_and(|run| !run.call_open)
            && self.unanswered_tool_calls().iter().any(|call| {
                ToolCallStatus::parse(&call.status) == Some(ToolCallStatus::AwaitingApproval)
            })
    }

    /// The timeline as of [`Self::last_ordinal`].
    pub fn snapshot(&self) -> SnapshotFrame {
        SnapshotFrame {
            snapshot_ordinal: self.last_ordinal,
            entities: self.entities.clone(),
        }
    }

    /// The entities created or changed after `ordinal`, as of [`Self::last_ordinal`]: what a
    /// client that has the timeline up to `ordinal` merges (by id) to have all of it.
    pub fn snapshot_since(&self, ordinal: u64) -> SnapshotFrame {
        let entities = if self.changes.covers(&self.entities) {
            let changed = self.changes.since(ordinal);
            changed
                .iter()
                .map(|&at| self.entities[at].clone())
                .collect()
        } else {
            self.entities
                .iter()
                .filter(|e| e.last_event_ordinal > ordinal)
                .cloned()
                .collect()
        };
        SnapshotFrame {
            snapshot_ordinal: self.last_ordinal,
            entities,
        }
    }
}

impl Projection for TimelineProjection {
    /// The ui events the entry produces, in order.
    type Output = Vec<UiEventFrame>;

    fn apply(&mut self, entry: &LogEntry) -> Vec<UiEventFrame> {
        self.project(entry, UiEvents::wanted(entry.ordinal))
    }
}

impl TimelineProjection {
    /// Folds `entry` in without making its ui events: what a reader that keeps only the
    /// entities needs (a long reply's finished segment would otherwise be copied whole only
    /// to be dropped).
    pub fn fold(&mut self, entry: &LogEntry) {
        self.project(entry, UiEvents::unwanted(entry.ordinal));
    }

    fn project(&mut self, entry: &LogEntry, mut out: UiEvents) -> Vec<UiEventFrame> {
        if !self.changes.covers(&self.entities) {
            self.changes = ChangeIndex::of(&self.entities);
        }
        self.last_ordinal = entry.ordinal;
        match &entry.event {
            Any::ChatUserMessageAccepted(m) => {
                let entity = ChatMessageEntity {
                    message_id: m.message_id.clone(),
                    role: if m.role.is_empty() {
                        "user".into()
                    } else {
                        m.role.clone()
                    },
                    prompt: m.prompt.clone(),
                    text: m.text.clone(),
                    content: m.content.clone(),
                    status: m.status.clone(),
                    r#final: true,
                    attachments: m.attachments.clone(),
                    ..Default::default()
                };
                self.insert(KIND_MESSAGE, &m.message_id, entry.ordinal, entity.into());
                out.push(&entry.event);
            }
            Any::ChatProviderCallMetadataUpdated(_)
            | Any::ChatProviderCallRetrying(_)
            | Any::ChatRunWarning(_) => out.push(&entry.event),
            Any::ChatRunStarted(run) => {
                self.open_run = Some(OpenRun {
                    message_id: run.message_id.clone(),
                    correlation: run.correlation.clone(),
                    call_open: false,
                    reply_calls: 0,
                });
                out.push(&entry.event);
            }
            Any::ChatProviderCallStarted(call) => {
                self.call = call.correlation.clone();
                if let Some(run) = &mut self.open_run {
                    run.call_open = true;
                    if CallPurpose::parse(&call.purpose) != Some(CallPurpose::Summary) {
                        run.reply_calls += 1;
                    }
                }
                out.push(&entry.event);
            }
            Any::ChatTextSegmentStarted(s) => {
                let start = ProseStart {
                    kind: StreamKind::Text,
                    message_id: s.message_id.clone(),
                    role: s.role.clone(),
                    prompt: s.prompt.clone(),
                    parent_message_id: String::new(),
                    correlation: s.correlation.clone(),
                };
                self.start_prose(&mut out, start);
                out.push(&entry.event);
            }
            Any::ChatReasoningSegmentStarted(s) => {
                let start = ProseStart {
                    kind: StreamKind::Reasoning,
                    message_id: s.message_id.clone(),
                    role: s.role.clone(),
                    prompt: s.prompt.clone(),
                    parent_message_id: s.parent_message_id.clone(),
                    correlation: s.correlation.clone(),
                };
                self.start_prose(&mut out, start);
                out.push(&entry.event);
            }
            Any::ChatTextDelta(d) => {
                self.text_delta(&mut out, &d.message_id, &d.text, StreamKind::Text)
            }
            Any::ChatReasoningDelta(d) => {
                self.text_delta(&mut out, &d.message_id, &d.text, StreamKind::Reasoning)
            }
            Any::ChatToolCallStarted(t) => {
                let entity = ToolCallEntity {
                    message_id: t.message_id.clone(),
                    tool_call_id: t.tool_call_id.clone(),
                    tool_name: t.tool_name.clone(),
                    input: t.input.clone(),
                    status: ToolCallStatus::StreamingArgs.into(),
                    correlation: t.correlation.clone().or_else(|| self.call.clone()),
                    ..Default::default()
                };
                self.tool_calls
                    .insert(t.tool_call_id.clone(), t.message_id.clone());
                self.open(
                    StreamKind::ToolArguments,
                    &t.message_id,
                    entry.ordinal,
                    KIND_TOOL_CALL,
                    entity.into(),
                );
                out.push(&entry.event);
            }
            Any::ChatToolArgumentsDelta(d) => {
                self.arguments_delta(&mut out, &d.message_id, &d.arguments)
            }
            Any::ChatToolCallRequested(t) => {
                self.close_stream(&t.message_id);
                if !self.index.contains_key(&t.message_id) {
                    let entity = ToolCallEntity {
                        message_id: t.message_id.clone(),
                        tool_call_id: t.tool_call_id.clone(),
                        tool_name: t.tool_name.clone(),
                        correlation: t.correlation.clone().or_else(|| self.call.clone()),
                        ..Default::default()
                    };
                    self.tool_calls
                        .insert(t.tool_call_id.clone(), t.message_id.clone());
                    self.insert(KIND_TOOL_CALL, &t.message_id, entry.ordinal, entity.into());
                }
                self.update_tool_call(&t.message_id, entry.ordinal, |call| {
                    call.input.clone_from(&t.input);
                    call.status = ToolCallStatus::Pending.into();
                    call.requested_ordinal = entry.ordinal;
                });
                out.push(&entry.event);
            }
            Any::ChatToolApprovalRequested(a) => {
                if let Some(message_id) = self.tool_calls.get(&a.tool_call_id).cloned() {
                    self.update_tool_call(&message_id, entry.ordinal, |call| {
                        call.status = ToolCallStatus::AwaitingApproval.into();
                        call.approval_requested_at_ms = entry.recorded_at_ms;
                        call.approval_expires_at_ms = a.expires_at_ms;
                    });
                }
                out.push(&entry.event);
            }
            Any::ChatToolApprovalDecided(d) => {
                if let Some(message_id) = self.tool_calls.get(&d.tool_call_id).cloned() {
                    self.update_tool_call(&message_id, entry.ordinal, |call| {
                        call.approval.clone_from(&d.decision);
                    });
                }
                out.push(&entry.event);
            }
            Any::ChatToolExecutionStarted(t) => {
                // "executing", or "awaiting_client" while a client tool waits for its answer.
                let status = if t.status.is_empty() {
                    ToolCallStatus::Executing.into()
                } else {
                    t.status.clone()
                };
                self.update_tool_call(&t.message_id, entry.ordinal, |call| call.status = status);
                out.push(&entry.event);
            }
            Any::ChatToolResultReady(r) => {
                let entity = ToolResultEntity {
                    message_id: r.message_id.clone(),
                    tool_call_id: r.tool_call_id.clone(),
                    tool_name: r.tool_name.clone(),
                    result: r.result.clone(),
                    status: r.status.clone(),
                    is_error: r.is_error,
                    correlation: r.correlation.clone(),
                };
                self.insert(
                    KIND_TOOL_RESULT,
                    &r.message_id,
                    entry.ordinal,
                    entity.into(),
                );
                out.push(&entry.event);
            }
            Any::ChatToolCallFinished(f) => {
                let status = if f.status.is_empty() {
                    ToolCallStatus::Completed.into()
                } else {
                    f.status.clone()
                };
                self.update_tool_call(&f.message_id, entry.ordinal, |call| call.status = status);
                out.push(&entry.event);
            }
            Any::ChatProviderCallFinished(f) => {
                let status = match FinishClass::parse(&f.finish_class) {
                    Some(FinishClass::Cancelled) => MessageStatus::Stopped,
                    Some(FinishClass::Error) => MessageStatus::Failed,
                    _ => MessageStatus::Finished,
                };
                self.finish_all_streams(&mut out, status, &f.stop_reason);
                self.call = None;
                if let Some(run) = &mut self.open_run {
                    run.call_open = false;
                }
                out.push(&entry.event);
            }
            Any::ChatRunFinished(_) => {
                self.finish_all_streams(&mut out, MessageStatus::Finished, "");
                self.call = None;
                self.open_run = None;
                out.push(&entry.event);
            }
            Any::ChatRunStopped(_) => {
                self.finish_all_streams(&mut out, MessageStatus::Stopped, "cancelled");
                self.call = None;
                self.open_run = None;
                out.push(&entry.event);
            }
            Any::ChatRunFailed(f) => {
                self.finish_all_streams(&mut out, MessageStatus::Failed, "error");
                self.call = None;
                self.open_run = None;
                let entity = ChatMessageEntity {
                    message_id: f.message_id.clone(),
                    role: "error".into(),
                    text: f.error.clone(),
                    status: MessageStatus::Failed.into(),
                    error: f.error.clone(),
                    r#final: true,
                    correlation: f.correlation.clone(),
                    ..Default::default()
                };
                self.insert(KIND_MESSAGE, &f.message_id, entry.ordinal, entity.into());
                out.push(&entry.event);
            }
            Any::ChatPromptQueued(q) => self.queued(q, entry.ordinal, &mut out),
            Any::ChatPromptDelivered(d) => self.delivered(d, entry.ordinal, &mut out),
            Any::ChatPromptDropped(d) => self.dropped(d, entry.ordinal, &mut out),
            Any::ChatContextCompacted(c) => self.compacted(c, entry.ordinal, &mut out),
            Any::ChatContentRedacted(r) => self.redacted(r, entry.ordinal, &mut out),
            // Entities, ui-only payloads and types from newer versions project to nothing.
            _ => {}
        }
        out.events
    }
}

impl TimelineProjection {
    fn insert(&mut self, kind: &str, id: &str, ordinal: u64, payload: Any) {
        let entity = SnapshotEntity {
            kind: kind.to_owned(),
            id: id.to_owned(),
            created_ordinal: ordinal,
            last_event_ordinal: ordinal,
            tombstone: false,
            payload: Some(payload),
        };
        match self.index.get(id) {
            // A repeated id replaces the entity but keeps its place and creation ordinal.
            Some(&at) => {
                let before = &self.entities[at];
                let (created_ordinal, changed) =
                    (before.created_ordinal, before.last_event_ordinal);
                self.entities[at] = SnapshotEntity {
                    created_ordinal,
                    ..entity
                };
                self.changes.changed(at, Some(changed), ordinal);
            }
            None => {
                let at = self.entities.len();
                self.index.insert(id.to_owned(), at);
                self.entities.push(entity);
                self.changes.changed(at, None, ordinal);
            }
        }
    }

    fn entity_mut(&mut self, id: &str, ordinal: u64) -> Option<&mut Any> {
        let at = *self.index.get(id)?;
        let entity = &mut self.entities[at];
        self.changes
            .changed(at, Some(entity.last_event_ordinal), ordinal);
        entity.last_event_ordinal = ordinal;
        entity.payload.as_mut()
    }

    fn update_tool_call(
        &mut self,
        id: &str,
        ordinal: u64,
        change: impl FnOnce(&mut ToolCallEntity),
    ) {
        let id = self
            .tool_calls
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_owned());
        if let Some(Any::ToolCallEntity(call)) = self.entity_mut(&id, ordinal) {
            change(call);
        }
    }
}

/// The ui events one log entry produces.
struct UiEvents {
    ordinal: u64,
    events: Vec<UiEventFrame>,
    /// Whether the caller reads them ([`TimelineProjection::fold`] does not).
    wanted: bool,
}

impl UiEvents {
    fn wanted(ordinal: u64) -> Self {
        Self {
            ordinal,
            events: Vec::with_capacity(1),
            wanted: true,
        }
    }

    fn unwanted(ordinal: u64) -> Self {
        Self {
            ordinal,
            events: Vec::new(),
            wanted: false,
        }
    }

    fn push(&mut self, payload: &Any) {
        if self.wanted {
            self.push_owned(payload.clone());
        }
    }

    fn push_owned(&mut self, payload: Any) {
        if !self.wanted {
            return;
        }
        let name = payload.type_name().to_owned();
        self.events.push(UiEventFrame {
            ordinal: self.ordinal,
            name,
            payload: Some(payload),
        });
    }
}
