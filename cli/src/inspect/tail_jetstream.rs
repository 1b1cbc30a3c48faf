//! `reel tail SESSION --from nats://HOST:PORT/STREAM`: follows a session from the JetStream
//! stream a `--sink nats://...` keeps, with no database: the same frames (or text) as a tail of
//! the database, made by the same timeline projection from the stream's events.
//!
//! The stream knows nothing of writers: without `--wait`, tail prints what the stream holds
//! when it starts and ends; with `--wait` it waits for the stream and the session to appear
//! and follows until it is interrupted (done `stopped`).

use std::{io::IsTerminal, sync::Arc, time::Duration};

use futures::FutureExt;
use reel_engine::{
    CommittedEvent, DoneStatus, Fanout, LogEntry, Output, OutputKind, Projection,
    TimelineProjection, hello_frame,
};
use reel_nats::{JetStreamLog, NatsTarget};
use reel_proto::rpc::DoneFrame;
use reel_sinks::Transcript;

use super::{
    show::colour_on_stdout,
    tail::{TailArgs, TailOutput},
};
use crate::outputs::{self, Rendering};

/// How often `--wait` tries again to open the stream and the session.
const APPEAR_POLL: Duration = Duration::from_millis(200);

pub async fn run(args: &TailArgs, uri: &str) -> anyhow::Result<()> {
    let target = NatsTarget::parse(uri).map_err(|e| anyhow::anyhow!("--from {e}"))?;
    let id = args.session_id.as_str();
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let Some(mut log) = (tokio::select! {
        opened = open(&target, args) => Some(opened?),
        _ = &mut interrupted => None,
    }) else {
        return Ok(());
    };
    let held = log.held();
    let after = args.after.unwrap_or(held);
    if after > held {
        anyhow::bail!(
            "--after {after} is past the end of session {id} in stream {} (it holds {held} events)",
            target.stream
        );
    }
    let output = args.output.unwrap_or(if std::io::stdout().is_terminal() {
        TailOutput::Text
    } else {
        TailOutput::Jsonl
    });
    let (mut timeline, so_far) = read_up_to(&mut log, after, output == TailOutput::Text).await?;
    let rendering = match so_far {
        None => Rendering::Frames {
            backend_events: false,
        },
        Some(so_far) => Rendering::Follow {
            colour: colour_on_stdout(),
            so_far,
            events_in_log: after,
        },
    };
    let mut fanout = Fanout::new();
    fanout.attach(outputs::sink(rendering, std::io::stdout()));
    let outputs = Outputs(Arc::from(id), Arc::from(""));
    fanout
        .send(outputs.of(OutputKind::Hello(Arc::new(hello_frame(&[])))))
        .await;
    fanout
        .send(outputs.of(OutputKind::Snapshot(Arc::new(timeline.snapshot()))))
        .await;
    let end = (!args.wait).then_some(held);
    let status = follow(
        &mut log,
        (after, end),
        &mut timeline,
        &mut fanout,
        &outputs,
        interrupted,
    )
    .await?;
    if status == DoneStatus::Ok {
        fanout
            .send(outputs.of(OutputKind::Snapshot(Arc::new(timeline.snapshot()))))
            .await;
    }
    let done = DoneFrame {
        status: status.into(),
    };
    fanout
        .send(outputs.of(OutputKind::Done(Arc::new(done))))
        .await;
    match fanout.close().await.first() {
        Some(failure) => Err(anyhow::anyhow!("cannot write: {}", failure.message)),
        None => Ok(()),
    }
}

/// Reads the first `after` events: the timeline as of there and, for people, the transcript.
async fn read_up_to(
    log: &mut JetStreamLog,
    after: u64,
    for_people: bool,
) -> anyhow::Result<(TimelineProjection, Option<Transcript>)> {
    let mut timeline = TimelineProjection::new();
    let mut so_far = for_people.then(Transcript::new);
    for _ in 0..after {
        let entry = log.next().await?;
        timeline.fold(&entry);
        if let Some(so_far) = &mut so_far {
            so_far.apply(&entry);
        }
    }
    Ok((timeline, so_far))
}

/// Hands `fanout` each event after `from` as it is published, until `end` (when given), until
/// stdout fails, or until the user stops tail (done `stopped`).
async fn follow(
    log: &mut JetStreamLog,
    (from, end): (u64, Option<u64>),
    timeline: &mut TimelineProjection,
    fanout: &mut Fanout,
    outputs: &Outputs,
    mut interrupted: std::pin::Pin<&mut impl Future<Output = std::io::Result<()>>>,
) -> anyhow::Result<DoneStatus> {
    let mut at = from;
    loop {
        if end.is_some_and(|end| at >= end) || fanout.is_empty() {
            return Ok(DoneStatus::Ok);
        }
        // Frames already read reach stdout before tail waits for more.
        let entry = match log.next().now_or_never() {
            Some(next) => next?,
            None => {
                fanout.flush().await;
                tokio::select! {
                    next = log.next() => next?,
                    _ = &mut interrupted => return Ok(DoneStatus::Stopped),
                }
            }
        };
        at = entry.ordinal;
        fanout.send(outputs.event(timeline, entry)).await;
    }
}

/// The session's events in the stream; with `--wait`, once the stream and the session exist.
async fn open(target: &NatsTarget, args: &TailArgs) -> anyhow::Result<JetStreamLog> {
    let mut told = false;
    loop {
        let error = match JetStreamLog::open(target, &args.session_id).await {
            Ok(log) if log.held() > 0 => return Ok(log),
            Ok(_) => anyhow::anyhow!(
                "stream {} holds no events of session {}",
                target.stream,
                args.session_id
            ),
            Err(error) => error.into(),
        };
        if !args.wait {
            return Err(error);
        }
        if !told {
            tracing::info!("waiting: {error}");
            told = true;
        }
        tokio::time::sleep(APPEAR_POLL).await;
    }
}

/// Outputs of the followed session (read outside any request).
struct Outputs(Arc<str>, Arc<str>);

impl Outputs {
    fn of(&self, kind: OutputKind) -> Output {
        Output {
            session_id: Arc::clone(&self.0),
            request_id: Arc::clone(&self.1),
            kind,
        }
    }

    /// `entry` with the ui events `timeline` projects from it.
    fn event(&self, timeline: &mut TimelineProjection, entry: LogEntry) -> Output {
        let ui_events = timeline.apply(&entry);
        self.of(OutputKind::Event(Arc::new(CommittedEvent {
            entry: Arc::new(entry),
            ui_events,
            context: None,
        })))
    }
}
