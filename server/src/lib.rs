//! `reel serve`: many sessions in one process, over HTTP, Server-Sent Events and WebSocket.
//!
//! The request vocabulary is stdin RPC's and the frames are the same `RpcLine`s: a request
//! posted to a session goes to that session's writer, exactly as a line on a `--stdin-rpc`
//! process's stdin would, and every subscriber of its event stream reads the frames one stdout
//! would carry. A stream resumes from any event id (the log's ordinal is the cursor) with no gap
//! and no duplicate, also across a restart of the server.
//!
//! The binary hands the server its sessions through [`SessionSource`] (it knows command files,
//! providers and databases); the server hosts them ([`host`]), fans their frames out
//! ([`frames`]), streams them to each subscriber ([`subscription`]) and routes HTTP and
//! WebSocket connections to them ([`api`], [`websocket`]), and serves the chat page ([`page`]).

mod api;
mod auth;
mod connections;
mod durable;
mod error;
mod expiry;
mod export;
mod forward;
mod frame_channel;
mod frames;
mod front_door;
mod guard;
mod guarded_io;
mod host;
mod idle;
mod idle_queue;
mod metrics;
mod openapi;
mod page;
mod params;
mod parked_writer;
mod retention;
mod search;
mod session_io;
mod sessions;
mod shared_snapshot;
mod source;
mod sse_body;
mod subscription;
mod websocket;
mod ws_forward;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, routing::get};
use tokio_util::sync::CancellationToken;

pub use connections::default_max_connections;
pub use error::pruned_message;
pub use frames::Position;
pub use front_door::Allowed;
pub use search::parse_date_ms;
pub use source::{ExportFormat, SessionConfig, SessionSource, SourceError};

/// How long, once the sessions have stopped, their last frames have to reach the clients
/// before every connection left is closed.
const LAST_FRAMES: Duration = Duration::from_secs(1);

/// How a server listens.
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The bearer token every route but `/healthz` needs; without one the server listens on
    /// a loopback address only.
    pub token: Option<String>,
    /// How long running runs may go on once the server is asked to stop, before they are
    /// stopped.
    pub grace: Duration,
    /// A session nobody has used for this long is unloaded (its lease released, its memory
    /// freed) and reloads from the store when it is used again.
    pub idle_timeout: Duration,
    /// The names and origins browsers may reach the server by, besides its own.
    pub allowed: Allowed,
    /// The most connections open at once (see [`default_max_connections`]).
    pub max_connections: usize,
    /// The credential nodes of a scale-out present to each other when they forward a
    /// client's request (never the client's own token).
    pub cluster_token: Option<String>,
    /// Stored sessions not written for this long are removed, at start and then hourly.
    pub retain: Option<Duration>,
}

/// Why a server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0} without a token: anyone who can reach it could drive every session; pass --token-env NAME, or listen on 127.0.0.1"
    )]
    Unprotected(SocketAddr),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Serve(std::io::Error),
}

/// Serves `source`'s sessions until `stop` resolves; then takes no new connection, lets
/// running submits go on for [`ServeOptions::grace`] and stops the rest (`ChatRunStopped`),
/// ends every stream with `done` and releases every lease. `listening` hears
/// the address once the server accepts connections (port 0 picks a free one).
pub async fn serve(
    options: ServeOptions,
    source: Arc<dyn SessionSource>,
    stop: impl Future<Output = ()> + Send + 'static,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    if options.token.is_none() && !options.listen.ip().is_loopback() {
        return Err(ServeError::Unprotected(options.listen));
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Listen {
            address: options.listen,
            source,
        })?;
    let grace = options.grace;
    let address = listener.local_addr().map_err(ServeError::Serve)?;
    let host = Arc::new(host::Host::new(source, options.cluster_token.clone()));
    let door = front_door::Door {
        listen: options.listen.ip(),
        allowed: Arc::new(options.allowed),
    };
    let tokens = options.token.map(|token| auth::Tokens {
        client: Arc::from(token),
        cluster: options.cluster_token.map(Arc::from),
    });
    // The guard checks the origin before the token: a page of another site is refused whether
    // or not it has one.
    let app = api::routes(
        Arc::clone(&host),
        guard::Guard::api(door.clone(), tokens, Arc::clone(&host)),
    );
    let sweeping = Arc::clone(&host);
    let idle_timeout = options.idle_timeout;
    let sweeper =
        tokio::spawn(async move { sweeping.evict_idle_until_stopped(idle_timeout).await });
    let expirer = tokio::spawn(expiry::expire_approvals_until_stopped(Arc::clone(&host)));
    let pruner = options
        .retain
        .map(|age| tokio::spawn(retention::prune_until_stopped(Arc::clone(&host), age)));
    let app = Router::new()
        .route("/healthz", get(openapi::health))
        .merge(page::routes())
        .merge(app)
        .layer(guard::Guard::host(door));
    let connections = connections::Connections::new(app, options.max_connections);
    listening(address);
    // At `stop` the listener closes at once and the sessions are shut down; their streams end
    // with them, which ends their connections. Whatever connection is left after the grace
    // period (a client that sends half a request, or reads nothing) is closed then.
    let stopped = CancellationToken::new();
    let sessions_done = CancellationToken::new();
    let stopping = Arc::clone(&host);
    let sessions_stopped = tokio::spawn({
        let (stopped, done) = (stopped.clone(), sessions_done.clone());
        async move {
            stop.await;
            stopped.cancel();
            tracing::info!("stopping: no new connections; running runs have {grace:?} to end");
            stopping.shut_down(grace).await;
            done.cancel();
        }
    });
    connections.accept(listener, stopped).await;
    let force_close = async {
        // The sessions' last frames (their runs stopped, `done`) go out to the clients that
        // read them; whoever does not read by then is cut off.
        tokio::join!(tokio::time::sleep(grace), sessions_done.cancelled());
        tokio::time::sleep(LAST_FRAMES).await;
        tracing::debug!("closing the connections left after the grace period");
        connections.close_all();
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = connections.ended() => {}
        () = force_close => {}
    }
    // Every session has flushed and released its lease before the server returns.
    let _ = sessions_stopped.await;
    connections.close_all();
    connections.ended().await;
    sweeper.abort();
    expirer.abort();
    if let Some(pruner) = pruner {
        pruner.abort();
    }
    Ok(())
}
