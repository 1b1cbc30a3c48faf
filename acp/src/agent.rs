//! The ACP agent: the JSON-RPC methods an editor calls, each on reel's sessions.
//!
//! The SDK's dispatch loop runs one handler at a time, in order. Handlers that only touch this
//! process (initialize, new, load, cancel) finish there, so what follows them finds their
//! effect; a prompt only hands its run to the session's writer and returns, and the writer's
//! [`crate::loaded::UpdatesSink`] answers it when the run is done, so a `session/cancel` sent
//! meanwhile is read at once.

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
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

/// The agent's state: the sessions it can reach and the ones it has loaded.
struct State {
    sessions: Arc<dyn AgentSessions>,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    /// Stops every running prompt when the agent ends.
    stop: CancellationToken,
    writers: TaskTracker,
}

/// Serves the ACP agent over `transport` (stdin/stdout for an editor) until the client goes
/// away or `stop` resolves; then stops every running prompt and waits until each session has
/// flushed and released its lease.
pub async fn run_agent(
    sessions: Arc<dyn AgentSessions>,
    transport: impl ConnectTo<Agent> + 'static,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let state = Arc::new(State {
        sessions,
        loaded: Mutex::new(HashMap::new()),
        stop: CancellationToken::new(),
        writers: TaskTracker::new(),
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
            async move |request: PromptRequest, responder: Responder<PromptResponse>, _cx| {
                on_prompt.prompt(request, responder).await
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
    fn loaded(&self, id: &str) -> Option<Arc<Loaded>> {
        self.map().get(id).cloned()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Loaded>>> {
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
        absolute(&request.cwd)?;
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
        let loaded = Loaded::start(opened, prompts, self.stop.child_token(), &self.writers);
        self.map().insert(id.to_owned(), Arc::new(loaded));
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
    ) -> Result<(), Error> {
        let id = &request.session_id.0;
        let Some(loaded) = self.loaded(id) else {
            return responder.respond_with_error(not_loaded(id));
        };
        match prompt_text(&request.prompt) {
            Ok(text) => loaded.prompt(text, responder).await,
            Err(error) => responder.respond_with_error(error),
        }
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
        let loaded = self.map().remove(id).ok_or_else(|| not_loaded(id))?;
        loaded.close();
        Ok(())
    }

    /// Stops every running prompt and waits until every session has closed.
    async fn shut_down(&self) {
        self.stop.cancel();
        self.map().clear();
        self.writers.close();
        self.writers.wait().await;
    }
}

fn absolute(cwd: &Path) -> Result<(), Error> {
    if cwd.is_absolute() {
        return Ok(());
    }
    Err(Error::invalid_params().data(serde_json::json!(format!(
        "cwd must be an absolute path, not {}",
        cwd.display()
    ))))
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
