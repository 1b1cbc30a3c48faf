//! What a session's writer keeps while it waits for a request: `reel serve` holds one per
//! loaded session, thousands of them idle, so its future's size is memory per session.
//!
//! It was 8,952 bytes while `OpenedSession::write` and `serve` were `async fn`s (one keeps its
//! arguments for its whole life beside what they are moved into: the session three times) and
//! room for a run sat in it whether a run was active or not; 3,424 since, and 3,616 with the
//! sinks that run on the writer's task joined to it.

use reel_engine::{
    ContextPolicy, Fanout, MemorySink, ModelSettings, NO_TOOLS, OpenedSession, RunSetup, Session,
};
use reel_providers::{Script, ScriptedProvider};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The most an idle writer's future may take: a little over today's, so that holding the
/// session or a run twice again fails here.
const MOST: usize = 4 * 1024;

#[test]
fn an_idle_writer_holds_its_session_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Attaching a sink spawns its task: inside the runtime.
    let _inside = runtime.enter();
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(MemorySink::new()));
    let opened = OpenedSession {
        session: Session::new("s", fanout),
        runs: RunSetup {
            provider: Box::new(ScriptedProvider::new(Script {
                turns: Vec::new(),
                summary: None,
            })),
            system_prompt: None,
            settings: ModelSettings::default(),
            tools: NO_TOOLS.clone(),
            approver: None,
            budgets: Default::default(),
            context_policy: ContextPolicy::default(),
            announcements: Vec::new(),
        },
    };
    let (_requests, incoming) = mpsc::channel(1);
    let writer = opened.write(incoming, CancellationToken::new());
    let size = std::mem::size_of_val(&writer);
    assert!(
        size <= MOST,
        "an idle session's writer takes {size} bytes (at most {MOST}): does an async fn keep an argument it moves on, or an await hold a large future inline?"
    );
}
