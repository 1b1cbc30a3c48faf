//! `reel run-command`: one prompt, one run, streamed to the chosen outputs.
//!
//! The stream always has the same shape: hello, snapshot, the run's ui events, a final snapshot,
//! a terminal error if the run failed, and done last, also when the setup fails, when the user
//! presses Ctrl-C and when reel itself hits an internal error.

use anyhow::Context;
use reel_engine::error_chain;
use std::{panic::AssertUnwindSafe, path::Path, sync::Arc};

use anyhow::bail;
use futures::FutureExt;
use reel_engine::{
    AnthropicProvider, DoneStatus, ErrorCode, Fanout, HttpConfig, ModelSettings, OpenAiProvider,
    Provider, RunOutcome, RunRequest, Script, ScriptedProvider, ServeConfig, ServeEnd, Session,
    Toolbox, hello_frame, new_id, serve,
};
use reel_sinks::{DebugFileSink, JsonlFrameSink, TimelineDbSink, TurnsDbSink};
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{Invocation, OutputMode, ProviderName, RunCommandArgs},
    command_file::ProviderDefaults,
    outputs::{self, Rendering},
    persistence,
    same_file::{self, InUse},
    signals::SignalWatch,
    stdin_rpc,
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
    /// Stopped by SIGHUP (128 + 1): the terminal or the parent went away.
    pub const HUNG_UP: u8 = 129;
    /// Flags that do not go together (clap uses the same status for its own usage errors).
    pub const USAGE: u8 = 2;
}

/// How a session ended, before outputs are closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Ok,
    Failed,
    /// Stopped by a signal.
    Stopped,
}

/// What a run needs once the command file is understood.
struct Prepared {
    prompt: String,
    system_prompt: Option<String>,
    provider: Box<dyn Provider>,
    settings: ModelSettings,
    tools: Toolbox,
    /// Files the command reads (command file, script, tool programs), which no output may
    /// overwrite.
    reads: Vec<InUse>,
}

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
    let mut session = match opened {
        Some(opened) => {
            let ordinal = opened.log.last_ordinal();
            if let Some(store) = opened.timeline {
                fanout.attach(Box::new(TimelineDbSink::new(
                    store,
                    opened.session_id.clone(),
                    opened.state.clone(),
                    opened.entities_ordinal,
                )));
            }
            if let Some(store) = opened.turns {
                fanout.attach(Box::new(TurnsDbSink::new(
                    store,
                    opened.session_id.clone(),
                    opened.state.context.clone(),
                    ordinal,
                )));
            }
            Session::resume(opened.session_id, fanout, opened.state, opened.log)
        }
        None => Session::new(args.session_id.clone().unwrap_or_else(new_id), fanout),
    };
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
        Ok(prepared) if args.stdin_rpc => {
            serve_stdin(session, prepared, cancel, persisted, args.resume).await
        }
        Ok(prepared) => one_shot(session, prepared, &cancel).await,
    };
    let failures = session.close().await;
    for failure in &failures {
        tracing::error!("output {} failed: {}", failure.sink, failure.message);
    }
    match ending {
        Ending::Ok if failures.is_empty() => exit::OK,
        Ending::Ok | Ending::Failed => exit::FAILED,
        Ending::Stopped => match signals.as_ref().and_then(SignalWatch::received) {
            Some(15) => exit::TERMINATED,
            Some(1) => exit::HUNG_UP,
            _ => exit::INTERRUPTED,
        },
    }
}

/// The stdout sink the flags ask for, and the capabilities hello announces besides the base ones.
fn outputs(args: &crate::cli::RunCommandArgs) -> (Fanout, Vec<&'static str>) {
    let mut fanout = Fanout::new();
    let mut capabilities = Vec::new();
    if args.stdin_rpc {
        capabilities.extend([
            "stdin-rpc",
            "single-session",
            "multi-turn",
            "cancel",
            "client-tools",
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
    let rendering = Rendering::for_output(mode, args.include_backend_events);
    fanout.attach(outputs::sink(rendering, std::io::stdout()));
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

/// One prompt, one run: snapshot, the run, the final snapshot, an error if it failed, done.
async fn one_shot(
    mut session: Session,
    prepared: Prepared,
    cancel: &CancellationToken,
) -> (Session, Ending) {
    let rid: Arc<str> = Arc::from("");
    session.emit_snapshot(&rid).await;
    session.close_interrupted_run(&rid).await;
    let request = RunRequest {
        request_id: Arc::clone(&rid),
        prompt: prepared.prompt,
        system_prompt: prepared.system_prompt,
        settings: prepared.settings,
        provider: prepared.provider.as_ref(),
        tools: &prepared.tools,
        tool_client: false,
    };
    let outcome = AssertUnwindSafe(session.run(request, cancel))
        .catch_unwind()
        .await;
    session.emit_snapshot(&rid).await;
    let (done, ending) = match outcome {
        Ok(RunOutcome::Finished) => (DoneStatus::Ok, Ending::Ok),
        Ok(outcome @ RunOutcome::IterationLimit { .. }) => {
            if let Some((code, message)) = outcome.warning() {
                tracing::warn!("{message}");
                session.emit_error(&rid, code, &message, false).await;
            }
            (DoneStatus::Ok, Ending::Ok)
        }
        Ok(RunOutcome::Stopped) => (DoneStatus::Stopped, Ending::Stopped),
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
    session.close_interrupted_run(&none).await;
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
    };
    let (session, end) = serve(session, config, requests, cancel).await;
    let ending = match end {
        ServeEnd::InputClosed | ServeEnd::Shutdown => Ending::Ok,
        ServeEnd::Interrupted => Ending::Stopped,
        ServeEnd::ReadFailed | ServeEnd::StorageFailed => Ending::Failed,
    };
    (session, ending)
}

/// How the HTTP provider the flags and the command file describe is reached. The API key is
/// read from an environment variable only, and goes nowhere but the request's key header.
fn http_config(
    args: &RunCommandArgs,
    defaults: &ProviderDefaults,
    provider: ProviderName,
    default_base_url: &str,
) -> HttpConfig {
    let key_variable = key_variable(args, defaults, provider);
    let mut config = HttpConfig {
        api_key: std::env::var(&key_variable)
            .ok()
            .filter(|key| !key.is_empty()),
        ..HttpConfig::new(default_base_url)
    };
    if let Some(url) = args.base_url.clone().or_else(|| defaults.base_url.clone()) {
        config.base_url = url;
    }
    if let Some(ms) = args.timeout_ms.or(defaults.timeout_ms) {
        config.idle_timeout = std::time::Duration::from_millis(ms);
    }
    if config.api_key.is_none() {
        tracing::info!(
            "{key_variable} is not set: calling {} without an API key",
            config.secrets().shown_url(&config.base_url)
        );
    }
    config
}

/// Extended thinking is Anthropic's, and its API refuses it together with a set temperature,
/// a forced tool call, or a reply limit no larger than the thinking budget: say so before any
/// call is made.
fn check_thinking(
    settings: &ModelSettings,
    provider: ProviderName,
    tool_choice: reel_engine::ToolChoice,
) -> anyhow::Result<()> {
    let Some(budget) = settings.thinking_budget else {
        return Ok(());
    };
    if provider != ProviderName::Anthropic {
        bail!("a thinking budget is for the anthropic provider (extended thinking)");
    }
    if budget < 1024 {
        return Err(anyhow::anyhow!(
            "the thinking budget is {budget} tokens; Anthropic's minimum is 1024"
        ));
    }
    if settings.temperature.is_some() {
        bail!(
            "extended thinking cannot be combined with a temperature (Anthropic's rule): leave one out"
        );
    }
    if tool_choice == reel_engine::ToolChoice::Required {
        bail!("extended thinking cannot be combined with tool_choice: required (Anthropic's rule)");
    }
    let max_tokens = settings.max_tokens.unwrap_or(4096);
    if max_tokens <= budget {
        return Err(anyhow::anyhow!(
            "max_tokens ({max_tokens}) must be larger than the thinking budget ({budget}): it counts the thinking too"
        ));
    }
    Ok(())
}

/// The environment variable that holds the provider's API key.
fn key_variable(
    args: &RunCommandArgs,
    defaults: &ProviderDefaults,
    provider: ProviderName,
) -> String {
    let default = match provider {
        ProviderName::Anthropic => "ANTHROPIC_API_KEY",
        _ => "OPENAI_API_KEY",
    };
    args.api_key_env
        .clone()
        .or_else(|| defaults.api_key_env.clone())
        .unwrap_or_else(|| default.into())
}

fn prepare(invocation: &Invocation) -> anyhow::Result<Prepared> {
    let command = invocation
        .command
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let args = &invocation.args;
    let prompt = command
        .render_prompt(&invocation.variables)
        .context("prompt")?;
    let defaults = &command.provider;
    let provider_name = match (args.provider, defaults.name.as_deref()) {
        (Some(name), _) => name,
        (None, None | Some("scripted")) => ProviderName::Scripted,
        (None, Some("openai")) => ProviderName::Openai,
        (None, Some("anthropic")) => ProviderName::Anthropic,
        (None, Some(other)) => {
            return Err(anyhow::anyhow!(
                "the command file asks for provider {other:?}, which this build does not have (available: scripted, openai, anthropic)"
            ));
        }
    };
    let script_path = match (&args.script, &defaults.script) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(path)) => Some(command.resolve(path)),
        (None, None) => None,
    };
    let provider: Box<dyn Provider> = match provider_name {
        ProviderName::Scripted => match &script_path {
            Some(path) => Box::new(ScriptedProvider::new(Script::load(path)?)),
            None => Box::new(ScriptedProvider::echo()),
        },
        ProviderName::Openai => {
            let config = http_config(
                args,
                defaults,
                provider_name,
                OpenAiProvider::DEFAULT_BASE_URL,
            );
            Box::new(OpenAiProvider::new(config)?)
        }
        ProviderName::Anthropic => {
            let config = http_config(
                args,
                defaults,
                provider_name,
                AnthropicProvider::DEFAULT_BASE_URL,
            );
            Box::new(AnthropicProvider::new(config)?)
        }
    };
    let settings = ModelSettings {
        model: args
            .model
            .clone()
            .or_else(|| defaults.model.clone())
            .unwrap_or_default(),
        temperature: args.temperature.or(defaults.temperature),
        max_tokens: args.max_tokens.or(defaults.max_tokens),
        max_tokens_field: defaults.max_tokens_field,
        thinking_budget: args.thinking_budget.or(defaults.thinking_budget_tokens),
        pricing: defaults.pricing,
        stop: defaults.stop.clone(),
        tool_call_prefill: defaults.tool_call_prefill.clone(),
    };
    check_thinking(&settings, provider_name, command.tool_choice)?;
    // Tools never see the API key, whichever provider runs.
    let key = key_variable(args, defaults, provider_name);
    let tools = crate::toolbox::build(command, args.max_iterations, &key)?;
    let mut reads = vec![InUse::new(&args.command_file, "the command file")];
    reads.extend(script_path.map(|path| InUse::new(path, "the script")));
    reads.extend(
        crate::toolbox::programs(command)
            .into_iter()
            .map(|(name, program)| InUse::new(program, format!("tool {name}'s program"))),
    );
    Ok(Prepared {
        prompt,
        system_prompt: command.system_prompt.clone(),
        provider,
        settings,
        tools,
        reads,
    })
}
