//! `reel run-command`: one prompt, one run, streamed to the chosen outputs.
//!
//! The stream always has the same shape: hello, snapshot, the run's ui events, a final snapshot,
//! a terminal error if the run failed, and done last, also when the setup fails, when the user
//! presses Ctrl-C and when reel itself hits an internal error.

use anyhow::Context;
use reel_engine::{SessionCatalog, error_chain};
use reel_storage::TimelineStore;
use std::{io::IsTerminal, panic::AssertUnwindSafe, path::Path, sync::Arc};

use futures::FutureExt;
use reel_engine::{
    ApprovalOption, DoneStatus, ErrorCode, Fanout, RunOutcome, RunRequest, ServeConfig, ServeEnd,
    Session, hello_frame, new_id, serve,
};
use reel_sinks::{DebugFileSink, JsonlFrameSink};
use tokio_util::sync::CancellationToken;

use crate::{
    exit,
    outputs::{self, Rendering},
    persistence,
    prepare::{Prepared, prepare},
    run_args::{Invocation, OutputMode, RunCommandArgs},
    same_file::{self, InUse},
    signals::SignalWatch,
    stdin_rpc,
    terminal_approver::TerminalApprover,
};

/// How a session ended, before outputs are closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Ok,
    Failed,
    /// Stopped by a signal.
    Stopped,
    /// The run waits for a person's decision (exit status 3).
    Waiting,
    /// A re-run went another way than its recording (exit status 3).
    Diverged,
}

mod rerun_host;
mod waiting;

use rerun_host::rerun_into;
use waiting::{ApproveHint, waiting_calls};

pub async fn run(invocation: Invocation) -> u8 {
    let args = &invocation.args;
    if args.stdin_rpc && !args.frames_on_stdout() {
        tracing::error!("--stdin-rpc needs --rpc or --output jsonl: stdout must carry frames");
        return exit::USAGE;
    }
    let cancel = CancellationToken::new();
    let signals = match SignalWatch::install(cancel.clone()) {
        Ok(signals) => Some(signals),
        Err(error) => {
            tracing::warn!("cannot watch for signals: {error}");
            None
        }
    };
    let (mut fanout, mut capabilities) = outputs(args);
    let mut prepared = prepare(&invocation);
    if let (Ok(ready), Some(path)) = (&prepared, &args.debug_events_jsonl) {
        match debug_file(args, path, &ready.reads) {
            Ok(sink) => {
                fanout.attach(Box::new(sink));
                capabilities.push("debug-log");
            }
            Err(error) => prepared = Err(error),
        }
    }
    let opened = match &prepared {
        Ok(_) => persistence::open(args).await.unwrap_or_else(|error| {
            prepared = Err(error);
            None
        }),
        Err(_) => None,
    };
    let persisted = opened.is_some();
    // The sinks of --sink start once the session is: a JetStream sink catches up from the
    // store (through a handle on its reading connection) and follows what it commits.
    let mut reader = opened
        .as_ref()
        .and_then(|o| o.archive.as_ref())
        .map(TimelineStore::shared);
    let stored = opened.as_ref().map_or(0, |o| o.log.last_ordinal());
    let mut session = match opened {
        Some(opened) => persistence::session_of(opened, fanout),
        None => Session::new(args.session_id.clone().unwrap_or_else(new_id), fanout),
    };
    if let Ok(ready) = &prepared {
        for uri in &ready.sinks {
            let store = reader.as_mut().map(|s| s as &mut dyn SessionCatalog);
            let (id, committed) = (session.id().to_owned(), session.store_committed());
            match uri.start(&id, store, stored, committed).await {
                Ok(sink) => session.attach(sink),
                Err(error) => {
                    prepared = Err(error);
                    break;
                }
            }
        }
    }
    let none: Arc<str> = Arc::from("");
    session.emit_hello(&none, hello_frame(&capabilities)).await;

    let (session, ending) = match prepared {
        Err(error) => {
            tracing::error!("{}", error_chain(&*error));
            if !args.stdin_rpc {
                session.emit_snapshot(&none).await;
            }
            session
                .emit_error(
                    &none,
                    ErrorCode::RunnerInitFailed,
                    &error_chain(&*error),
                    true,
                )
                .await;
            session.emit_done(&none, DoneStatus::Failed).await;
            (session, Ending::Failed)
        }
        Ok(prepared) if args.rerun.is_some() => match reader.as_mut() {
            Some(store) => rerun_into(session, prepared, store, args, &cancel).await,
            None => {
                setup_failed(
                    session,
                    &anyhow::anyhow!(
                        "a re-run needs the timeline database of the session it re-runs"
                    ),
                )
                .await
            }
        },
        Ok(prepared) if args.stdin_rpc => {
            serve_stdin(session, prepared, cancel, persisted, args.resume).await
        }
        Ok(prepared) => {
            let decision = args
                .approve
                .clone()
                .zip(args.decision)
                .map(|(call, decision)| {
                    let message = args.decision_message.clone().unwrap_or_default();
                    (call, decision.into(), message)
                });
            let hint = ApproveHint::of(args);
            one_shot(session, prepared, decision, hint, &cancel).await
        }
    };
    let failures = session.close().await;
    for failure in &failures {
        tracing::error!("output {} failed: {}", failure.sink, failure.message);
    }
    match ending {
        Ending::Diverged => exit::DIVERGED,
        Ending::Ok if failures.is_empty() => exit::OK,
        Ending::Ok | Ending::Failed => exit::FAILED,
        Ending::Waiting if failures.is_empty() => exit::WAITING,
        Ending::Waiting => exit::FAILED,
        Ending::Stopped => match signals.as_ref().and_then(SignalWatch::received) {
            Some(15) => exit::TERMINATED,
            Some(1) => exit::HUNG_UP,
            _ => exit::INTERRUPTED,
        },
    }
}

/// The stdout sink the flags ask for, and the capabilities hello announces besides the base ones.
fn outputs(args: &crate::run_args::RunCommandArgs) -> (Fanout, Vec<&'static str>) {
    let mut fanout = Fanout::new();
    let mut capabilities = Vec::new();
    if args.stdin_rpc {
        capabilities.extend([
            "stdin-rpc",
            "single-session",
            "multi-turn",
            "cancel",
            "client-tools",
            "steer",
            "follow-up",
            "compact",
        ]);
    }
    if args.include_backend_events {
        capabilities.push("backend-events");
    }
    let mode = if args.frames_on_stdout() {
        OutputMode::Jsonl
    } else {
        args.output
    };
    // A re-run's stdout is its report; its session is in the database.
    if args.rerun.is_none() {
        let rendering = Rendering::for_output(mode, args.include_backend_events);
        fanout.attach(outputs::sink(rendering, std::io::stdout()));
    }
    (fanout, capabilities)
}

/// The debug file's sink: refused when the path is a file the command uses for something else
/// (creating the debug file truncates it).
fn debug_file(
    args: &RunCommandArgs,
    path: &Path,
    reads: &[InUse],
) -> anyhow::Result<JsonlFrameSink<std::fs::File>> {
    let mut in_use = Vec::new();
    if let Some(locations) = persistence::locations(args)? {
        let databases = [
            (locations.timeline, "the timeline database"),
            (locations.turns, "the turns database"),
        ];
        for (location, what) in databases {
            if let Some(db) = location.as_ref().and_then(|l| l.sqlite_path()) {
                in_use.extend(InUse::database(db, what));
            }
        }
    }
    in_use.extend(
        reads
            .iter()
            .map(|used| InUse::new(&used.path, used.what.clone())),
    );
    if let Some(used) = same_file::clash(path, &in_use) {
        return Err(anyhow::anyhow!(
            "--debug-events-jsonl {} is {} ({}): writing the debug file there would destroy it; choose another path",
            path.display(),
            used.what,
            used.path.display()
        ));
    }
    DebugFileSink::create(path)
        .with_context(|| format!("cannot create debug file {}", path.display()))
}

/// A decision `--approve` gives: the call, what was decided, the words the model reads.
type GivenDecision = (String, ApprovalOption, String);

/// One prompt, one run: snapshot, the run, the final snapshot, an error if it failed, done.
/// With `decision` (`--approve`) the session's waiting run goes on instead of a new one.
async fn one_shot(
    mut session: Session,
    prepared: Prepared,
    decision: Option<GivenDecision>,
    approve_hint: ApproveHint,
    cancel: &CancellationToken,
) -> (Session, Ending) {
    let rid: Arc<str> = Arc::from("");
    session.emit_snapshot(&rid).await;
    session.close_interrupted_run(&rid, &prepared.tools).await;
    let mut prepared = prepared;
    if let Err(error) = start_tool_servers(&mut session, &mut prepared).await {
        return setup_failed(session, &error).await;
    }
    if let Some(exceeded) = prepared.budgets.check_session(session.usage()) {
        let message = exceeded.to_string();
        tracing::error!("{message}");
        session
            .emit_error(&rid, ErrorCode::BudgetExceeded, &message, true)
            .await;
        session.emit_done(&rid, DoneStatus::Failed).await;
        return (session, Ending::Failed);
    }
    // On a terminal, the person there decides the calls of `approval: ask` tools.
    let terminal = TerminalApprover;
    let approver = std::io::stdin()
        .is_terminal()
        .then_some(&terminal as &dyn reel_engine::Approver);
    let request = RunRequest {
        request_id: Arc::clone(&rid),
        prompt: prepared.prompt,
        system_prompt: prepared.system_prompt,
        settings: prepared.settings,
        provider: prepared.provider.as_ref(),
        tools: &prepared.tools,
        tool_client: false,
        approver,
        budgets: prepared.budgets,
        context_policy: prepared.context_policy,
    };
    let waiting = session.timeline().awaits_decision();
    let outcome = match (waiting, decision) {
        (false, None) => {
            // A run whose interrupted calls run again (on_interrupted: retry) goes on first.
            let again = RunRequest {
                prompt: String::new(),
                system_prompt: request.system_prompt.clone(),
                settings: request.settings.clone(),
                context_policy: request.context_policy.clone(),
                request_id: Arc::clone(&rid),
                ..request
            };
            let earlier = match session.resume_waiting_run(again).await {
                Some(mut run) => Some(
                    AssertUnwindSafe(session.drive(&mut run, cancel))
                        .catch_unwind()
                        .await,
                ),
                None => None,
            };
            match earlier {
                Some(Ok(RunOutcome::Finished)) | None => {
                    AssertUnwindSafe(session.run(request, cancel))
                        .catch_unwind()
                        .await
                }
                Some(other) => other,
            }
        }
        (true, Some(decision)) => {
            let Some(mut run) = session.resume_waiting_run(request).await else {
                return refuse(
                    session,
                    ErrorCode::NoActiveRequest,
                    "nobody can decide here",
                )
                .await;
            };
            let (call, option, message) = decision;
            if !session.decide_call(&mut run, &call, option, &message).await {
                drop(run);
                let message = format!(
                    "no call {call:?} waits for a decision (unknown, or decided already); {}",
                    waiting_calls(&session, &approve_hint)
                );
                return refuse(session, ErrorCode::UnknownToolCall, &message).await;
            }
            AssertUnwindSafe(session.drive(&mut run, cancel))
                .catch_unwind()
                .await
        }
        (true, None) => {
            let message = format!(
                "a run of session {} waits for a person's decision, so it takes no new prompt; {}",
                session.id(),
                waiting_calls(&session, &approve_hint)
            );
            tracing::error!("{message}");
            session
                .emit_error(&rid, ErrorCode::SessionBusy, &message, true)
                .await;
            session.emit_done(&rid, DoneStatus::Waiting).await;
            return (session, Ending::Waiting);
        }
        (false, Some(_)) => {
            let message = format!("no run of session {} waits for a decision", session.id());
            return refuse(session, ErrorCode::NoActiveRequest, &message).await;
        }
    };
    session.emit_snapshot(&rid).await;
    let (done, ending) = match outcome {
        Ok(RunOutcome::Finished) => (DoneStatus::Ok, Ending::Ok),
        Ok(outcome @ RunOutcome::IterationLimit { .. }) => {
            if let Some((code, message)) = outcome.warning() {
                session.emit_error(&rid, code, &message, false).await;
            }
            (DoneStatus::Ok, Ending::Ok)
        }
        // The answer was cut short by a limit the user set to guard their money: a script
        // must be able to tell, so the exit status is 1 (done is ok: the run did finish).
        Ok(outcome @ RunOutcome::BudgetExceeded(_)) => {
            if let Some((code, message)) = outcome.warning() {
                session.emit_error(&rid, code, &message, false).await;
            }
            (DoneStatus::Ok, Ending::Failed)
        }
        Ok(RunOutcome::Stopped) => (DoneStatus::Stopped, Ending::Stopped),
        Ok(RunOutcome::Waiting) => {
            tracing::warn!(
                "the run waits for a person's decision: {}",
                waiting_calls(&session, &approve_hint)
            );
            (DoneStatus::Waiting, Ending::Waiting)
        }
        Ok(RunOutcome::Failed(failure)) => {
            tracing::error!("the run failed: {}", failure.message);
            // A storage failure is reported once, as the terminal error the done brings.
            if !failure.is_storage() {
                session
                    .emit_error(&rid, failure.code, &failure.message, true)
                    .await;
            }
            (DoneStatus::Failed, Ending::Failed)
        }
        Err(panic) => {
            let message = reel_engine::panic_message(panic.as_ref());
            tracing::error!("internal error: {message}");
            session
                .emit_error(&rid, ErrorCode::InternalError, &message, true)
                .await;
            (DoneStatus::Failed, Ending::Failed)
        }
    };
    session.emit_done(&rid, done).await;
    let ending = if session.storage_failed() {
        Ending::Failed
    } else {
        ending
    };
    (session, ending)
}

/// A request the one-shot run cannot take: a terminal error, done `failed`, nothing appended.
async fn refuse(mut session: Session, code: ErrorCode, message: &str) -> (Session, Ending) {
    let none: Arc<str> = Arc::from("");
    tracing::error!("{message}");
    session.emit_error(&none, code, message, true).await;
    session.emit_done(&none, DoneStatus::Failed).await;
    (session, Ending::Failed)
}

/// Starts the command's MCP servers: their tools join `prepared.tools`, and the event that
/// lists them goes on the log.
async fn start_tool_servers(session: &mut Session, prepared: &mut Prepared) -> anyhow::Result<()> {
    let tools = std::mem::replace(&mut prepared.tools, reel_engine::NO_TOOLS.clone());
    let (tools, listed) = crate::tool_servers::connect(tools, &prepared.mcp_servers, None).await?;
    prepared.tools = tools;
    if let Some(listed) = listed {
        session.append(&Arc::from(""), listed).await;
    }
    Ok(())
}

/// Ends a session whose setup failed after it opened: a terminal error and done `failed`.
async fn setup_failed(mut session: Session, error: &anyhow::Error) -> (Session, Ending) {
    let none: Arc<str> = Arc::from("");
    let message = error_chain(error.as_ref());
    tracing::error!("{message}");
    session
        .emit_error(&none, ErrorCode::RunnerInitFailed, &message, true)
        .await;
    session.emit_done(&none, DoneStatus::Failed).await;
    (session, Ending::Failed)
}

/// Serves requests from stdin until it ends, a shutdown request or a signal. `id_fixed`: the
/// session id was set before the first request (a stored session); `resumed`: the session has
/// a history, shown whole in a snapshot before the first request.
async fn serve_stdin(
    mut session: Session,
    prepared: Prepared,
    cancel: CancellationToken,
    id_fixed: bool,
    resumed: bool,
) -> (Session, Ending) {
    let none: Arc<str> = Arc::from("");
    session.close_interrupted_run(&none, &prepared.tools).await;
    let mut prepared = prepared;
    if let Err(error) = start_tool_servers(&mut session, &mut prepared).await {
        return setup_failed(session, &error).await;
    }
    if resumed {
        // A resumed session's first snapshot shows its whole timeline, before any request.
        session.emit_snapshot(&none).await;
    }
    let requests = stdin_rpc::read_requests(tokio::io::stdin(), stdin_rpc::DEFAULT_LINE_LIMIT);
    let config = ServeConfig {
        id_fixed,
        provider: prepared.provider.as_ref(),
        system_prompt: prepared.system_prompt,
        settings: prepared.settings,
        tools: &prepared.tools,
        // A stdin-RPC client has no approval request: `approval: ask` tools are not run.
        approver: None,
        budgets: prepared.budgets,
        context_policy: prepared.context_policy,
        idle: Default::default(),
    };
    let (session, end) = serve(session, config, requests, cancel).await;
    let ending = match end {
        ServeEnd::InputClosed | ServeEnd::Shutdown => Ending::Ok,
        ServeEnd::Interrupted => Ending::Stopped,
        ServeEnd::ReadFailed | ServeEnd::StorageFailed => Ending::Failed,
    };
    (session, ending)
}
