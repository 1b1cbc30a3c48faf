//! A hosted session: the request semantics every host shares (stdin RPC, `reel serve`, `reel
//! acp`), one session served to its client request by request.
//!
//! The server owns the [`Session`] and reads [`Incoming`] requests from a channel. Every frame
//! it writes goes through the session's one writer, stamped with the request it answers, so a
//! snapshot asked for during a reply lands between two of the reply's events, and `done` is
//! always the last frame of its request.
//!
//! * `submit`: a run; its ui events, a snapshot of the entities the run created or changed, and
//!   `done` (`ok`, `failed` or `stopped`).
//! * `followUp`: queued while a submit runs (`ChatPromptQueued`) and started when it ends, as a
//!   submit with its own frames and `done`; with nothing running, a submit. When the input
//!   ends the queue still runs (a conversation can be piped in at once); a `shutdown` or a
//!   signal drops it (`ChatPromptDropped`, each follow-up's `done` `stopped`).
//! * `steer`: delivered into the running submit at its next model call (`ChatPromptDelivered`),
//!   or one more call when the model was finishing; its own `done` `ok` at once.
//! * `compact`: compacts the model context now (a summarization call and
//!   `ChatContextCompacted`), `done` when it is on the log.
//! * `cancel`: its own `done` `ok`, then the running submit ends with `ChatRunStopped` and `done`
//!   `stopped`, and the next follow-up starts; `clearQueue` drops the queue first. With nothing
//!   running, `no_active_request`.
//! * `snapshot`: a snapshot and `done` `ok`, at once, also while a submit runs.
//! * `tool_result`: the answer to a `client` tool call of the running submit; its own `done`
//!   `ok`, and the run goes on with the result. An id no client call waits for gets
//!   `unknown_tool_call`.
//! * `approve`: a person's decision on a call of an `approval: ask` tool of the running submit
//!   (with no approver to ask, the call waits for one after `ChatToolApprovalRequested`); its
//!   own `done` `ok`, and the call runs or is declined. A decision that is not an option gets
//!   `invalid_decision`, an id no call waits under `unknown_tool_call`. When the input ends, a
//!   call still waiting is decided `cancelled` and not run.
//! * `shutdown`: stops reading, waits for the running submit, `done` `shutdown`.
//! * The first request binds the session id; another id gets `session_mismatch`. A submit while
//!   one runs gets `session_busy`. Every accepted request gets a `done`; a rejected line that
//!   named a request id gets its error and a `done` `failed` under that id.

use std::sync::Arc;

use reel_proto::rpc::RpcRequestLine;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    budget::Budgets,
    compaction::ContextPolicy,
    fanout::SinkFailure,
    provider::{ModelSettings, Provider},
    run::{ActiveRun, RunEvent, RunFailure, RunOutcome},
    session::Session,
    tools::{Approver, Toolbox},
    vocabulary::{DoneStatus, DropReason, ErrorCode, QueuedPromptKind},
};

/// What the request reader hands the server.
#[derive(Debug)]
pub enum Incoming {
    /// A well-formed request line (boxed: a line is much larger than a rejection).
    Request(Box<RpcRequestLine>),
    /// A line that could not be taken: one non-terminal error frame, under `request_id` when the
    /// line still named one.
    Rejected {
        request_id: Option<String>,
        code: ErrorCode,
        message: String,
    },
    /// Reading requests failed; nothing more will come.
    ReadFailed(String),
}

/// How serving ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServeEnd {
    /// The client closed its end; the last submit finished first.
    InputClosed,
    Shutdown,
    /// A signal stopped the session; the running submit was stopped.
    Interrupted,
    /// Reading requests failed (a terminal `stdin_read_failed` error was written).
    ReadFailed,
    /// The durable store failed (a terminal `storage_failed` error was written): going on would
    /// lose data.
    StorageFailed,
}

/// What every run of the session is made with.
pub struct ServeConfig<'a> {
    /// The session id was chosen before the first request (`--session-id`, a stored session):
    /// requests must name it or none, and never rename it.
    pub id_fixed: bool,
    pub provider: &'a dyn Provider,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub tools: &'a Toolbox,
    /// Who decides the calls of `approval: ask` tools (an editor over ACP); `None`: nobody
    /// can, and they are not run.
    pub approver: Option<&'a dyn Approver>,
    pub budgets: Budgets,
    pub context_policy: ContextPolicy,
    /// Set while the writer waits for a request and nothing else (see [`IdleSignal`]).
    pub idle: crate::IdleSignal,
}

mod hosting;
mod request;
mod request_id;
mod request_line;

pub use hosting::{OpenedSession, RunSetup};
pub use request_line::{ParsedLine, parse_line, too_large};

/// Serves `session` until the input ends, a shutdown request, a read failure or `interrupt`.
pub fn serve<'a>(
    session: Session,
    config: ServeConfig<'a>,
    incoming: mpsc::Receiver<Incoming>,
    interrupt: CancellationToken,
) -> impl Future<Output = (Session, ServeEnd)> + 'a {
    // Not an `async fn`: one keeps its arguments for its whole life beside what they are moved
    // into, so the session and the config would be held twice by every idle session's writer.
    let mut server = Server {
        session,
        config,
        bound: false,
        active: None,
    };
    async move {
        Box::pin(server.take_up_waiting_run()).await;
        let end = server.serve(incoming, interrupt).await;
        (server.session, end)
    }
}

struct Server<'a> {
    session: Session,
    config: ServeConfig<'a>,
    /// Whether the first request has bound the session id.
    bound: bool,
    /// The submit being answered (boxed: an idle session's writer would otherwise keep room
    /// for a run it does not have, 1.3 KB).
    active: Option<Box<ActiveRun<'a>>>,
}

/// What woke a waiting writer.
enum Woken {
    Interrupted,
    /// A request, or `None` when the input ended.
    Request(Option<Incoming>),
    Event(RunEvent),
}

/// What the loop does after handling a request.
enum Next {
    Continue,
    /// Stop reading; end when the running submit is done, answering this shutdown request.
    Drain(Option<Arc<str>>),
    End(ServeEnd),
}

impl<'a> Server<'a> {
    async fn serve(
        &mut self,
        mut incoming: mpsc::Receiver<Incoming>,
        interrupt: CancellationToken,
    ) -> ServeEnd {
        // Some(request id of the shutdown) once no more requests are read; None for end of input.
        let mut draining: Option<Option<Arc<str>>> = None;
        loop {
            // Each request's and event's handling is boxed: inlined, the largest would size this
            // loop's future, which an idle session keeps (16 KB a session in `reel serve`).
            if let Some(failure) = self.session.durable_failure() {
                return Box::pin(self.end_for_storage(failure)).await;
            }
            if interrupt.is_cancelled() {
                return Box::pin(self.interrupted(draining.flatten())).await;
            }
            if draining.is_some()
                && self
                    .active
                    .as_ref()
                    .is_some_and(|run| self.may_suspend(run))
            {
                Box::pin(self.suspend(draining.clone().flatten())).await;
            }
            if draining.is_some() && self.active.is_none() {
                return Box::pin(self.drained(draining.flatten())).await;
            }
            // While a reply streams without pause, look at requests between its events, so that
            // a cancel or a snapshot is answered at once.
            if let Some(run) = self.active.as_mut() {
                if draining.is_none()
                    && let Ok(message) = incoming.try_recv()
                {
                    match Box::pin(self.handle(message)).await {
                        Next::Continue => {}
                        Next::Drain(shutdown) => {
                            draining = Some(Box::pin(self.stop_reading(shutdown)).await)
                        }
                        Next::End(end) => return end,
                    }
                    continue;
                }
                if let Some(event) = run.ready_event() {
                    Box::pin(self.advance(event)).await;
                    continue;
                }
            }
            Box::pin(self.session.flush()).await;
            // Only a request (or `interrupt`) can wake a writer with no run and no draining:
            // its host may set its future aside until one comes.
            self.config
                .idle
                .set(self.active.is_none() && draining.is_none());
            let woken = tokio::select! {
                biased;
                () = interrupt.cancelled() => Woken::Interrupted,
                message = incoming.recv(), if draining.is_none() => Woken::Request(message),
                event = next_event(&mut self.active), if self.active.is_some() => Woken::Event(event),
            };
            // Cleared before anything is done about it: what that awaits wakes this task.
            self.config.idle.set(false);
            match woken {
                Woken::Interrupted => {}
                Woken::Request(None) => draining = Some(Box::pin(self.stop_reading(None)).await),
                Woken::Request(Some(message)) => match Box::pin(self.handle(message)).await {
                    Next::Continue => {}
                    Next::Drain(shutdown) => {
                        draining = Some(Box::pin(self.stop_reading(shutdown)).await)
                    }
                    Next::End(end) => return end,
                },
                Woken::Event(event) => Box::pin(self.advance(event)).await,
            }
        }
    }

    /// A durable sink failed: nothing more may happen that the log cannot record, so the
    /// running submit fails at once and no further request is read.
    async fn end_for_storage(&mut self, failure: SinkFailure) -> ServeEnd {
        match self.active.take() {
            Some(mut run) => {
                let outcome = self
                    .session
                    .fail_run(&mut run, RunFailure::storage(&failure))
                    .await;
                self.answer_submit(&run, &outcome).await;
            }
            // Between requests (a heartbeat found the lease gone, say): said without a
            // request to answer.
            None => {
                self.session
                    .report_storage_failure(&Arc::from(""), &failure)
                    .await
            }
        }
        // Queued follow-ups will not run: their requests are owed a done.
        for queued in self.session.timeline().queued_prompts().to_vec() {
            if queued.is(QueuedPromptKind::FollowUp) {
                let rid: Arc<str> = Arc::from(queued.request_id.as_str());
                self.session.emit_done(&rid, DoneStatus::Failed).await;
            }
        }
        ServeEnd::StorageFailed
    }

    /// No more requests will be read: a client tool call still waiting can never be answered,
    /// so it fails now instead of at its timeout. A call waiting for a decision waits on in
    /// the store when the session is durable (the run is suspended, see [`Self::suspend`]);
    /// without a store nobody could ever decide, so it is decided `cancelled` and not run.
    async fn stop_reading(&mut self, shutdown: Option<Arc<str>>) -> Option<Arc<str>> {
        let durable = self.session.is_durable();
        if let Some(run) = self.active.as_mut() {
            run.abandon_client_tools();
        }
        if let Some(run) = self.active.as_mut().filter(|_| !durable) {
            let run_request = Arc::clone(run.request_id());
            for wait in run.take_approval_waits() {
                self.session.decide(&run_request, wait, None, "").await;
            }
            run.open_step_if_decided();
        }
        // A shutdown ends the session after the running submit: the queue does not run. At the
        // end of input it does (that is how a conversation is piped in).
        if let Some(rid) = &shutdown {
            self.drop_queue(rid, DropReason::Shutdown).await;
        }
        shutdown
    }

    /// Takes up the run the log shows waiting for a person's decision (its last process ended
    /// while it waited): it waits here now, and the first `approve` continues it.
    async fn take_up_waiting_run(&mut self) {
        let request = self.run_request(Arc::from(""), String::new());
        self.active = self.session.resume_waiting_run(request).await.map(Box::new);
    }

    /// Whether `run` can do nothing until a person decides, and the store keeps it waiting
    /// when this process ends.
    fn may_suspend(&self, run: &ActiveRun<'_>) -> bool {
        run.awaits_decision() && self.session.is_durable()
    }

    /// This process ends while the running submit waits for a person's decision: the run is
    /// not ended, it waits in the store (the next process to open the session takes it up).
    /// Its request gets what it made so far and `done` `waiting`; queued follow-ups are
    /// dropped, as at a shutdown.
    async fn suspend(&mut self, shutdown: Option<Arc<str>>) {
        let Some(mut run) = self.active.take() else {
            return;
        };
        run.abandon_client_tools();
        let rid = Arc::clone(run.request_id());
        let dropped_by = shutdown.unwrap_or_else(|| Arc::clone(&rid));
        self.drop_queue(&dropped_by, DropReason::Shutdown).await;
        if !rid.is_empty() {
            self.session
                .emit_snapshot_since(&rid, run.ordinal_before())
                .await;
            self.session.emit_done(&rid, DoneStatus::Waiting).await;
        }
        // Dropping the run drops its step: none of its calls has started.
        drop(run);
    }

    /// Drops every queued prompt, while answering request `rid`; each follow-up's request gets
    /// done `stopped`.
    async fn drop_queue(&mut self, rid: &Arc<str>, reason: DropReason) {
        for queued in self.session.drop_queued(rid, None, reason).await {
            if queued.is(QueuedPromptKind::FollowUp) {
                let rid: Arc<str> = Arc::from(queued.request_id.as_str());
                self.session.emit_done(&rid, DoneStatus::Stopped).await;
            }
        }
    }

    /// The running submit has ended: the oldest queued follow-up starts, unless the session's
    /// budget is spent (then every follow-up is dropped and refused).
    async fn start_next_follow_up(&mut self) {
        if self.active.is_some() {
            return;
        }
        let Some(next) = self.session.next_follow_up() else {
            return;
        };
        if let Some(message) = self.session_budget_spent() {
            let none: Arc<str> = Arc::from("");
            let dropped = self
                .session
                .drop_queued(
                    &none,
                    Some(QueuedPromptKind::FollowUp),
                    DropReason::BudgetExceeded,
                )
                .await;
            for queued in dropped {
                let rid: Arc<str> = Arc::from(queued.request_id.as_str());
                self.refuse(&rid, ErrorCode::BudgetExceeded, &message).await;
            }
            return;
        }
        self.session.deliver_follow_up(&next).await;
        self.start_prompt(Arc::from(next.request_id.as_str()), next.prompt)
            .await;
    }

    /// Records one event of the running submit; answers the submit when its run has ended.
    async fn advance(&mut self, event: RunEvent) {
        let run = self.active.as_mut().expect("a run is active");
        if let Some(outcome) = self.session.step(run, event).await {
            let run = self.active.take().expect("a run is active");
            self.answer_submit(&run, &outcome).await;
            if !self.session.storage_failed() {
                self.start_next_follow_up().await;
            }
            if self.active.is_none() {
                self.session.settle();
            }
        }
    }

    /// The end of a submit: a snapshot of what the run created or changed (a long session's
    /// whole timeline after every submit would make the session quadratic), an error if it
    /// failed, and done.
    async fn answer_submit(&mut self, run: &ActiveRun<'_>, outcome: &RunOutcome) {
        let rid = run.request_id();
        if rid.is_empty() {
            // A waiting run taken up again that no request continued (it expired, or was
            // cancelled): its events are on the log, and no request is owed a done.
            return;
        }
        self.session
            .emit_snapshot_since(rid, run.ordinal_before())
            .await;
        // A storage failure is reported once, as the terminal error the done brings.
        if let RunOutcome::Failed(failure) = outcome
            && !failure.is_storage()
        {
            self.session
                .emit_error(rid, failure.code, &failure.message, false)
                .await;
        }
        if let Some((code, message)) = outcome.warning() {
            self.session.emit_error(rid, code, &message, false).await;
        }
        self.session.emit_done(rid, outcome.done_status()).await;
    }

    /// Stops the running submit; the next follow-up, if one is queued, starts.
    async fn stop_active(&mut self) {
        if let Some(mut run) = self.active.take() {
            let outcome = self.session.stop_run(&mut run).await;
            self.answer_submit(&run, &outcome).await;
        }
        self.start_next_follow_up().await;
        if self.active.is_none() {
            self.session.settle();
        }
    }

    async fn interrupted(&mut self, shutdown: Option<Arc<str>>) -> ServeEnd {
        let rid = shutdown.clone().unwrap_or_else(|| Arc::from(""));
        if self
            .active
            .as_ref()
            .is_some_and(|run| self.may_suspend(run))
        {
            // A signal does not end a run that waits for a person: it waits in the store.
            self.suspend(Some(Arc::clone(&rid))).await;
        }
        self.drop_queue(&rid, DropReason::Shutdown).await;
        self.stop_active().await;
        if let Some(rid) = shutdown {
            self.session.emit_done(&rid, DoneStatus::Shutdown).await;
        }
        ServeEnd::Interrupted
    }

    async fn drained(&mut self, shutdown: Option<Arc<str>>) -> ServeEnd {
        match shutdown {
            Some(rid) => {
                self.session.emit_done(&rid, DoneStatus::Shutdown).await;
                ServeEnd::Shutdown
            }
            None => ServeEnd::InputClosed,
        }
    }

    async fn handle(&mut self, message: Incoming) -> Next {
        match message {
            Incoming::Rejected {
                request_id,
                code,
                message,
            } => {
                let rid: Arc<str> = Arc::from(request_id.as_deref().unwrap_or_default());
                self.session.emit_error(&rid, code, &message, false).await;
                if !rid.is_empty() {
                    self.session.emit_done(&rid, DoneStatus::Failed).await;
                }
                Next::Continue
            }
            Incoming::ReadFailed(message) => {
                let rid: Arc<str> = Arc::from("");
                self.session
                    .emit_error(&rid, ErrorCode::StdinReadFailed, &message, true)
                    .await;
                self.drop_queue(&rid, DropReason::Shutdown).await;
                self.stop_active().await;
                Next::End(ServeEnd::ReadFailed)
            }
            Incoming::Request(line) => self.request(*line).await,
        }
    }
}

async fn next_event(active: &mut Option<Box<ActiveRun<'_>>>) -> RunEvent {
    match active {
        Some(run) => run.next_event().await,
        None => std::future::pending().await,
    }
}
