//! The sessions a `reel serve` or `reel acp` process runs: kept in one timeline database, each
//! running a command file prepared as `run-command --stdin-rpc --session-id ID --resume` would.

use std::{
    collections::BTreeMap,
    io::{BufWriter, Seek, SeekFrom},
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::Parser;
use indicatif::ProgressBar;
use reel_engine::{
    Commit, EventLog, Fanout, InlineSink, LogStore, OpenedSession, RunSetup, SessionCatalog,
    StoreError, error_chain,
};
use reel_server::{ExportFormat, SessionConfig, SessionSource, SourceError};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

use super::{
    commands::{self, Commands},
    shared_connection::SharedConnection,
};
use crate::{
    command_file::CommandFile,
    outputs,
    persistence::{self, Stores},
    prepare::prepare,
    run_args::{Invocation, RunCommandArgs},
    stored::{Format, check_fork_point, copy_leased, render, resolve_at},
    tool_servers,
};
use reel_mcp::McpServerConfig;

/// Sessions kept in one timeline database, each running one of the server's command files.
pub struct CommandSessions {
    /// The database's writing connection: every session writes through it, in turns (see
    /// [`TimelineStore::shared`]), and reads through the one reading connection beside it.
    base: SharedConnection,
    /// The turns database's, when there is one.
    turns: Option<SharedConnection>,
    shown: String,
    commands: Commands,
    /// `run-command`'s flags for a served session, but its id and command file.
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
pub struct RunCommandLine {
    #[command(flatten)]
    pub args: RunCommandArgs,
}

/// What a process's sessions are: the command files they may run, the databases, and
/// `run-command`'s flags for each (but its id and command file).
pub struct Setup {
    pub commands: Commands,
    pub location: Location,
    pub turns: Option<Location>,
    pub template: RunCommandArgs,
}

impl CommandSessions {
    pub async fn open(setup: Setup) -> anyhow::Result<Self> {
        let Setup {
            mut commands,
            location,
            turns,
            template,
        } = setup;
        // Absolute, so that a tool's path relative to its command file is found from any
        // working directory a session's tools run in (an editor's, in `reel acp`).
        commands.default = commands.default.map(absolute).transpose()?;
        commands.folder = commands.folder.map(absolute).transpose()?;
        let all = commands
            .all()
            .with_context(|| format!("--commands {:?}", commands.folder))?;
        let base = open_timeline(&location, Access::ReadWrite).await?;
        let turns = match turns {
            // One SQLite file for both: a connection beside the first, never a second open
            // (which would drop this process's locks on it).
            Some(at) if persistence::same_sqlite_file(&at, Some(&location)) => {
                Some(SharedConnection::new(base.sibling().await?, at))
            }
            Some(at) => Some(SharedConnection::new(
                open_timeline(&at, Access::ReadWrite).await?,
                at,
            )),
            None => None,
        };
        let sessions = Self {
            turns,
            shown: location.shown(),
            base: SharedConnection::new(base, location),
            commands,
            template,
        };
        // Every command is checked now, not at its first session.
        for path in all {
            let file = CommandFile::load(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
            let defaults = file
                .variables
                .iter()
                .map(|v| (v.name.clone(), v.default.clone().unwrap_or_default()))
                .collect();
            prepare(&sessions.invocation("check", &path, file, defaults))
                .with_context(|| path.display().to_string())?;
        }
        Ok(sessions)
    }

    /// A store on the server's reading or writing connection, connected again when it no
    /// longer answers.
    async fn beside(&self, kind: Connection) -> Result<TimelineStore, SourceError> {
        match kind {
            Connection::Writing => self.base.store().await,
            Connection::Reading => self.base.reader().await,
        }
    }

    /// A store on the writing connection (see [`SharedConnection::store`]).
    pub async fn store(&self) -> Result<TimelineStore, SourceError> {
        self.base.store().await
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
        let Some(summary) = store.summary(id).await.map_err(failed)? else {
            return Err(missing(store, id).await);
        };
        resolve_at(&summary, at).map_err(|e| SourceError::OutOfRange(e.to_string()))
    }

    /// Stores a new session `id` that runs `config`, its command tools in `cwd` (the
    /// process's own directory for `None`).
    pub async fn create_in(
        &self,
        id: &str,
        config: &SessionConfig,
        cwd: Option<&Path>,
    ) -> Result<(), SourceError> {
        let chosen = self.commands.choose(config)?;
        let mut store = self.beside(Connection::Writing).await?;
        // A session that is there is refused before its lease is touched.
        if store.exists(id).await.map_err(failed)? {
            return Err(self.exists(id));
        }
        // Then the lease: of two creations of one id, the second then finds the first's. A
        // session someone holds exists (or is being created). Taken twice in this process
        // (a session loaded meanwhile), its release leaves the first holder's.
        let exists = || self.exists(id);
        match store.lease(id).await {
            Err(StoreError::Busy(_)) => return Err(exists()),
            other => other.map_err(failed)?,
        }
        let created = match store.exists(id).await.map_err(failed) {
            Ok(true) => Err(exists()),
            // Its first event is what it runs: it exists before its first prompt.
            Ok(false) => {
                let first =
                    EventLog::new().append(commands::configured_event(config, &chosen, cwd));
                let commit = Commit {
                    events: vec![first],
                    ..Commit::default()
                };
                store.commit(id, &commit).await.map_err(failed)
            }
            Err(error) => Err(error),
        };
        store.release(id).await.map_err(failed)?;
        created
    }

    /// Opens the stored session `id` for writing, with `frames` among its sinks, connected to
    /// its command's MCP servers and to `more_servers` (an editor's).
    pub async fn open_with(
        &self,
        id: &str,
        frames: Box<dyn InlineSink>,
        more_servers: &[McpServerConfig],
    ) -> Result<OpenedSession, SourceError> {
        let mut store = self.beside(Connection::Writing).await?;
        let recorded = match commands::recorded(&mut store, id).await {
            Err(SourceError::NotFound(_)) => return Err(missing(&mut store, id).await),
            other => other?,
        };
        let chosen = self.commands.choose(&recorded.config)?;
        let invocation = self.invocation(id, &chosen.path, chosen.file, chosen.variables);
        let prepared = prepare(&invocation).map_err(anyhow_failed)?;
        let turns = match &self.turns {
            Some(turns) => Some(turns.store().await?),
            None => None,
        };
        let stores = Stores {
            timeline: Some(store),
            turns,
            shown: self.shown.clone(),
        };
        let opened = persistence::open_in(stores, id.to_owned(), true, false)
            .await
            .map_err(anyhow_failed)?;
        // Its sinks run on its writer's task: an idle session holds no task.
        let mut fanout = Fanout::on_writer_task();
        fanout.attach_inline(frames);
        let mut reader = opened.archive.as_ref().map(TimelineStore::shared);
        let stored = opened.log.last_ordinal();
        let mut session = persistence::session_of(opened, fanout);
        for uri in &prepared.sinks {
            let store = reader.as_mut().map(|s| s as &mut dyn SessionCatalog);
            let committed = session.store_committed();
            let sink = uri.start(id, store, stored, committed).await;
            session.attach(sink.map_err(anyhow_failed)?);
        }
        let tools = match &recorded.cwd {
            Some(cwd) => prepared.tools.in_dir(cwd),
            None => prepared.tools,
        };
        let servers: Vec<McpServerConfig> = prepared
            .mcp_servers
            .into_iter()
            .chain(more_servers.iter().cloned())
            .collect();
        let (tools, listed) = tool_servers::connect(tools, &servers, recorded.cwd.as_deref())
            .await
            .map_err(anyhow_failed)?;
        let runs = RunSetup {
            // The agent (reel acp) sets its own; a served session cannot ask anyone.
            approver: None,
            provider: prepared.provider,
            system_prompt: prepared.system_prompt,
            settings: prepared.settings,
            tools,
            budgets: prepared.budgets,
            context_policy: prepared.context_policy,
            announcements: listed.into_iter().collect(),
        };
        Ok(OpenedSession { session, runs })
    }

    /// The working directory session `id` was created with, if it recorded one.
    pub async fn recorded_cwd(&self, id: &str) -> Result<Option<PathBuf>, SourceError> {
        let mut reader = self.beside(Connection::Reading).await?;
        Ok(commands::recorded(&mut reader, id).await?.cwd)
    }

    /// A served session's `run-command` invocation.
    fn invocation(
        &self,
        id: &str,
        path: &std::path::Path,
        command: CommandFile,
        variables: BTreeMap<String, String>,
    ) -> Invocation {
        let mut args = self.template.clone();
        args.session_id = Some(id.to_owned());
        args.command_file = path.to_path_buf();
        Invocation {
            args,
            command: Ok(command),
            variables,
        }
    }
}

#[async_trait::async_trait]
impl SessionSource for CommandSessions {
    async fn create(&self, id: &str, config: &SessionConfig) -> Result<(), SourceError> {
        self.create_in(id, config, None).await
    }

    async fn open(
        &self,
        id: &str,
        frames: Box<dyn InlineSink>,
    ) -> Result<OpenedSession, SourceError> {
        self.open_with(id, frames, &[]).await
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
        check_fork_point(at).map_err(|e| SourceError::OutOfRange(e.to_string()))?;
        let mut writer = self.beside(Connection::Writing).await?;
        if writer.exists(new_id).await.map_err(failed)? {
            return Err(self.exists(new_id));
        }
        match copy_leased(&mut reader, &mut writer, id, new_id, at).await {
            Err(error) if matches!(error.downcast_ref(), Some(StoreError::Busy(_))) => {
                Err(self.exists(new_id))
            }
            copied => copied.map_err(anyhow_failed),
        }
    }

    async fn catalog(&self) -> Result<Box<dyn SessionCatalog>, SourceError> {
        Ok(Box::new(self.beside(Connection::Reading).await?))
    }

    async fn node_writing(&self, id: &str) -> Result<Option<String>, SourceError> {
        self.store().await?.node_writing(id).await.map_err(failed)
    }

    async fn prune_session(&self, id: &str) -> Result<(), SourceError> {
        let mut store = self.beside(Connection::Writing).await?;
        store.lease(id).await.map_err(failed)?;
        let pruned = store.prune(id).await;
        let released = store.release(id).await;
        pruned.map_err(failed)?;
        released.map_err(failed)
    }
}

/// Why session `id` is not in `store`: pruned for its age, or never there.
async fn missing(store: &mut TimelineStore, id: &str) -> SourceError {
    match store.pruned_at(id).await {
        Ok(Some(at)) => SourceError::Pruned(reel_server::pruned_message(id, at)),
        Ok(None) => SourceError::NotFound(format!("there is no session {id:?}")),
        Err(error) => failed(error),
    }
}

pub(super) fn failed(error: StoreError) -> SourceError {
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

/// `path` made absolute against this process's working directory.
fn absolute(path: PathBuf) -> anyhow::Result<PathBuf> {
    std::path::absolute(&path)
        .with_context(|| format!("{}: cannot make it absolute", path.display()))
}
