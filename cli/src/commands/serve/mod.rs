//! `reel serve`: many sessions in one process over HTTP, Server-Sent Events and WebSocket
//! (see the `reel-server` crate). The server asks [`CommandSessions`] for its sessions: they
//! are opened in the timeline database, each with its command file prepared as `run-command
//! --stdin-rpc --session-id ID --resume` would.

mod node;

use node::Node;

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use reel_engine::error_chain;
use reel_server::{Allowed, ServeOptions, SessionSource, default_max_connections};
use tokio_util::sync::CancellationToken;

use clap::Parser;
use reel_storage::Location;

use crate::{
    exit,
    hosting::{CommandSessions, Commands, RunCommandLine, Setup},
    signals::SignalWatch,
};

/// `reel serve` flags.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Where to listen, e.g. 127.0.0.1:8080 (port 0 takes a free one; the address is printed
    /// on stderr). Without --token-env only a loopback address is allowed.
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// The command file a session runs when it names none (its provider, system prompt and
    /// tools).
    #[arg(long, value_name = "FILE", required_unless_present = "commands")]
    pub command: Option<PathBuf>,
    /// A folder of command files (`NAME.yaml`) a new session may name (`"command": "NAME"`).
    #[arg(long, value_name = "DIR")]
    pub commands: Option<PathBuf>,
    /// The SQLite timeline database that holds the sessions (created if missing).
    #[arg(long, value_name = "PATH", required_unless_present = "timeline_dsn")]
    pub timeline_db: Option<PathBuf>,
    /// A PostgreSQL timeline database instead, e.g. postgres://user@host/db.
    #[arg(long, value_name = "DSN", conflicts_with = "timeline_db")]
    pub timeline_dsn: Option<String>,
    /// A turns database too (SQLite, created if missing): after each run, the model context the
    /// next run starts from, as `run-command --turns-db` keeps it. It may be the timeline's file.
    #[arg(long, value_name = "PATH")]
    pub turns_db: Option<PathBuf>,
    /// A PostgreSQL turns database instead, e.g. postgres://user@host/db.
    #[arg(long, value_name = "DSN", conflicts_with = "turns_db")]
    pub turns_dsn: Option<String>,
    /// Scale-out: where other `reel serve` processes on the same PostgreSQL database reach
    /// this one (e.g. http://10.0.0.5:8080). A request for a session this process writes,
    /// posted to another of them, is forwarded here.
    #[arg(long, value_name = "URL", requires = "timeline_dsn")]
    pub public_url: Option<String>,
    /// One more output of every session (repeatable), as run-command's --sink: exec:COMMAND
    /// starts COMMAND for each session loaded, with its frames on its stdin;
    /// nats://HOST:PORT/STREAM keeps every session's log in a JetStream stream;
    /// http(s)://HOST/PATH POSTs each session's frames to a webhook.
    #[arg(long = "sink", value_name = "URI")]
    pub sinks: Vec<String>,
    /// Export traces of every session over OTLP (HTTP/protobuf) to this base URL; the standard
    /// OTEL_EXPORTER_OTLP_* variables do the same.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The environment variable holding the bearer token every route but /healthz needs.
    #[arg(long, value_name = "NAME")]
    pub token_env: Option<String>,
    /// Scale-out with a token: the environment variable holding the token the nodes present
    /// to each other when they forward a request (the same on every node; never a client's).
    /// Required with --public-url and --token-env.
    #[arg(long, value_name = "NAME", requires = "public_url")]
    pub cluster_token_env: Option<String>,
    /// A web page origin (e.g. https://app.example.com) allowed to call the API from a browser
    /// besides the server's own page (repeatable); pages of any other origin are refused.
    #[arg(long = "allow-origin", value_name = "URL")]
    pub allow_origins: Vec<String>,
    /// A host name the server answers for besides its listen address, localhost, the loopback
    /// addresses and --public-url's host (repeatable), e.g. the name a proxy in front of it
    /// passes on.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// The most connections open at once; more get 503 (default: a quarter below the
    /// process's file descriptor limit).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// On SIGTERM or SIGINT, how long running runs may go on before they are stopped (e.g.
    /// 10s, 2m; 0s stops them at once).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// A session nobody has used for this long (no request, no frame, no subscriber) is
    /// unloaded, its lease released and its memory freed; it reloads when used again.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Remove the stored sessions not written for this long (e.g. 90d), at start and then once
    /// an hour (or every DURATION when shorter), as `reel prune --older-than` does, never one
    /// a process holds or this server has loaded; a request for one is then answered 410.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub retain: Option<Duration>,
}

/// The async runtime's worker threads for `reel serve` on SQLite: one a core but one, left to
/// the connection thread every session's commit goes through. Each time that thread waits for
/// a core, every session waits for it; on 2 cores, one worker instead of two delivered 11% more
/// frames in a burst of 1,000 sessions replying at once (docs/benchmarks.md). On PostgreSQL the
/// commits run in the database's own processes, and `TOKIO_WORKER_THREADS`, when set, decides.
pub fn runtime_workers(args: &ServeArgs) -> Option<usize> {
    if args.timeline_db.is_none() || std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    Some(cores.saturating_sub(1).max(1))
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
    let token = secret("--token-env", args.token_env.as_deref())?;
    let cluster_token = secret("--cluster-token-env", args.cluster_token_env.as_deref())?;
    if token.is_some() && args.public_url.is_some() && cluster_token.is_none() {
        anyhow::bail!(
            "--public-url with --token-env needs --cluster-token-env NAME: the token nodes present to each other when they forward a request (the same on every node), so that no node hands a client's token to another"
        );
    }
    if let Some(url) = &args.public_url {
        check_origin_url("--public-url", url)?;
    }
    for origin in &args.allow_origins {
        check_origin_url("--allow-origin", origin)?;
    }
    let sessions = Arc::new(CommandSessions::open(setup(&args)?).await?);
    let stop = CancellationToken::new();
    let node = match &args.public_url {
        Some(url) => Some(Node::register(&sessions, url).await?),
        None => None,
    };
    let _signals = SignalWatch::install(stop.clone()).context("cannot watch for signals")?;
    let options = ServeOptions {
        listen: args.listen,
        token,
        grace: args.grace,
        idle_timeout: args.idle_timeout,
        retain: args.retain,
        allowed: Allowed::new(
            &args.allow_hosts,
            &args.allow_origins,
            args.public_url.as_deref(),
        ),
        max_connections: args
            .max_connections
            .map_or_else(default_max_connections, |n| n as usize),
        cluster_token,
    };
    let stopped = stop.clone();
    let source: Arc<dyn SessionSource> = Arc::clone(&sessions) as _;
    let served = reel_server::serve(
        options,
        source,
        async move { stopped.cancelled().await },
        |address| tracing::info!("reel serve: listening on http://{address}"),
    )
    .await;
    if let Some(node) = node {
        node.unregister(&sessions).await;
    }
    served?;
    tracing::info!("reel serve: stopped");
    Ok(())
}

/// The secret in the environment variable `flag` names, if it names one.
fn secret(flag: &str, name: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(name) = name else {
        return Ok(None);
    };
    let value = std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
        .with_context(|| format!("{flag} {name}: the variable is not set or empty"))?;
    Ok(Some(value))
}

/// Refuses a `flag` value that is no http(s) URL.
fn check_origin_url(flag: &str, url: &str) -> anyhow::Result<()> {
    let plausible = ["http://", "https://"]
        .iter()
        .any(|scheme| url.len() > scheme.len() && url[..scheme.len()].eq_ignore_ascii_case(scheme));
    anyhow::ensure!(
        plausible,
        "{flag} {url:?}: give an http:// or https:// URL, e.g. http://10.0.0.5:8080"
    );
    Ok(())
}

/// `--listen`'s address, or what to give instead.
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        let port = text
            .trim_start_matches(':')
            .parse::<u16>()
            .map_or_else(|_| "8080".to_owned(), |port| port.to_string());
        format!(
            "an address is an IP address and a port, e.g. 127.0.0.1:{port} (127.0.0.1:0 takes a free port; 0.0.0.0:{port} every interface, with --token-env)"
        )
    })
}

/// What `reel serve`'s sessions are: its command files, its databases, and `run-command`'s
/// flags for each session (but its id and command file).
fn setup(args: &ServeArgs) -> anyhow::Result<Setup> {
    let location = match (&args.timeline_dsn, &args.timeline_db) {
        (Some(dsn), _) => Location::dsn(dsn)?,
        (None, Some(path)) => Location::path(path),
        (None, None) => unreachable!("clap requires a database"),
    };
    let turns = match (&args.turns_dsn, &args.turns_db) {
        (Some(dsn), _) => Some(Location::dsn(dsn)?),
        (None, Some(path)) => Some(Location::path(path)),
        (None, None) => None,
    };
    let mut template = RunCommandLine::try_parse_from([
        "run-command",
        // Each session's own command file and id replace these.
        "served.yaml",
        "--rpc",
        "--stdin-rpc",
        "--resume",
        "--session-id",
        "served",
    ])?
    .args;
    template.sinks = args.sinks.clone();
    template.otlp_endpoint = args.otlp_endpoint.clone();
    Ok(Setup {
        commands: Commands {
            default: args.command.clone(),
            folder: args.commands.clone(),
        },
        location,
        turns,
        template,
    })
}
