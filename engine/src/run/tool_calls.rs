//! The tool phase of a run: executing the tool calls of a model call and recording each one's
//! lifecycle (`ChatToolExecutionStarted`, `ChatToolResultReady`, `ChatToolCallFinished`).
//!
//! All calls of one model reply run at once; results are appended as they arrive, and the next
//! model call starts when the last one is in. A call that never ran (the run was cancelled or
//! failed, or hit its iteration limit) still gets an error result, because model APIs refuse a
//! conversation whose tool calls lack results.

use std::sync::Arc;

use futures::{FutureExt, stream::FuturesUnordered};
use reel_proto::chat::{ChatToolCallFinished, ChatToolResultReady};
use tokio::sync::{oneshot, watch};

use super::{
    ActiveRun, Phase, RequestedTool, RunFailure, RunOutcome, SyncWrapper, ToolDone,
    approval::{Approved, after_decision, remaining},
};
use crate::{
    id::new_id,
    session::Session,
    tools::{Execution, ToolCallContext, ToolOutput},
    vocabulary::{ToolCallStatus, ToolResultStatus},
};

/// Where a call of a tool step stands when the step starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Just asked for by the model: nothing of its execution is on the log yet.
    New,
    /// Its question is on the log (`ChatToolApprovalRequested`, at `asked_at_ms`) and nobody
    /// has decided: a waiting run taken up again.
    Asked { asked_at_ms: u64 },
    /// Its `ChatToolExecutionStarted` is on the log (decided, or it asked nobody) and it has
    /// not run: a waiting run taken up again.
    Started,
}

impl Session {
    /// Starts executing `requested`; the run waits for their results.
    pub(super) async fn start_tools<'a>(
        &mut self,
        run: &mut ActiveRun<'a>,
        requested: Vec<RequestedTool>,
    ) {
        let step = requested.into_iter().map(|c| (c, Arrival::New)).collect();
        self.start_step(run, step).await;
    }

    /// Starts the calls of a tool step, each from where it stands; the run waits for their
    /// results.
    pub(super) async fn start_step<'a>(
        &mut self,
        run: &mut ActiveRun<'a>,
        step: Vec<(RequestedTool, Arrival)>,
    ) {
        let rid = Arc::clone(&run.request_id);
        let tools = run.tools;
        let running = FuturesUnordered::new();
        // Without an approver to ask, a call waits for an `approve` request: from the client
        // of a host that reads requests (stdin RPC, serve), or, when the store keeps the
        // session, from whoever opens it next (`reel approve`).
        let by_request = run.approver.is_none() && (run.tool_client || self.is_durable());
        // No call of the step starts while one of them waits for a person's decision; a step
        // whose calls cannot wait has no gate.
        let asking = |call: &RequestedTool, arrival: Arrival| {
            tools.asks_approval(&call.name) || matches!(arrival, Arrival::Asked { .. })
        };
        let gated_step = by_request && step.iter().any(|(c, a)| asking(c, *a));
        let (gate, gated) = watch::channel(!gated_step);
        let mut step = step.into_iter();
        while let Some((call, arrival)) = step.next() {
            let context = ToolCallContext::new(
                self.id(),
                &call.correlation.run_id,
                &call.tool_call_id,
                call.requested_ordinal,
            );
            let mut execution =
                tools.execute(&call.name, &call.arguments, run.tool_client, context);
            // A call waiting for an `approve` request starts when it is decided (see decide).
            // One whose question is on the log asks whatever its tool says now (an interrupted
            // call of an `on_interrupted: ask` tool asks whether it runs again).
            let asks = !matches!(execution, Execution::Ready(_)) && asking(&call, arrival);
            let mut waits = false;
            // Whether the call's ChatToolExecutionStarted is on the log already.
            let mut started = arrival == Arrival::Started;
            if matches!(arrival, Arrival::Asked { .. })
                && !(asks && (by_request || run.approver.is_some()))
            {
                // Its tool is gone or cannot run (the command file changed while it waited),
                // or nobody here can decide: it does not run unasked.
                execution = Execution::Ready(self.unaskable(run, &call).await);
                started = true;
            } else if asks && by_request && matches!(execution, Execution::Running(_)) {
                let asked_at_ms = match arrival {
                    Arrival::Asked { asked_at_ms } => Some(asked_at_ms),
                    _ => None,
                };
                let verdict = match arrival {
                    Arrival::Started => None,
                    _ => self.ask_by_request(run, &call, asked_at_ms.is_some()).await,
                };
                if let Some(verdict) = verdict {
                    waits = true;
                    let timeout = tools
                        .approval_timeout(&call.name)
                        .map(|timeout| (timeout, remaining(timeout, asked_at_ms)));
                    execution =
                        after_decision(execution, &call.name, verdict, timeout, gated.clone());
                }
            } else if asks && arrival != Arrival::Started {
                match self.approve(run, &call, arrival != Arrival::New).await {
                    Approved::Yes => {}
                    Approved::No(why) => execution = Execution::Ready(ToolOutput::error(why)),
                    Approved::Cancelled => {
                        // Nothing more starts: this call and the ones after it are closed as
                        // the run ends, stopped.
                        run.call.requested = std::iter::once(call)
                            .chain(step.map(|(call, _)| call))
                            .collect();
                        run.phase = Phase::Halted(RunOutcome::Stopped);
                        return;
                    }
                }
            }
            let status = match execution {
                Execution::Client(_) => ToolCallStatus::AwaitingClient,
                _ => ToolCallStatus::Executing,
            };
            if !waits && !started {
                self.append(&rid, call.execution_started(status)).await;
            }
            let slot = run.executing.len();
            let done = move |output| ToolDone { slot, output };
            let future = match execution {
                Execution::Ready(output) => futures::future::ready(done(output)).boxed(),
                Execution::Running(future) => future.map(done).boxed(),
                Execution::Client(timeout) => {
                    let (answer, answered) = oneshot::channel();
                    run.client_waits.push((call.tool_call_id.clone(), answer));
                    async move {
                        let output = match tokio::time::timeout(timeout, answered).await {
                            Ok(Ok(output)) => output,
                            Ok(Err(_)) => ToolOutput::error("the client left before answering"),
                            Err(_) => ToolOutput::error(format!(
                                "the client did not answer within {} ms",
                                timeout.as_millis()
                            )),
                        };
                        done(output)
                    }
                    .boxed()
                }
            };
            // A call waiting for a decision passes the gate itself, after it (see above).
            let future = if waits || !gated_step {
                future
            } else {
                let mut gated = gated.clone();
                async move {
                    // A gate dropped (the run ended) lets nothing wait: the future goes too.
                    let _ = gated.wait_for(|open| *open).await;
                    future.await
                }
                .boxed()
            };
            run.executing.push(Some(call));
            running.push(future);
        }
        if gated_step {
            run.step_gate = Some(gate);
            run.open_step_if_decided();
        }
        // The tools have not started (their futures are not polled yet): they run only once
        // the log that says so is stored, since their side effects cannot be taken back.
        run.phase = match self.storage_holds().await {
            Ok(()) => Phase::Tools(SyncWrapper::new(running)),
            Err(failure) => Phase::Halted(RunOutcome::Failed(RunFailure::storage(&failure))),
        };
    }

    /// Records a finished tool call; when it was the last, calls the model again.
    pub(super) async fn tool_done(&mut self, run: &mut ActiveRun<'_>, done: ToolDone) {
        let Some(call) = run.executing.get_mut(done.slot).and_then(Option::take) else {
            return;
        };
        let status = if done.output.is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        };
        let rid = Arc::clone(&run.request_id);
        // A call that ended still waiting for a decision waited past its approval_timeout.
        if let Some(wait) = run.take_approval_wait(&call.tool_call_id) {
            self.expire(&rid, wait).await;
            run.open_step_if_decided();
        }
        self.answer_tool(&rid, call, done.output, status).await;
        if run.executing.iter().all(Option::is_none) {
            run.executing.clear();
            run.client_waits.clear();
            self.start_call(run).await;
        }
    }

    /// Appends a tool call's result and its end; `status` is how the call ended.
    pub(super) async fn answer_tool(
        &mut self,
        rid: &Arc<str>,
        call: RequestedTool,
        output: ToolOutput,
        status: ToolCallStatus,
    ) {
        let ready = ChatToolResultReady {
            message_id: new_id(),
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.name.clone(),
            result: output.result,
            status: if output.is_error {
                ToolResultStatus::Error
            } else {
                ToolResultStatus::Ok
            }
            .into(),
            correlation: Some(call.correlation.clone()),
            is_error: output.is_error,
        };
        self.append(rid, ready).await;
        let finished = ChatToolCallFinished {
            message_id: call.message_id,
            tool_call_id: call.tool_call_id,
            tool_name: call.name,
            status: status.into(),
            correlation: Some(call.correlation),
        };
        self.append(rid, finished).await;
    }

    /// Gives every tool call of the run still without a result an error result saying why.
    pub(super) async fn close_unanswered(&mut self, run: &mut ActiveRun<'_>, outcome: &RunOutcome) {
        let (status, why) = match outcome {
            RunOutcome::Stopped => (ToolCallStatus::Cancelled, "cancelled: the run was stopped"),
            RunOutcome::Failed(failure) if failure.is_storage() => (
                ToolCallStatus::Skipped,
                "not run: the session's database failed",
            ),
            _ => (ToolCallStatus::Skipped, "not run: the model call failed"),
        };
        let rid = Arc::clone(&run.request_id);
        let unanswered: Vec<RequestedTool> = std::mem::take(&mut run.call.requested)
            .into_iter()
            .chain(run.executing.drain(..).flatten())
            .collect();
        run.client_waits.clear();
        for call in unanswered {
            self.answer_tool(&rid, call, ToolOutput::error(why), status)
                .await;
        }
    }
}
