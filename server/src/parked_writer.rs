//! A loaded session's writer that holds no task while it waits for a request.
//!
//! A server holds thousands of loaded sessions, nearly all of them idle: each writer's future
//! waits for the next request, and a task kept for it is a task per idle session. So when the
//! writer says it waits for a request and nothing else (the engine's `IdleSignal`), its task
//! ends and the future is set aside here; the next request starts a task for it again.
//!
//! A request is never left waiting in the queue of a parked writer: the sender queues it and
//! then knocks, under the same lock the task parks under. A knock on a parked writer starts
//! it; a knock on a running one is counted, and a task that was knocked since it last looked
//! polls again instead of parking (the request may have come after the writer looked at its
//! queue).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::Poll,
};

use reel_engine::IdleSignal;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// A writer's future, boxed so that it can be set aside and taken up by another task.
type Writer = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One session's writer, running on a task of its own or parked.
pub struct ParkedWriter {
    state: Mutex<State>,
    idle: IdleSignal,
    tasks: TaskTracker,
    /// Cancelled once the writer has ended.
    ended: CancellationToken,
}

#[derive(Default)]
struct State {
    /// The writer, while no task runs it.
    parked: Option<Writer>,
    /// Knocks while a task ran it.
    knocks: u64,
}

impl ParkedWriter {
    /// Starts `writer` on a task of `tasks`; `idle` is the signal it sets, and `ended` is
    /// cancelled when it ends.
    pub fn start(
        writer: impl Future<Output = ()> + Send + 'static,
        idle: IdleSignal,
        tasks: TaskTracker,
        ended: CancellationToken,
    ) -> Arc<Self> {
        let slot = Arc::new(Self {
            state: Mutex::default(),
            idle,
            tasks,
            ended,
        });
        slot.spawn(Box::pin(writer));
        slot
    }

    /// Tells the writer a request has been queued for it: a parked writer is started again.
    pub fn knock(self: &Arc<Self>) {
        let mut state = self.state();
        match state.parked.take() {
            Some(writer) => {
                drop(state);
                self.spawn(writer);
            }
            None => state.knocks += 1,
        }
    }

    fn spawn(self: &Arc<Self>, writer: Writer) {
        let slot = Arc::clone(self);
        self.tasks.spawn(slot.run(writer));
    }

    /// Polls the writer until it ends, or parks it when it waits for a request only.
    async fn run(self: Arc<Self>, writer: Writer) {
        let mut writer = Some(writer);
        let ended = std::future::poll_fn(|cx| {
            loop {
                let seen = self.state().knocks;
                let Some(running) = writer.as_mut() else {
                    return Poll::Ready(false);
                };
                if running.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(true);
                }
                if !self.idle.is_idle() {
                    return Poll::Pending;
                }
                let mut state = self.state();
                if state.knocks == seen {
                    state.parked = writer.take();
                    return Poll::Ready(false);
                }
                // Knocked while it looked at its queue: it looks again.
            }
        })
        .await;
        if ended {
            self.ended.cancel();
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while it was held (in a writer's poll, never under this lock) left it whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;

    /// A writer like the engine's: says it is idle while it waits for a request, and ends
    /// when the queue closes. It counts what it received.
    async fn writer(
        mut incoming: mpsc::Receiver<u32>,
        idle: IdleSignal,
        received: mpsc::UnboundedSender<u32>,
    ) {
        loop {
            idle.set(true);
            let request = incoming.recv().await;
            idle.set(false);
            match request {
                Some(n) => {
                    // Some work that waits, as a request's handling does.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let _ = received.send(n);
                }
                None => return,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_writer_holds_no_task_and_every_request_is_answered() {
        let tasks = TaskTracker::new();
        let idle = IdleSignal::default();
        let ended = CancellationToken::new();
        let (requests, incoming) = mpsc::channel(64);
        let (received, mut answers) = mpsc::unbounded_channel();
        let slot = ParkedWriter::start(
            writer(incoming, idle.clone(), received),
            idle,
            tasks.clone(),
            ended.clone(),
        );
        let metrics = tokio::runtime::Handle::current().metrics();
        for round in 0..500u32 {
            // Idle: the writer's task has ended.
            let mut waited = 0;
            while !tasks.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
                waited += 1;
                assert!(waited < 5_000, "the idle writer kept its task");
            }
            // Requests from two senders at once, racing the parking.
            let (a, b) = (requests.clone(), requests.clone());
            let (slot_a, slot_b) = (Arc::clone(&slot), Arc::clone(&slot));
            let first = tokio::spawn(async move {
                a.send(round * 2).await.unwrap();
                slot_a.knock();
            });
            let second = tokio::spawn(async move {
                b.send(round * 2 + 1).await.unwrap();
                slot_b.knock();
            });
            first.await.unwrap();
            second.await.unwrap();
            let mut answer = async || {
                let answer = tokio::time::timeout(Duration::from_secs(5), answers.recv()).await;
                answer
                    .expect("a request left in a parked writer's queue")
                    .unwrap()
            };
            let mut got = [answer().await, answer().await];
            got.sort();
            assert_eq!(got, [round * 2, round * 2 + 1]);
        }
        assert!(metrics.num_alive_tasks() <= 1);
        drop(requests);
        slot.knock();
        ended.cancelled().await;
    }

    /// The race the knocks are for, made to happen: a request is queued, and knocked for,
    /// right after the writer looked at its empty queue and before its task parks it.
    #[tokio::test]
    async fn a_request_queued_as_the_writer_parks_is_answered() {
        let tasks = TaskTracker::new();
        let idle = IdleSignal::default();
        let ended = CancellationToken::new();
        let (requests, mut incoming) = mpsc::channel::<u32>(4);
        let slot: Arc<std::sync::OnceLock<Arc<ParkedWriter>>> = Arc::default();
        let (answered, mut answers) = mpsc::unbounded_channel();
        let racing = {
            let (idle, slot) = (idle.clone(), Arc::clone(&slot));
            let mut raced = false;
            std::future::poll_fn(move |cx| {
                idle.set(true);
                match incoming.poll_recv(cx) {
                    Poll::Ready(request) => {
                        idle.set(false);
                        let _ = answered.send(request);
                        Poll::Ready(())
                    }
                    Poll::Pending => {
                        if !raced {
                            raced = true;
                            requests.try_send(7).unwrap();
                            slot.get().expect("started").knock();
                        }
                        Poll::Pending
                    }
                }
            })
        };
        let started = ParkedWriter::start(
            async move {
                // Not polled before the slot is known.
                tokio::task::yield_now().await;
                racing.await
            },
            idle,
            tasks,
            ended.clone(),
        );
        let _ = slot.set(started);
        let answer = tokio::time::timeout(Duration::from_secs(5), answers.recv()).await;
        assert_eq!(
            answer.expect("the request was left in a parked writer's queue"),
            Some(Some(7))
        );
        ended.cancelled().await;
    }
}
