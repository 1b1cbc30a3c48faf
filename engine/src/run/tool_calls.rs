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
    approval::{Approved, after_verdict, expired},
};
use crate::{
    id::new_id,
    session::Session,
    tools::{Execution, ToolCallContext, ToolOutput},
    vocabulary::{ToolCallStatus, ToolResultStatus},
};

impl Session {
    /// Starts executing `requested`; the run waits for their results.
    pub(super) async fn start_tools<'a>(
        &mut self,
        run: &mut ActiveRun<'a>,
        requested: Vec<RequestedTool>,
    ) {
        let rid = Arc::clone(&run.request_id);
        let tools = run.tools;
        let running = FuturesUnordered::new();
        // Only a host that reads requests (stdin RPC, serve) can be sent a decision.
        let by_request = run.approver.is_none() && run.tool_client;
        // No call of the step starts while one of them waits for a person's decision; a step
        // whose calls cannot wait has no gate.
        let gated_step = by_request && requested.iter().any(|c| tools.asks_approval(&c.name));
        let (gate, gated) = watch::channel(!gated_step);
        let mut requested = requested.into_iter();
        while let Some(call) = requested.next() {
            let context = ToolCallContext::new(
                self.id(),
                &call.correlation.run_id,
                &call.tool_call_id,
                call.requested_ordinal,
            );
            let mut execution =
                tools.execute(&call.name, &call.arguments, run.tool_client, context);
            // A call waiting for an `approve` request starts when it is decided (see decide).
            let asks = !matches!(execution, Execution::Ready(_)) && tools.asks_approval(&call.name);
            let mut waits = false;
            if asks && by_request && matches!(execution, Execution::Running(_)) {
                if let Some(verdict) = self.ask_by_request(run, &call).await {
                    waits = true;
                    let timeout = tools.approval_timeout(&call.name);
                    let name = call.name.clone();
                    let mut gated = gated.clone();
                    execution = match execution {
                        Execution::Running(work) => Execution::Running(Box::pin(async move {
                            // The decision (or its expiry) first, then the step's gate.
                            let verdict = match timeout {
                                Some(timeout) => match tokio::time::timeout(timeout, verdict).await
                                {
                                    Ok(verdict) => verdict,
                                    Err(_) => return expired(&name, timeout),
                                },
                                None => verdict.await,
                            };
                            if let Some(refused) = after_verdict(verdict) {
                                return refused;
                            }
                            let _ = gated.wait_for(|open| *open).await;
                            work.await
                        })),
                        other => other,
                    };
                }
            } else if asks {
                match self.approve(run, &call).await {
                    Approved::Yes => {}
                    Approved::No(why) => execution = Execution::Ready(ToolOutput::error(why)),
                    Approved::Cancelled => {
                        // Nothing more starts: this call and the ones after it are closed as
                        // the run ends, stopped.
                        run.call.requested = std::iter::once(call).chain(requested).collect();
                        run.phase = Phase::Halted(RunOutcome::Stopped);
                        return;
                    }
                }
            }
            let status = match execution {
                Execution::Client(_) => ToolCallStatus::AwaitingClient,
                _ => ToolCallStatus::Executing,
            };
            if !waits {
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
