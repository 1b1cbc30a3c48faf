//! `reel serve`: many sessions in one process over HTTP, Server-Sent Events and WebSocket
//! (see the `reel-server` crate). Every session runs the one command file `--command` names;
//! this module is what the server asks for sessions: it opens them in the timeline database,
//! with their command file prepared as `run-command --stdin-rpc --session-id ID --resume`
//! would.

use std::{
    collections::BTreeMap,
    io::{BufWriter, Seek, SeekFrom},
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use clap::{Args, Parser};
use indicatif::ProgressBar;
use reel_engine::{Commit, Fanout, LogStore, SessionCatalog, Sink, StoreError, error_chain};
use reel_server::{
    ExportFormat, OpenedSession, RunSetup, ServeOptions, SessionSource, SourceError,
};
use reel_storage::{Access, Location, TimelineStore, open_timeline};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{Invocation, RunCommandArgs},
    command_file::CommandFile,
    inspect::{export::Format, fork, render},
    outputs,
    persistence::{self, Stores},
    prepare::prepare,
    run_command::exit,
    signals::SignalWatch,
};

/// `reel serve` flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen, e.g. 127.0.0.1:8080 (port 0 takes a free one; the address is printed
    /// on stderr). Without --token-env only a loopback address is allowed.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The command file every session runs (its provider, system prompt and tools).
    #[arg(long, value_name = "FILE")]
    pub command: PathBuf,
    /// The SQLite timeline database that holds the sessions (created if missing).
    #[arg(long, value_name = "PATH", required_unless_present = "timeline_dsn")]
    pub timeline_db: Option<PathBuf>,
    /// A PostgreSQL timeline database instead, e.g. postgres://user@host/db.
    #[arg(long, value_name = "DSN", conflicts_with = "timeline_db")]
    pub timeline_dsn: Option<String>,
    /// The environment variable holding the bearer token every route but /healthz needs.
    #[arg(long, value_name = "NAME")]
    pub token_env: Option<String>,
    /// On SIGTERM or SIGINT, how long running runs may go on before they are stopped (e.g.
    /// 10s, 2m; 0s stops them at once).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// A session nobody has used for this long (no request, no frame, no subscriber) is
    /// unloaded, its lease released and its memory freed; it reloads when used again.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
}

pub async fn run(args: ServeArgs) -> u8 {
    match serve(args).await {
        Ok(()) => exit::OK,
        Err(error) => {
            tracing::error!("{}", error_chain(error.as_ref()));
            exit::FAILED
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = match &args.token_env {
        Some(name) => Some(
            std::env::var(name)
                .ok()
                .filter(|token| !token.trim().is_empty())
                .with_context(|| format!("--token-env {name}: the variable is not set or empty"))?,
        ),
        None => None,
    };
    let sessions = CommandSessions::open(&args).await?;
    let stop = CancellationToken::new();
    let _signals = SignalWatch::install(stop.clone()).context("cannot watch for signals")?;
    let options = ServeOptions {
        listen: args.listen,
        token,
        grace: args.grace,
        idle_timeout: args.idle_timeout,
    };
    let stopped = stop.clone();
    reel_server::serve(
        options,
        Arc::new(sessions),
        async move { stopped.cancelled().await },
        |address| tracing::info!("reel serve: listening on http://{address}"),
    )
    .await?;
    tracing::info!("reel serve: stopped");
    Ok(())
}

/// Sessions kept in one timeline database, each running one command file.
struct CommandSessions {
    /// The first connection: others are opened beside it (never by opening the file again,
    /// which would drop this process's locks on it).
    base: Mutex<TimelineStore>,
    shown: String,
    command: PathBuf,
    /// `run-command`'s flags for a served session, but its id.
    template: RunCommandArgs,
}

/// What a new connection is for.
#[derive(Clone, Copy)]
enum Connection {
    Reading,
    Writing,
}

/// `run-command`'s flags, parsed as clap parses them (for their defaults).
#[derive(Parser)]
struct RunCommandLine {
    #[command(flatten)]
    args: RunCommandArgs,
}

impl CommandSessions {
    async fn open(args: &ServeArgs) -> anyhow::Result<Self> {
        let file = CommandFile::load(&args.command).map_err(|e| anyhow::anyhow!("{e}"))?;
        let location = match (&args.timeline_dsn, &args.timeline_db) {
            (Some(dsn), _) => Location::dsn(dsn)?,
            (None, Some(path)) => Location::path(path),
            (None, None) => unreachable!("clap requires a database"),
        };
        let base = open_timeline(&location, Access::ReadWrite).await?;
        let template = RunCommandLine::try_parse_from([
            "run-command".as_ref(),
            args.command.as_os_str(),
            "--rpc".as_ref(),
            "--stdin-rpc".as_ref(),
            "--resume".as_ref(),
            // Each session's own id replaces it.
            "--session-id".as_ref(),
            "served".as_ref(),
        ])?
        .args;
        let sessions = Self {
            base: Mutex::new(base),
            shown: location.shown(),
            command: args.command.clone(),
            template,
        };
        // The command is checked now, not at the first session.
        prepare(&sessions.invocation("check", file))?;
        Ok(sessions)
    }

    /// A new connection to the database beside the first.
    async fn beside(&self, kind: Connection) -> Result<TimelineStore, SourceError> {
        let base = self.base.lock().await;
        match kind {
            Connection::Reading => base.reader().await,
            Connection::Writing => base.sibling().await,
        }
        .map_err(failed)
    }

    /// The error for a session `id` that is there already.
    fn exists(&self, id: &str) -> SourceError {
        SourceError::Exists(format!("session {id:?} already exists in {}", self.shown))
    }

    /// The ordinal a view of session `id` is taken at: `at`, or its last.
    async fn ordinal_in(
        &self,
        store: &mut TimelineStore,
        id: &str,
        at: Option<u64>,
    ) -> Result<u64, SourceError> {
        let summary = store
            .summary(id)
            .await
            .map_err(failed)?
            .ok_or_else(|| SourceError::NotFound(format!("there is no session {id:?}")))?;
        match at {
            None => Ok(summary.events),
            Some(at) if at <= summary.events => Ok(at),
            Some(at) => Err(SourceError::OutOfRange(format!(
                "session {id:?} has {} events; there is no ordinal {at}",
                summary.events
            ))),
        }
    }

    /// A served session's `run-command` invocation.
    fn invocation(&self, id: &str, command: CommandFile) -> Invocation {
        let mut args = self.template.clone();
        args.session_id = Some(id.to_owned());
        let variables: BTreeMap<String, String> = command
            .variables
            .iter()
            .filter_map(|v| Some((v.name.clone(), v.default.clone()?)))
            .collect();
        Invocation {
            args,
            command: Ok(command),
            variables,
        }
    }
}

#[async_trait::async_trait]
impl SessionSource for CommandSessions {
    async fn create(&self, id: &str) -> Result<(), SourceError> {
        let mut store = self.beside(Connection::Writing).await?;
        // The lease first: of two creations of one id, the second then finds the first's. A
        // session someone holds exists (or is being created).
        let exists = || self.exists(id);
        match store.lease(id).await {
            Err(StoreError::Busy(_)) => return Err(exists()),
            other => other.map_err(failed)?,
        }
        let created = match store.exists(id).await.map_err(failed) {
            Ok(true) => Err(exists()),
            // A commit of nothing makes the session's row: it exists before its first event.
            Ok(false) => {
                let empty = Commit {
                    entities_ordinal: Some(0),
                    ..Commit::default()
                };
                store.commit(id, &empty).await.map_err(failed)
            }
            Err(error) => Err(error),
        };
        store.release(id).await.map_err(failed)?;
        created
    }

    async fn open(&self, id: &str, frames: Box<dyn Sink>) -> Result<OpenedSession, SourceError> {
        let command =
            CommandFile::load(&self.command).map_err(|e| SourceError::Failed(e.to_string()))?;
        let invocation = self.invocation(id, command);
        let prepared = prepare(&invocation).map_err(anyhow_failed)?;
        let stores = Stores {
            timeline: Some(self.beside(Connection::Writing).await?),
            turns: None,
            shown: self.shown.clone(),
        };
        let opened = persistence::open_in(stores, id.to_owned(), true, false)
            .await
            .map_err(anyhow_failed)?;
        let mut fanout = Fanout::new();
        fanout.attach(frames);
        let session = persistence::session_of(opened, fanout);
        let runs = RunSetup {
            provider: prepared.provider,
            system_prompt: prepared.system_prompt,
            settings: prepared.settings,
            tools: prepared.tools,
            budgets: prepared.budgets,
            context_policy: prepared.context_policy,
        };
        Ok(OpenedSession { session, runs })
    }

    async fn export(
        &self,
        id: &str,
        format: ExportFormat,
        at: Option<u64>,
    ) -> Result<std::fs::File, SourceError> {
        let mut store = self.beside(Connection::Reading).await?;
        let at = self.ordinal_in(&mut store, id, at).await?;
        let mut file = tempfile::tempfile()
            .map_err(|e| SourceError::Failed(format!("cannot make a temporary file: {e}")))?;
        let writer = file
            .try_clone()
            .map_err(|e| SourceError::Failed(format!("cannot write a temporary file: {e}")))?;
        let sink = outputs::sink(Format::from(format).rendering(), BufWriter::new(writer));
        let bar = ProgressBar::hidden();
        render(&mut store, id, at, sink, (bar, "the export"))
            .await
            .map_err(anyhow_failed)?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| SourceError::Failed(format!("cannot read a temporary file: {e}")))?;
        Ok(file)
    }

    async fn fork(&self, id: &str, at: Option<u64>, new_id: &str) -> Result<(), SourceError> {
        let mut reader = self.beside(Connection::Reading).await?;
        let at = self.ordinal_in(&mut reader, id, at).await?;
        let mut writer = self.beside(Connection::Writing).await?;
        if writer.exists(new_id).await.map_err(failed)? {
            return Err(self.exists(new_id));
        }
        match fork::copy_leased(&mut reader, &mut writer, id, new_id, at).await {
            Err(error) if matches!(error.downcast_ref(), Some(StoreError::Busy(_))) => {
                Err(self.exists(new_id))
            }
            copied => copied.map_err(anyhow_failed),
        }
    }

    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SourceError> {
        Ok(Box::new(self.beside(Connection::Reading).await?))
    }
}

fn failed(error: StoreError) -> SourceError {
    match error {
        StoreError::Busy(message) => SourceError::Busy(message),
        StoreError::NotFound(message) => SourceError::NotFound(message),
        other => SourceError::Failed(error_chain(&other)),
    }
}

fn anyhow_failed(error: anyhow::Error) -> SourceError {
    match error.downcast::<StoreError>() {
        Ok(store) => failed(store),
        Err(other) => SourceError::Failed(error_chain(other.as_ref())),
    }
}

impl From<ExportFormat> for Format {
    fn from(format: ExportFormat) -> Self {
        match format {
            ExportFormat::Jsonl => Format::Jsonl,
            ExportFormat::Markdown => Format::Markdown,
            ExportFormat::Html => Format::Html,
            ExportFormat::Turns => Format::Turns,
        }
    }
}
