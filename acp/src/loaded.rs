//! A session the agent has loaded: one writer task that answers its requests with the engine's
//! `serve` (as one `--stdin-rpc` process would), and the sink that turns its outputs into
//! `session/update` notifications and answers each prompt once its request is done.
//!
//! The sink answers the prompt itself, after every notification of the prompt's events: the
//! client never sees a prompt's answer before its last chunk. `done` comes after the store's
//! commit, so an answered prompt is on disk.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use agent_client_protocol::{
    Client, Error,
    v1::{
        ConnectionTo, Responder,
        schema::{McpServer, PromptResponse, SessionNotification},
    },
};
use reel_engine::{
    DoneStatus, Incoming, InlineSink, OpenedSession, OutputBatch, OutputKind, new_id,
};
use reel_proto::rpc::{
    CancelRequest, PROTOCOL_VERSION, RpcRequestLine, SubmitPromptRequest, rpc_request_line::Request,
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    prompt_end::PromptEnd,
    updates::{Moment, updates_of},
};

/// Requests queued for one session's writer.
const REQUEST_QUEUE: usize = 16;

/// The prompts waiting for their request's `done`, by request id.
#[derive(Default)]
pub struct Prompts(Mutex<HashMap<String, Responder<PromptResponse>>>);

impl Prompts {
    fn insert(&self, request_id: String, responder: Responder<PromptResponse>) {
        self.lock().insert(request_id, responder);
    }

    fn take(&self, request_id: &str) -> Option<Responder<PromptResponse>> {
        self.lock().remove(request_id)
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Responder<PromptResponse>>> {
        // A panic while it was held left the map whole (inserts and removals only).
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One loaded session.
pub struct Loaded {
    requests: mpsc::Sender<Incoming>,
    prompts: Arc<Prompts>,
    /// Stops its running prompt and ends its writer.
    stop: CancellationToken,
    /// The editor's MCP servers it was opened with: it reopens with them after an unload.
    pub servers: Vec<McpServer>,
    /// When it was last used (a prompt, a cancel, its load).
    used: Mutex<Instant>,
    /// Cancelled once its writer has ended (flushed, its lease released).
    pub ended: CancellationToken,
}

impl Loaded {
    /// Starts the writer of `opened`, whose sinks include an [`UpdatesSink`] sharing
    /// `prompts`. `stop` stops its running prompt (the agent is ending).
    pub fn start(
        opened: OpenedSession,
        prompts: Arc<Prompts>,
        servers: Vec<McpServer>,
        stop: CancellationToken,
        writers: &TaskTracker,
    ) -> Self {
        let (requests, incoming) = mpsc::channel(REQUEST_QUEUE);
        let ended = CancellationToken::new();
        let writer = opened.write(incoming, stop.clone());
        let done = ended.clone();
        writers.spawn(async move {
            writer.await;
            done.cancel();
        });
        Self {
            requests,
            prompts,
            stop,
            servers,
            used: Mutex::new(Instant::now()),
            ended,
        }
    }

    /// How long nobody has used it; `None` while a prompt of its runs.
    pub fn idle_for(&self) -> Option<Duration> {
        if !self.prompts.is_empty() {
            return None;
        }
        Some(
            self.used
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed(),
        )
    }

    pub fn touch(&self) {
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Stops its running prompt; its writer ends, flushes and releases the lease.
    pub fn close(&self) {
        self.stop.cancel();
    }

    /// Runs `prompt`; `responder` is answered when its run has ended.
    pub async fn prompt(
        &self,
        prompt: String,
        responder: Responder<PromptResponse>,
    ) -> Result<(), Error> {
        self.touch();
        let request_id = new_id();
        self.prompts.insert(request_id.clone(), responder);
        let submit = Request::Submit(SubmitPromptRequest { prompt });
        if self.send(&request_id, submit).await.is_err()
            && let Some(responder) = self.prompts.take(&request_id)
        {
            return responder.respond_with_error(ended());
        }
        Ok(())
    }

    /// Stops the running prompt, if one runs (it then answers `cancelled`).
    pub async fn cancel(&self) {
        self.touch();
        let cancel = Request::Cancel(CancelRequest { clear_queue: true });
        let _ = self.send(&new_id(), cancel).await;
    }

    async fn send(&self, request_id: &str, request: Request) -> Result<(), ()> {
        let line = RpcRequestLine {
            version: PROTOCOL_VERSION,
            session_id: String::new(),
            request_id: request_id.to_owned(),
            request: Some(request),
        };
        self.requests
            .send(Incoming::Request(Box::new(line)))
            .await
            .map_err(|_| ())
    }
}

/// The error for a session whose writer has ended (its store failed).
fn ended() -> Error {
    Error::new(
        agent_client_protocol::ErrorCode::INTERNAL_ERROR,
        "the session has ended (its store failed; see reel's stderr); load it again",
    )
}

/// The sink that tells the client of a session's events and answers its prompts.
pub struct UpdatesSink {
    connection: ConnectionTo<Client>,
    session_id: String,
    prompts: Arc<Prompts>,
    /// What each running request's outputs have said of its end.
    ends: HashMap<Arc<str>, PromptEnd>,
}

impl UpdatesSink {
    pub fn new(connection: ConnectionTo<Client>, session_id: &str, prompts: Arc<Prompts>) -> Self {
        Self {
            connection,
            session_id: session_id.to_owned(),
            prompts,
            ends: HashMap::new(),
        }
    }

    fn end_of(&mut self, request_id: &Arc<str>) -> &mut PromptEnd {
        self.ends.entry(Arc::clone(request_id)).or_default()
    }
}

impl InlineSink for UpdatesSink {
    fn deliver(&mut self, batch: &OutputBatch) {
        for output in batch.iter() {
            match &output.kind {
                OutputKind::Event(committed) => {
                    self.end_of(&output.request_id).observe(&committed.entry);
                    for update in updates_of(&committed.entry, Moment::Live) {
                        let notification =
                            SessionNotification::new(self.session_id.clone(), update);
                        // A client that has gone misses nothing it could still read.
                        let _ = self.connection.send_notification(notification);
                    }
                }
                OutputKind::Error(error) => {
                    self.end_of(&output.request_id).observe_error(error);
                }
                OutputKind::Done(done) => {
                    let end = self.ends.remove(&output.request_id).unwrap_or_default();
                    let Some(responder) = self.prompts.take(&output.request_id) else {
                        continue;
                    };
                    let status = DoneStatus::parse(&done.status).unwrap_or(DoneStatus::Failed);
                    let _ = match end.answer(status) {
                        Ok(answer) => responder.respond(answer),
                        Err(error) => responder.respond_with_error(error),
                    };
                }
                OutputKind::Hello(_) | OutputKind::Snapshot(_) => {}
            }
        }
    }
}
