//! `reel acp`: reel as an Agent Client Protocol agent on stdin/stdout (see the `reel-acp`
//! crate). Its sessions are [`CommandSessions`], as `reel serve`'s are: each runs the one
//! command file given, prepared as `run-command --stdin-rpc --session-id ID --resume` would
//! with the `run-command` flags given, in the timeline database those flags name (the XDG
//! data folder's by default, as for `--session-id`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use clap::Parser;
use reel_acp::{AgentSessions, SessionsError, run_agent};
use reel_engine::{InlineSink, OpenedSession, SessionCatalog, error_chain};
use reel_mcp::McpServerConfig;
use reel_server::{SessionConfig, SessionSource, SourceError};
use tokio_util::sync::CancellationToken;

use crate::{
    acp_stdio, exit,
    hosting::{CommandSessions, Commands, RunCommandLine, Setup},
    persistence::{self, Locations},
    signals::SignalWatch,
};

/// `reel acp` flags.
#[derive(clap::Args, Debug)]
pub struct AcpArgs {
    /// A session nobody has used for this long (no prompt running) is unloaded, its lease
    /// released and its memory freed; its next prompt loads it again.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// The command file every session runs: its provider, system prompt and tools.
    pub command_file: PathBuf,
    /// `run-command`'s flags for the sessions, e.g. --timeline-db PATH, --provider openai,
    /// --model NAME (not those of one run's output: --output, --rpc, --session-id, ...).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "RUN-COMMAND FLAGS"
    )]
    pub flags: Vec<String>,
}

/// `run-command` flags that say how one run's output goes or which session it is: an agent's
/// sessions and output are the client's.
const NOT_AGENT_FLAGS: &[&str] = &[
    "--output",
    "--rpc",
    "--stdin-rpc",
    "--include-backend-events",
    "--debug-events-jsonl",
    "--session-id",
    "--resume",
    "--steal-lease",
];

pub async fn run(args: AcpArgs) -> u8 {
    match serve_agent(args).await {
        Ok(()) => exit::OK,
        Err(error) => {
            tracing::error!("{}", error_chain(error.as_ref()));
            exit::FAILED
        }
    }
}

async fn serve_agent(args: AcpArgs) -> anyhow::Result<()> {
    let sessions = CommandSessions::open(setup(&args)?)
        .await
        .with_context(|| args.command_file.display().to_string())?;
    let stop = CancellationToken::new();
    let _signals = SignalWatch::install(stop.clone()).context("cannot watch for signals")?;
    let sessions: Arc<dyn AgentSessions> = Arc::new(AcpSessions(sessions));
    tracing::info!("reel acp: ready on stdin/stdout");
    let (transport, written) = acp_stdio::stdio();
    let served = run_agent(
        sessions,
        transport,
        stop.cancelled_owned(),
        args.idle_timeout,
    )
    .await;
    // Every answer is on stdout before the process ends.
    let _ = written.await;
    served.map_err(|error| anyhow::anyhow!("the ACP connection failed: {error}"))?;
    tracing::info!("reel acp: stopped");
    Ok(())
}

fn setup(args: &AcpArgs) -> anyhow::Result<Setup> {
    if let Some(flag) = args.flags.iter().find(|flag| {
        NOT_AGENT_FLAGS
            .iter()
            .any(|no| flag.as_str() == *no || flag.starts_with(&format!("{no}=")))
    }) {
        anyhow::bail!(
            "{flag} is not a flag of reel acp: the client chooses sessions and reads their output"
        );
    }
    let fixed = ["--rpc", "--stdin-rpc", "--resume", "--session-id", "acp"];
    let line = std::iter::once("run-command".to_owned())
        .chain(std::iter::once(args.command_file.display().to_string()))
        .chain(args.flags.iter().cloned())
        .chain(fixed.iter().map(|s| (*s).to_owned()));
    let template = RunCommandLine::try_parse_from(line)?.args;
    let Some(Locations {
        timeline: Some(location),
        turns,
    }) = persistence::locations(&template)?
    else {
        anyhow::bail!(
            "reel acp keeps its sessions in a timeline database: add --timeline-db PATH or --timeline-dsn DSN (or neither, for the default one)"
        );
    };
    tracing::info!("reel acp: sessions in {}", location.shown());
    Ok(Setup {
        commands: Commands {
            default: Some(args.command_file.clone()),
            folder: None,
        },
        location,
        turns,
        template,
    })
}

/// The agent's view of [`CommandSessions`].
struct AcpSessions(CommandSessions);

#[async_trait::async_trait]
impl AgentSessions for AcpSessions {
    async fn create(&self, id: &str, cwd: &Path) -> Result<(), SessionsError> {
        let config = SessionConfig {
            command: None,
            variables: BTreeMap::new(),
        };
        self.0
            .create_in(id, &config, Some(cwd))
            .await
            .map_err(sessions_error)
    }

    async fn open(
        &self,
        id: &str,
        updates: Box<dyn InlineSink>,
        servers: &[McpServerConfig],
    ) -> Result<OpenedSession, SessionsError> {
        let mut catalog = self.catalog().await?;
        let stored = catalog
            .summary(id)
            .await
            .map_err(|e| SessionsError::Failed(error_chain(&e)))?;
        if stored.is_none() {
            return Err(SessionsError::NotFound(format!(
                "there is no session {id:?} in the timeline database"
            )));
        }
        self.0
            .open_with(id, updates, servers)
            .await
            .map_err(sessions_error)
    }

    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SessionsError> {
        self.0.catalog().await.map_err(sessions_error)
    }

    async fn fork(&self, id: &str, new_id: &str) -> Result<(), SessionsError> {
        SessionSource::fork(&self.0, id, None, new_id)
            .await
            .map_err(sessions_error)
    }

    async fn cwd(&self, id: &str) -> Result<Option<PathBuf>, SessionsError> {
        self.0.recorded_cwd(id).await.map_err(sessions_error)
    }
}

fn sessions_error(error: SourceError) -> SessionsError {
    match error {
        SourceError::NotFound(message) | SourceError::Pruned(message) => {
            SessionsError::NotFound(message)
        }
        SourceError::Busy(message) => SessionsError::Busy(message),
        other => SessionsError::Failed(other.to_string()),
    }
}
