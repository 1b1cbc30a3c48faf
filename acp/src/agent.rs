//! The ACP agent: the JSON-RPC methods an editor calls, each on reel's sessions.
//!
//! The SDK's dispatch loop runs one handler at a time, in order. Handlers that only touch this
//! process (initialize, new, load, cancel) finish there, so what follows them finds their
//! effect; a prompt only hands its run to the session's writer and returns, and the writer's
//! [`crate::loaded::UpdatesSink`] answers it when the run is done, so a `session/cancel` sent
//! meanwhile is read at once.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use agent_client_protocol::{
    Agent, Client, ConnectTo, Error, ErrorCode,
    schema::ProtocolVersion,
    v1::{
        ConnectionTo, Responder,
        schema::{
            AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse,
            ForkSessionRequest, ForkSessionResponse, Implementation, InitializeRequest,
            InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
            LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse,
            PromptCapabilities, PromptRequest, PromptResponse, ResumeSessionRequest,
            ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
            SessionForkCapabilities, SessionInfo, SessionListCapabilities, SessionNotification,
            SessionResumeCapabilities,
        },
    },
};
use reel_engine::{LogPages, new_id};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    approver::ClientApprover,
    idle::{self, Sessions},
    loaded::{Loaded, Prompts, UpdatesSink},
    mcp_servers,
    prompt_text::prompt_text,
    sessions::{AgentSessions, SessionsError},
    updates::{Moment, updates_of},
};

/// Sessions listed per `session/list` page.
const LIST_PAGE: usize = 50;

/// Events read per page when a loaded session's history is replayed.
const REPLAY_PAGE: u32 = 512;

/// The longest working directory a session may name.
const MAX_CWD_BYTES: usize = 4096;

/// The agent's state: the sessions it can reach and the ones it has loaded.
struct State {
    sessions: Arc<dyn AgentSessions>,
    loaded: Mutex<Sessions>,
    /// A session nobody has used for this long is unloaded (see [`crate::idle`]).
    idle_timeout: Duration,
    /// Stops every running prompt when the agent ends.
    stop: CancellationToken,
    writers: TaskTracker,
}

/// Serves the ACP agent over `transport` (stdin/stdout for an editor) until the client goes
/// away or `stop` resolves; then stops every running prompt and waits until each session has
/// flushed and released its lease. A session unused for `idle_timeout` is unloaded until its
/// next prompt.
pub async fn run_agent(
    sessions: Arc<dyn AgentSessions>,
    transport: impl ConnectTo<Agent> + 'static,
    stop: impl std::future::Future<Output = ()>,
    idle_timeout: Duration,
) -> Result<(), Error> {
    let state = Arc::new(State {
        sessions,
        loaded: Mutex::new(Sessions::default()),
        idle_timeout,
        stop: CancellationToken::new(),
        writers: TaskTracker::new(),
    });
    let sweeping = Arc::clone(&state);
    let sweeper = tokio::spawn(async move {
        let mut sweeps = tokio::time::interval(idle::sweep_interval(idle_timeout));
        loop {
            sweeps.tick().await;
            sweeping.map().evict(idle_timeout);
        }
    });
    let (on_new, on_load, on_prompt, on_cancel, on_list) = (
        Arc::clone(&state),
        Arc::clone(&state),
        Arc::clone(&state),
        Arc::clone(&state),
        Arc::clone(&state),
    );
    let (on_resume, on_fork, on_close) =
        (Arc::clone(&state), Arc::clone(&state), Arc::clone(&state));
    let agent = Agent
        .v1()
        .name("reel")
        .on_receive_request(
            async |request: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                responder.respond(initialize(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx| {
                responder.respond_with_result(on_new.new_session(request, cx).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                responder.respond_with_result(on_load.load_session(request, cx).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder: Responder<PromptResponse>, cx| {
                on_prompt.prompt(request, responder, cx).await
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                if let Some(loaded) = on_cancel.loaded(&notification.session_id.0) {
                    loaded.cancel().await;
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| {
                responder.respond_with_result(on_list.list(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ResumeSessionRequest, responder, cx| {
                let id = &request.session_id.0;
                let opened = on_resume.open(id, cx, &request.mcp_servers, false).await;
                responder.respond_with_result(opened.map(|()| ResumeSessionResponse::new()))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ForkSessionRequest, responder, cx| {
                responder.respond_with_result(on_fork.fork(request, cx).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, _cx| {
                let closed = on_close.close(&request.session_id.0).await;
                responder.respond_with_result(closed.map(|()| CloseSessionResponse::new()))
            },
            agent_client_protocol::on_receive_request!(),
        );
    let served = tokio::select! {
        served = agent.connect_to(transport) => served,
        () = stop => Ok(()),
    };
    sweeper.abort();
    state.shut_down().await;
    served
}

/// The answer to `initialize`: protocol v1 (the one stable version; a client asking for
/// another reads it and decides), loading and listing sessions, text and embedded context.
fn initialize(request: &InitializeRequest) -> InitializeResponse {
    tracing::info!(
        "acp: a client asks for protocol version {}",
        request.protocol_version
    );
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
        .mcp_capabilities(McpCapabilities::new().http(true))
        .session_capabilities(
            SessionCapabilities::new()
                .list(SessionListCapabilities::new())
                .resume(SessionResumeCapabilities::new())
                .fork(SessionForkCapabilities::new())
                .close(SessionCloseCapabilities::new()),
        );
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("reel", env!("CARGO_PKG_VERSION")).title("reel"))
}

impl State {
    /// Loaded session `id`, marked as used.
    fn loaded(&self, id: &str) -> Option<Arc<Loaded>> {
        self.map().use_loaded(id)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // A panic while it was held left the map whole (inserts and removals only).
        self.loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn new_session(
        &self,
        request: NewSessionRequest,
        cx: ConnectionTo<Client>,
    ) -> Result<NewSessionResponse, Error> {
        check_cwd(&request.cwd)?;
        let id = new_id();
        self.sessions
            .create(&id, &request.cwd)
            .await
            .map_err(acp_error)?;
        self.open(&id, cx, &request.mcp_servers, false).await?;
        tracing::info!("acp: session {id} created in {}", request.cwd.display());
        Ok(NewSessionResponse::new(id))
    }

    /// Opens stored session `id` with its updates going to `cx`, connected to the editor's MCP
    /// `servers` too; with `replay`, sends its whole history first (before its writer starts:
    /// nothing new can come between).
    async fn open(
        &self,
        id: &str,
        cx: ConnectionTo<Client>,
        servers: &[McpServer],
        replay: bool,
    ) -> Result<(), Error> {
        if self.loaded(id).is_some() {
            return Err(Error::new(
                ErrorCode::INVALID_REQUEST,
                format!("session {id} is loaded already on this connection"),
            ));
        }
        // Unloaded while idle: opened again once its last writer has let go of it.
        let unloaded = self.map().unloaded.remove(id);
        if let Some(unloaded) = unloaded {
            unloaded.ended.cancelled().await;
        }
        let prompts = Arc::new(Prompts::default());
        let sink = UpdatesSink::new(cx.clone(), id, Arc::clone(&prompts));
        let mut opened = self
            .sessions
            .open(id, Box::new(sink), &mcp_servers::configs(servers))
            .await
            .map_err(acp_error)?;
        opened.runs.approver = Some(Box::new(ClientApprover::new(cx.clone(), id)));
        if replay {
            let last = opened.session.log().last_ordinal();
            self.replay(id, last, &cx).await?;
        }
        let stop = self.stop.child_token();
        let loaded = Loaded::start(opened, prompts, servers.to_vec(), stop, &self.writers);
        let mut map = self.map();
        map.loaded.insert(id.to_owned(), Arc::new(loaded));
        map.evict(self.idle_timeout);
        Ok(())
    }

    async fn load_session(
        &self,
        request: LoadSessionRequest,
        cx: ConnectionTo<Client>,
    ) -> Result<LoadSessionResponse, Error> {
        self.open(&request.session_id.0, cx, &request.mcp_servers, true)
            .await?;
        Ok(LoadSessionResponse::new())
    }

    /// Sends session `id`'s events through ordinal `last` as `session/update` notifications.
    async fn replay(&self, id: &str, last: u64, cx: &ConnectionTo<Client>) -> Result<(), Error> {
        let mut catalog = self.sessions.catalog().await.map_err(acp_error)?;
        let mut pages = LogPages::new(id, 0, last).page_size(REPLAY_PAGE);
        loop {
            let page = pages
                .next(catalog.as_mut())
                .await
                .map_err(|e| internal(format!("cannot read session {id}: {e}")))?;
            if page.is_empty() {
                return Ok(());
            }
            for entry in &page {
                for update in updates_of(entry, Moment::Replay) {
                    cx.send_notification(SessionNotification::new(id.to_owned(), update))?;
                }
            }
        }
    }

    async fn prompt(
        &self,
        request: PromptRequest,
        responder: Responder<PromptResponse>,
        cx: ConnectionTo<Client>,
    ) -> Result<(), Error> {
        let id = &request.session_id.0;
        let loaded = match self.loaded_again(id, cx).await {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return responder.respond_with_error(not_loaded(id)),
            Err(error) => return responder.respond_with_error(error),
        };
        match prompt_text(&request.prompt) {
            Ok(text) => loaded.prompt(text, responder).await,
            Err(error) => responder.respond_with_error(error),
        }
    }

    /// Loaded session `id`, loaded again from its log when it was unloaded while idle;
    /// `None` when this connection has not loaded it.
    async fn loaded_again(
        &self,
        id: &str,
        cx: ConnectionTo<Client>,
    ) -> Result<Option<Arc<Loaded>>, Error> {
        if let Some(loaded) = self.loaded(id) {
            return Ok(Some(loaded));
        }
        let servers = match self.map().unloaded.get(id) {
            Some(unloaded) => unloaded.servers.clone(),
            None => return Ok(None),
        };
        self.open(id, cx, &servers, false).await?;
        Ok(self.loaded(id))
    }

    async fn list(&self, request: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        let mut catalog = self.sessions.catalog().await.map_err(acp_error)?;
        let all = catalog
            .sessions()
            .await
            .map_err(|e| internal(format!("cannot list the sessions: {e}")))?;
        let from: usize = match &request.cursor {
            Some(cursor) => cursor
                .parse()
                .map_err(|_| Error::invalid_params().data(serde_json::json!("not a cursor")))?,
            None => 0,
        };
        let mut sessions = Vec::new();
        let mut next = from;
        for summary in all.iter().skip(from) {
            next += 1;
            let cwd = self
                .sessions
                .cwd(&summary.session_id)
                .await
                .map_err(acp_error)?;
            if request.cwd.is_some() && cwd != request.cwd {
                continue;
            }
            let updated = std::time::UNIX_EPOCH
                + std::time::Duration::from_millis(summary.updated_at_ms.max(0) as u64);
            let info = SessionInfo::new(summary.session_id.clone(), cwd.unwrap_or_default())
                .title(Some(summary.title.clone()).filter(|t| !t.is_empty()))
                .updated_at(humantime::format_rfc3339_millis(updated).to_string());
            sessions.push(info);
            if sessions.len() == LIST_PAGE {
                break;
            }
        }
        let more = next < all.len();
        Ok(ListSessionsResponse::new(sessions).next_cursor(more.then(|| next.to_string())))
    }

    /// A new session whose history is a copy of session `request.session_id`'s, loaded.
    async fn fork(
        &self,
        request: ForkSessionRequest,
        cx: ConnectionTo<Client>,
    ) -> Result<ForkSessionResponse, Error> {
        let id = new_id();
        self.sessions
            .fork(&request.session_id.0, &id)
            .await
            .map_err(acp_error)?;
        self.open(&id, cx, &request.mcp_servers, false).await?;
        tracing::info!("acp: session {id} forked from {}", request.session_id.0);
        Ok(ForkSessionResponse::new(id))
    }

    /// Unloads session `id`: its running prompt is stopped (it answers `cancelled`), its MCP
    /// servers stop, and its lease is released once its writer has flushed.
    async fn close(&self, id: &str) -> Result<(), Error> {
        let mut map = self.map();
        if map.unload(id).is_none() && !map.unloaded.contains_key(id) {
            return Err(not_loaded(id));
        }
        // Closed by the editor: it does not come back with a prompt.
        map.unloaded.remove(id);
        Ok(())
    }

    /// Stops every running prompt and waits until every session has closed.
    async fn shut_down(&self) {
        self.stop.cancel();
        self.map().loaded.clear();
        self.writers.close();
        self.writers.wait().await;
    }
}

/// A new session's working directory must be an existing directory, named by an absolute
/// path of at most [`MAX_CWD_BYTES`] without NUL: it is written to the log for good.
fn check_cwd(cwd: &Path) -> Result<(), Error> {
    let bytes = cwd.as_os_str().as_encoded_bytes();
    let refused = if bytes.len() > MAX_CWD_BYTES {
        Some(format!(
            "cwd is {} bytes long; at most {MAX_CWD_BYTES}",
            bytes.len()
        ))
    } else if bytes.contains(&0) {
        Some("cwd holds a NUL byte".to_owned())
    } else if !cwd.is_absolute() {
        Some(format!(
            "cwd must be an absolute path, not {}",
            cwd.display()
        ))
    } else if !cwd.is_dir() {
        Some(format!("cwd {} is not a directory here", cwd.display()))
    } else {
        None
    };
    match refused {
        None => Ok(()),
        Some(why) => Err(Error::invalid_params().data(serde_json::json!(why))),
    }
}

fn not_loaded(id: &str) -> Error {
    Error::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!("session {id} is not loaded here: session/new or session/load it first"),
    )
}

fn internal(message: String) -> Error {
    Error::new(ErrorCode::INTERNAL_ERROR, message)
}

fn acp_error(error: SessionsError) -> Error {
    match error {
        SessionsError::NotFound(message) => Error::new(ErrorCode::RESOURCE_NOT_FOUND, message),
        SessionsError::Busy(message) | SessionsError::Failed(message) => internal(message),
    }
}
