//! A run: one user prompt and the model's answer, recorded event by event, with the tool loop.
//!
//! The run appends `ChatUserMessageAccepted` and `ChatRunStarted`, then alternates two phases:
//! a model call streams into the log (ending with one `ChatProviderCallFinished`); if the model
//! asked for tools, each call is executed (`ChatToolExecutionStarted`, `ChatToolResultReady`,
//! `ChatToolCallFinished`) and the model is called again with the results, up to the toolbox's
//! max iterations. The run always ends with exactly one of `ChatRunFinished`, `ChatRunStopped`
//! (cancelled) or `ChatRunFailed`, and every tool call the model asked for has a result by then
//! (an error result when it was not run), so the next model call sees a well-formed context.
//!
//! Before each model call the run delivers the steers that came meanwhile ([`steering`]),
//! checks its budgets and the context window, and compacts the context first when it has grown
//! past its threshold ([`compact`]): a budget that is spent ends the run (`budget_exceeded`), a
//! context that cannot fit fails it (`context_overflow`).
//!
//! A run is driven step by step ([`ActiveRun`]), so that whoever owns the session can answer
//! other requests between two events of a reply or while tools run; [`Session::run`] is the
//! simple loop for one-shot use.

use std::{panic::AssertUnwindSafe, sync::Arc, time::Instant};

use futures::{FutureExt, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use reel_proto::chat::{ChatRunStarted, ChatUserMessageAccepted, CorrelationInfo};
use sync_wrapper::SyncWrapper;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{
    budget::Budgets,
    compaction::ContextPolicy,
    fanout::SinkFailure,
    id::new_id,
    provider::{ModelSettings, Provider, ProviderError, ProviderEvent, ProviderStream},
    session::Session,
    tools::{Approver, ToolChoice, ToolOutput, Toolbox},
    vocabulary::{CallPurpose, ErrorCode, FinishClass, MessageStatus, ToolCallStatus},
};

/// Everything a run needs.
pub struct RunRequest<'a> {
    /// Stamps every output of this run.
    pub request_id: Arc<str>,
    pub prompt: String,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub provider: &'a dyn Provider,
    pub tools: &'a Toolbox,
    /// Whether a stdin-RPC client is there to run `client` tools.
    pub tool_client: bool,
    /// Who decides the calls of `approval: ask` tools; with none they are not run.
    pub approver: Option<&'a dyn Approver>,
    /// What the run and the session may spend.
    pub budgets: Budgets,
    /// When the context is compacted before a model call.
    pub context_policy: ContextPolicy,
}

/// The next thing that happened in a run: an event of the model's reply (`None`: the reply
/// stream ended), a tool call that finished, or the run cannot go on (its store failed before
/// a model call or tools could start, a budget is spent, the context does not fit).
pub enum RunEvent {
    Model(Option<Result<ProviderEvent, ProviderError>>),
    Tool(ToolDone),
    Halted(RunOutcome),
}

/// A finished tool call: which one (its place in the batch being executed) and its output.
pub struct ToolDone {
    slot: usize,
    output: ToolOutput,
}

/// What a run is waiting for. The stream and the tool futures are only ever used through
/// `&mut`; wrapped in `SyncWrapper`, a `&ActiveRun` held across an await (by the session's
/// request handlers) does not keep the serving future from moving between threads.
enum Phase<'a> {
    /// The model's reply; dropping it cancels the model call.
    Model(SyncWrapper<ProviderStream>),
    /// The tool calls being executed; dropping them kills command tools.
    Tools(SyncWrapper<FuturesUnordered<BoxFuture<'a, ToolDone>>>),
    /// Nothing more may start: the store failed before the next side effect, a budget is
    /// spent, or the context does not fit; the run ends so.
    Halted(RunOutcome),
    /// Nothing: the run has ended (or has not begun its first call).
    Idle,
}

/// A run in progress: what it waits for and the ids of what it records.
///
/// The session's owner drives it: [`Session::start_run`], then [`Session::step`] with each
/// [`ActiveRun::next_event`] until it returns the outcome, or [`Session::stop_run`] to cancel.
/// Between steps the owner may do anything else with the session (answer a snapshot request,
/// deliver a client tool's result), which is how a snapshot taken during a run lands between
/// two of its events.
pub struct ActiveRun<'a> {
    kind: RunKind,
    request_id: Arc<str>,
    /// The last ordinal before the run's first event.
    ordinal_before: u64,
    /// The user message the run answers.
    user_message_id: String,
    /// Correlation of the run (session and run ids).
    correlation: CorrelationInfo,
    call: CallState,
    phase: Phase<'a>,
    started: Instant,
    provider: &'a dyn Provider,
    system_prompt: Option<String>,
    settings: ModelSettings,
    tools: &'a Toolbox,
    tool_client: bool,
    approver: Option<&'a dyn Approver>,
    /// Reply calls this run has made (what max iterations counts).
    calls: u32,
    budgets: Budgets,
    context_policy: ContextPolicy,
    /// The compaction whose summarization call is in progress.
    compaction: Option<compact::PendingCompaction>,
    /// Whether the context was compacted for the next reply call already (it is not compacted
    /// twice for one call).
    compacted: bool,
    /// The tool calls being executed; a slot empties when its result is on the log.
    executing: Vec<Option<RequestedTool>>,
    /// Client tool calls waiting for the client: tool call id and where its answer goes.
    client_waits: Vec<(String, oneshot::Sender<ToolOutput>)>,
    /// Calls of `approval: ask` tools waiting for an `approve` request (no approver to ask).
    approval_waits: Vec<approval::ApprovalWait>,
    /// Opened when no call of the tool step waits for a decision any more: until then, no
    /// call of the step runs.
    step_gate: Option<tokio::sync::watch::Sender<bool>>,
}

/// What a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunKind {
    /// A prompt and the model's answer: a submit, a follow-up, a one-shot run.
    Prompt,
    /// Only a compaction (a `compact` request between runs): no user message, no run events.
    Compaction,
}

impl<'a> ActiveRun<'a> {
    /// A run of `kind` answering `request`, before its first model call.
    fn new(
        kind: RunKind,
        request: RunRequest<'a>,
        ordinal_before: u64,
        user_message_id: String,
        correlation: CorrelationInfo,
    ) -> Self {
        Self {
            kind,
            request_id: request.request_id,
            ordinal_before,
            user_message_id,
            call: CallState::new(correlation.clone(), None),
            correlation,
            phase: Phase::Idle,
            started: Instant::now(),
            provider: request.provider,
            system_prompt: request.system_prompt,
            settings: request.settings,
            tools: request.tools,
            tool_client: request.tool_client,
            approver: request.approver,
            calls: 0,
            budgets: request.budgets,
            context_policy: request.context_policy,
            compaction: None,
            compacted: false,
            executing: Vec::new(),
            client_waits: Vec::new(),
            approval_waits: Vec::new(),
            step_gate: None,
        }
    }

    /// Whether this is a prompt's run (not a compaction asked for between runs); only a
    /// prompt's run takes steering.
    pub fn takes_steering(&self) -> bool {
        self.kind == RunKind::Prompt
    }

    /// The run's correlation (session and run ids).
    pub fn correlation(&self) -> &CorrelationInfo {
        &self.correlation
    }

    /// The request this run answers; its outputs are stamped with it.
    pub fn request_id(&self) -> &Arc<str> {
        &self.request_id
    }

    /// The last ordinal before the run's first event: the run's events come after it.
    pub fn ordinal_before(&self) -> u64 {
        self.ordinal_before
    }

    /// Waits for the next event. A provider that panics yields [`ProviderError::Crashed`] and
    /// is not polled again.
    pub async fn next_event(&mut self) -> RunEvent {
        match &mut self.phase {
            Phase::Model(stream) => {
                let next = AssertUnwindSafe(stream.get_mut().next())
                    .catch_unwind()
                    .await;
                RunEvent::Model(self.survive(next))
            }
            Phase::Tools(running) => match running.get_mut().next().await {
                Some(done) => RunEvent::Tool(done),
                None => std::future::pending().await,
            },
            Phase::Halted(outcome) => RunEvent::Halted(outcome.clone()),
            Phase::Idle => std::future::pending().await,
        }
    }

    /// The next event if one is ready now, without waiting.
    pub fn ready_event(&mut self) -> Option<RunEvent> {
        self.next_event().now_or_never()
    }

    /// Hands the client's answer to the client tool call `tool_call_id`. False when no such
    /// call is waiting (unknown id, not a client tool, answered already, timed out).
    pub fn answer_client_tool(&mut self, tool_call_id: &str, output: ToolOutput) -> bool {
        self.client_waits.retain(|(_, answer)| !answer.is_closed());
        let Some(at) = self
            .client_waits
            .iter()
            .position(|(id, _)| id == tool_call_id)
        else {
            return false;
        };
        let (_, answer) = self.client_waits.swap_remove(at);
        answer.send(output).is_ok()
    }

    /// The ids of the client tool calls waiting for their client's answer, in the order asked.
    pub fn calls_awaiting_client(&self) -> impl Iterator<Item = &str> {
        self.client_waits
            .iter()
            .filter(|(_, answer)| !answer.is_closed())
            .map(|(id, _)| id.as_str())
    }

    /// Fails every client tool call still waiting: its client will not answer (it closed its
    /// input or asked to shut down).
    pub fn abandon_client_tools(&mut self) {
        self.client_waits.clear();
    }

    fn survive(
        &mut self,
        next: std::thread::Result<Option<Result<ProviderEvent, ProviderError>>>,
    ) -> Option<Result<ProviderEvent, ProviderError>> {
        next.unwrap_or_else(|panic| {
            self.phase = Phase::Model(SyncWrapper::new(futures::stream::empty().boxed()));
            Some(Err(ProviderError::Crashed(panic_message(panic.as_ref()))))
        })
    }
}

mod approval;
mod compact;
mod ending;
mod outcome;
mod record;
mod resume;
mod steering;
mod tool_calls;

pub use compact::CompactRequest;
pub use outcome::{RunFailure, RunOutcome};
use record::{CallState, RequestedTool};

impl Session {
    /// Runs `request.prompt` against the model (and its tools) and records everything on the
    /// log; cancelling `cancel` stops it promptly with `ChatRunStopped`.
    pub async fn run(&mut self, request: RunRequest<'_>, cancel: &CancellationToken) -> RunOutcome {
        let mut run = self.start_run(request).await;
        self.drive(&mut run, cancel).await
    }

    /// Drives `run` until it ends, or until it waits for a person's decision that nobody here
    /// can send ([`RunOutcome::Waiting`]: it waits in the store).
    pub async fn drive(
        &mut self,
        run: &mut ActiveRun<'_>,
        cancel: &CancellationToken,
    ) -> RunOutcome {
        loop {
            if run.awaits_decision() && !run.tool_client {
                self.flush().await;
                return RunOutcome::Waiting;
            }
            // Take what is ready without waiting; before waiting, hand everything recorded so
            // far to the sinks, so readers see each delta as soon as it exists.
            let ready = if cancel.is_cancelled() {
                None
            } else {
                run.ready_event()
            };
            let event = match ready {
                Some(event) => event,
                None => {
                    self.flush().await;
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return self.stop_run(run).await,
                        event = run.next_event() => event,
                    }
                }
            };
            if let Some(outcome) = self.step(run, event).await {
                return outcome;
            }
            if let Some(failure) = self.durable_failure() {
                return self.fail_run(run, RunFailure::storage(&failure)).await;
            }
        }
    }

    /// The first durable sink failure, if one has failed.
    pub fn durable_failure(&self) -> Option<SinkFailure> {
        self.sink_failures().iter().find(|f| f.durable).cloned()
    }

    /// Records the user's prompt and the start of the run and of its first model call.
    pub async fn start_run<'a>(&mut self, request: RunRequest<'a>) -> ActiveRun<'a> {
        let rid = Arc::clone(&request.request_id);
        let ordinal_before = self.log().last_ordinal();
        let user_message_id = new_id();
        self.append(
            &rid,
            ChatUserMessageAccepted {
                message_id: user_message_id.clone(),
                role: "user".into(),
                prompt: request.prompt.clone(),
                text: request.prompt.clone(),
                status: MessageStatus::Accepted.into(),
                ..Default::default()
            },
        )
        .await;
        let correlation = CorrelationInfo {
            session_id: self.id().to_owned(),
            run_id: new_id(),
            ..Default::default()
        };
        self.append(
            &rid,
            ChatRunStarted {
                message_id: user_message_id.clone(),
                prompt: request.prompt.clone(),
                correlation: Some(correlation.clone()),
                system_prompt: request.system_prompt.clone().unwrap_or_default(),
            },
        )
        .await;
        let mut run = ActiveRun::new(
            RunKind::Prompt,
            request,
            ordinal_before,
            user_message_id,
            correlation,
        );
        self.start_call(&mut run).await;
        run
    }

    /// Records one event of the run. Returns the outcome once the run has ended and its last
    /// event is on the log.
    pub async fn step(&mut self, run: &mut ActiveRun<'_>, event: RunEvent) -> Option<RunOutcome> {
        let rid = Arc::clone(&run.request_id);
        let outcome = match event {
            RunEvent::Tool(done) => {
                self.tool_done(run, done).await;
                return None;
            }
            RunEvent::Halted(outcome) => {
                if run.call.open {
                    self.finish_call(&rid, &mut run.call, "error", FinishClass::Error)
                        .await;
                }
                outcome
            }
            RunEvent::Model(Some(Ok(ProviderEvent::Finished { stop_reason })))
                if run.call.purpose == CallPurpose::Summary =>
            {
                self.finish_call(&rid, &mut run.call, &stop_reason, FinishClass::Completed)
                    .await;
                run.phase = Phase::Idle;
                match self.finish_compaction(run).await {
                    Some(outcome) => outcome,
                    None => return None,
                }
            }
            RunEvent::Model(Some(Ok(ProviderEvent::Finished { stop_reason }))) => {
                let class = if run.call.requested.is_empty() {
                    FinishClass::Completed
                } else {
                    FinishClass::ToolCalls
                };
                self.finish_call(&rid, &mut run.call, &stop_reason, class)
                    .await;
                run.phase = Phase::Idle;
                let requested = std::mem::take(&mut run.call.requested);
                if run.call.tool_required && requested.is_empty() {
                    self.warn_required_tool_call(&rid, &run.call).await;
                }
                if requested.is_empty() && self.has_undelivered_steer() {
                    // A steer came while the model was finishing: one more call carries it.
                    if run.calls < run.tools.max_iterations() {
                        self.start_call(run).await;
                        return None;
                    }
                    RunOutcome::Finished
                } else if requested.is_empty() {
                    RunOutcome::Finished
                } else if run.calls >= run.tools.max_iterations() {
                    let limit = run.tools.max_iterations();
                    let why = format!(
                        "not run: this run reached its limit of {limit} model calls (max iterations)"
                    );
                    for call in requested {
                        self.answer_tool(
                            &rid,
                            call,
                            ToolOutput::error(why.clone()),
                            ToolCallStatus::Skipped,
                        )
                        .await;
                    }
                    RunOutcome::IterationLimit { limit }
                } else {
                    self.start_tools(run, requested).await;
                    return None;
                }
            }
            RunEvent::Model(Some(Ok(event))) => {
                self.record(&rid, &mut run.call, event).await;
                return None;
            }
            RunEvent::Model(Some(Err(error))) => {
                self.finish_call(&rid, &mut run.call, "error", FinishClass::Error)
                    .await;
                RunOutcome::Failed(RunFailure::from_provider(&error))
            }
            RunEvent::Model(None) => {
                self.finish_call(&rid, &mut run.call, "error", FinishClass::Error)
                    .await;
                RunOutcome::Failed(RunFailure {
                    code: ErrorCode::RunFailed,
                    message: "the model's reply ended before it was complete".into(),
                })
            }
        };
        self.end_run(run, &outcome).await;
        Some(outcome)
    }

    /// Starts the next model call: delivers the steers that came since the last one, checks
    /// the budgets and the context window (compacting first when the context has grown past
    /// its threshold), then calls the model with the conversation so far.
    async fn start_call(&mut self, run: &mut ActiveRun<'_>) {
        if run.kind == RunKind::Prompt {
            self.deliver_steers(run).await;
        }
        match self.plan_call(run) {
            compact::CallPlan::Halt(outcome) => run.phase = Phase::Halted(outcome),
            compact::CallPlan::Summarize(pending) => self.start_summary(run, pending).await,
            compact::CallPlan::Reply => self.start_reply(run).await,
        }
    }

    /// Starts a reply call: the model answers the conversation so far.
    async fn start_reply(&mut self, run: &mut ActiveRun<'_>) {
        run.calls += 1;
        run.compacted = false;
        let tool_choice = run.tools.choice_for_call(run.calls);
        let request = crate::provider::ModelRequest {
            system_prompt: run.system_prompt.clone(),
            messages: self.context().messages().clone(),
            settings: run.settings.clone(),
            // Counted before this call's ChatProviderCallStarted.
            call_index: self.context().calls(),
            tools: run.tools.definitions(),
            tool_choice,
            purpose: CallPurpose::Reply,
        };
        if !self.open_call(run, &request).await {
            return;
        }
        run.call.tool_required = tool_choice == ToolChoice::Required;
        run.phase = Phase::Model(SyncWrapper::new(run.provider.stream(request)));
    }

    /// Records the start of a model call sending `request` (with what it sends, see
    /// [`crate::fingerprint`]); false when a durable store has failed (the run is halted then). It does not wait for the commit: the first token must not wait
    /// for a disk or for other sessions' commits; the store stays a few batches behind at most,
    /// tools wait for it, and done waits for everything.
    async fn open_call(
        &mut self,
        run: &mut ActiveRun<'_>,
        request: &crate::provider::ModelRequest,
    ) -> bool {
        run.call = CallState::new(
            CorrelationInfo {
                provider_call_id: new_id(),
                ..run.correlation.clone()
            },
            run.settings.pricing,
        );
        run.call.purpose = request.purpose;
        let rid = Arc::clone(&run.request_id);
        let fingerprint = self.fingerprinter.fingerprint(request);
        let started = run
            .call
            .started_event(run.provider.name(), &run.settings.model, fingerprint);
        self.append(&rid, started).await;
        run.call.open = true;
        if let Some(failure) = self.durable_failure() {
            run.phase = Phase::Halted(RunOutcome::Failed(RunFailure::storage(&failure)));
            return false;
        }
        true
    }
}

/// The text of a panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
