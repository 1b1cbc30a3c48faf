//! What a host of sessions (`reel serve`, `reel acp`) is handed for each session it loads: the
//! session, opened for writing, and what every run of it is made with.

use std::sync::Arc;

use reel_proto::Any;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    budget::Budgets,
    compaction::ContextPolicy,
    provider::{ModelSettings, Provider},
    session::Session,
    tools::{Approver, Toolbox},
};

use super::{Incoming, ServeConfig};
use crate::IdleSignal;

/// What every run of a hosted session is made with (its command file, prepared).
pub struct RunSetup {
    pub provider: Box<dyn Provider>,
    pub system_prompt: Option<String>,
    pub settings: ModelSettings,
    pub tools: Toolbox,
    /// Who decides the calls of `approval: ask` tools; `None` where nobody can.
    pub approver: Option<Box<dyn Approver>>,
    pub budgets: Budgets,
    pub context_policy: ContextPolicy,
    /// Events opening the session announces, appended once it is ready (the tool servers it
    /// connected to, with their tools).
    pub announcements: Vec<Any>,
}

impl RunSetup {
    /// The configuration [`super::serve`] answers a stored session's requests with: its id is
    /// the store's, so requests may not rename it; `idle` is set while it waits for one.
    pub fn serve_config(&self, idle: IdleSignal) -> ServeConfig<'_> {
        ServeConfig {
            id_fixed: true,
            provider: self.provider.as_ref(),
            system_prompt: self.system_prompt.clone(),
            settings: self.settings.clone(),
            tools: &self.tools,
            approver: self.approver.as_deref(),
            budgets: self.budgets,
            context_policy: self.context_policy.clone(),
            idle,
        }
    }
}

/// A session opened for writing (its lease taken, its sinks attached) and how its runs go.
pub struct OpenedSession {
    pub session: Session,
    pub runs: RunSetup,
}

impl OpenedSession {
    /// What says when the session waits for a request and nothing else (see
    /// [`IdleSignal`]): a host may set the writer's future aside then.
    pub fn idle_signal(&self) -> IdleSignal {
        self.session.idle_signal()
    }

    /// The session's writer, for a host of sessions: readies it, answers `incoming` with
    /// [`super::serve`] until they end or `stop`, then closes its sinks (the store releases
    /// the lease), saying on stderr each one that failed. The sinks a fan-out runs on the
    /// writer's task ([`crate::Fanout::on_writer_task`]) run within this future.
    pub fn write(
        self,
        incoming: mpsc::Receiver<Incoming>,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> {
        // Taken apart before the future is made: an `async fn` keeps its arguments for its
        // whole life beside what they are moved into, and an idle session's writer would hold
        // the session and its run setup twice.
        let Self {
            mut session,
            mut runs,
        } = self;
        let idle = session.idle_signal();
        let sinks = session.take_writer_task_sinks();
        let writing = async move {
            // Boxed, as the engine's request handling is: the future of a session that sits
            // idle keeps only what it holds, not room for the largest thing it ever awaits.
            Box::pin(Self::ready(&mut session, &mut runs)).await;
            let id = session.id().to_owned();
            let config = runs.serve_config(idle);
            let (session, end) = super::serve(session, config, incoming, stop).await;
            for failure in Box::pin(session.close()).await {
                tracing::error!(
                    "session {id}: output {} failed: {}",
                    failure.sink,
                    failure.message
                );
            }
            tracing::debug!("session {id} unloaded ({end:?})");
        };
        // Joined as they are: an `async` block around them would hold them twice.
        futures::FutureExt::map(futures::future::join(writing, sinks), drop)
    }

    /// Readies the session for requests: closes a run its last process left open (as resume
    /// does), then appends what opening it announced.
    async fn ready(session: &mut Session, runs: &mut RunSetup) {
        let none: Arc<str> = Arc::from("");
        Box::pin(session.close_interrupted_run(&none, &runs.tools)).await;
        for event in std::mem::take(&mut runs.announcements) {
            session.append(&none, event).await;
        }
    }
}
