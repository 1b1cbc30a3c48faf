//! `reel run-command`: one prompt, one run, streamed to the chosen outputs.
//!
//! The stream always has the same shape: hello, snapshot, the run's ui events, a final snapshot,
//! a terminal error if the run failed, and done last, also when the setup fails, when the user
//! presses Ctrl-C and when reel itself hits an internal error.

use std::{panic::AssertUnwindSafe, sync::Arc};

use futures::FutureExt;
use reel_engine::{
    Fanout, ModelSettings, Provider, RunOutcome, RunRequest, Script, ScriptedProvider, Session,
    done_status, new_id,
};
use reel_proto::rpc::{self, HelloFrame};
use reel_sinks::{DebugFileSink, DocumentFormat, ResultDocumentSink, StdoutJsonlSink, TextSink};
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{Invocation, OutputMode, ProviderName},
    signals::SignalWatch,
};

/// Exit statuses of `run-command`.
pub mod exit {
    pub const OK: u8 = 0;
    /// The run failed, the setup failed, or an output failed.
    pub const FAILED: u8 = 1;
    /// Stopped by SIGINT (128 + 2), as shells report it.
    pub const INTERRUPTED: u8 = 130;
    /// Stopped by SIGTERM (128 + 15).
    pub const TERMINATED: u8 = 143;
}

/// What a run needs once the command file is understood.
struct Prepared {
    prompt: String,
    system_prompt: Option<String>,
    provider: Box<dyn Provider>,
    settings: ModelSettings,
}

pub async fn run(invocation: Invocation) -> u8 {
    let cancel = CancellationToken::new();
    let signals = match SignalWatch::install(cancel.clone()) {
        Ok(signals) => Some(signals),
        Err(error) => {
            tracing::warn!("cannot watch for signals: {error}");
            None
        }
    };
    let args = &invocation.args;
    let mut fanout = Fanout::new();
    let mut capabilities = vec!["ui-events", "snapshot", "done"];
    if args.include_backend_events {
        capabilities.push("backend-events");
    }
    match (args.frames_on_stdout(), args.output) {
        (true, _) => fanout.attach(Box::new(StdoutJsonlSink::stdout(
            args.include_backend_events,
        ))),
        (false, OutputMode::Json) => {
            fanout.attach(Box::new(ResultDocumentSink::stdout(DocumentFormat::Json)))
        }
        (false, OutputMode::Yaml) => {
            fanout.attach(Box::new(ResultDocumentSink::stdout(DocumentFormat::Yaml)))
        }
        (false, _) => fanout.attach(Box::new(TextSink::stdout())),
    }
    let mut setup_error = None;
    if let Some(path) = &args.debug_events_jsonl {
        match DebugFileSink::create(path, args.include_backend_events) {
            Ok(sink) => {
                fanout.attach(Box::new(sink));
                capabilities.push("debug-log");
            }
            Err(error) => {
                setup_error = Some(format!(
                    "cannot create debug file {}: {error}",
                    path.display()
                ))
            }
        }
    }
    let prepared = match setup_error {
        Some(error) => Err(error),
        None => prepare(&invocation),
    };

    let mut session = Session::new(new_id(), fanout);
    let rid: Arc<str> = Arc::from("");
    let hello = HelloFrame {
        protocol: rpc::PROTOCOL.into(),
        server: format!("reel/{}", env!("CARGO_PKG_VERSION")),
        capabilities: capabilities.into_iter().map(String::from).collect(),
        protocol_version: rpc::PROTOCOL_VERSION,
    };
    session.emit_hello(&rid, hello).await;
    session.emit_snapshot(&rid).await;

    let mut status = exit::OK;
    match prepared {
        Err(error) => {
            tracing::error!("{error}");
            session
                .emit_error(&rid, "runner_init_failed", &error, true)
                .await;
            session.emit_done(&rid, done_status::FAILED).await;
            status = exit::FAILED;
        }
        Ok(prepared) => {
            let request = RunRequest {
                request_id: Arc::clone(&rid),
                prompt: prepared.prompt,
                system_prompt: prepared.system_prompt,
                settings: prepared.settings,
                provider: prepared.provider.as_ref(),
                cancel,
            };
            let outcome = AssertUnwindSafe(session.run(request)).catch_unwind().await;
            session.emit_snapshot(&rid).await;
            let done = match outcome {
                Ok(RunOutcome::Finished) => done_status::OK,
                Ok(RunOutcome::Stopped) => {
                    status = match signals.as_ref().and_then(SignalWatch::received) {
                        Some(15) => exit::TERMINATED,
                        _ => exit::INTERRUPTED,
                    };
                    done_status::STOPPED
                }
                Ok(RunOutcome::Failed(error)) => {
                    tracing::error!("the run failed: {error}");
                    session.emit_error(&rid, "run_failed", &error, true).await;
                    status = exit::FAILED;
                    done_status::FAILED
                }
                Err(panic) => {
                    let message = panic_message(panic.as_ref());
                    tracing::error!("internal error: {message}");
                    session
                        .emit_error(&rid, "internal_error", &message, true)
                        .await;
                    status = exit::FAILED;
                    done_status::FAILED
                }
            };
            session.emit_done(&rid, done).await;
        }
    }

    let failures = session.close().await;
    for failure in &failures {
        tracing::error!("output {} failed: {}", failure.sink, failure.message);
    }
    if !failures.is_empty() && status == exit::OK {
        status = exit::FAILED;
    }
    status
}

fn prepare(invocation: &Invocation) -> Result<Prepared, String> {
    let command = invocation.command.as_ref().map_err(ToString::to_string)?;
    let args = &invocation.args;
    let prompt = command
        .render_prompt(&invocation.variables)
        .map_err(|e| format!("prompt: {e}"))?;
    let defaults = &command.provider;
    let provider_name = match (args.provider, defaults.name.as_deref()) {
        (Some(ProviderName::Scripted), _) | (None, None | Some("scripted")) => {
            ProviderName::Scripted
        }
        (None, Some(other)) => {
            return Err(format!(
                "the command file asks for provider {other:?}, which this build does not have (available: scripted)"
            ));
        }
    };
    let script_path = match (&args.script, &defaults.script) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(path)) => Some(command.resolve(path)),
        (None, None) => None,
    };
    let provider: Box<dyn Provider> = match provider_name {
        ProviderName::Scripted => match script_path {
            Some(path) => Box::new(ScriptedProvider::new(
                Script::load(&path).map_err(|e| e.to_string())?,
            )),
            None => Box::new(ScriptedProvider::echo()),
        },
    };
    let settings = ModelSettings {
        model: args
            .model
            .clone()
            .or_else(|| defaults.model.clone())
            .unwrap_or_default(),
        temperature: defaults.temperature,
        max_tokens: defaults.max_tokens,
    };
    Ok(Prepared {
        prompt,
        system_prompt: command.system_prompt.clone(),
        provider,
        settings,
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
