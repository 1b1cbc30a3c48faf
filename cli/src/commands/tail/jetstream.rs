//! `reel tail SESSION --from nats://HOST:PORT/STREAM`: follows a session from the JetStream
//! stream a `--sink nats://...` keeps, with no database: the same frames (or text) as a tail of
//! the database, made by the same timeline projection from the stream's events.
//!
//! The stream knows nothing of writers: without `--wait`, tail prints what the stream holds
//! when it starts and ends; with `--wait` it waits for the stream and the session to appear
//! and follows until it is interrupted (done `stopped`).

use std::{io::IsTerminal, time::Duration};

use futures::FutureExt;
use reel_engine::{DoneStatus, Fanout, StoredStream, TimelineProjection};
use reel_nats::{JetStreamLog, NatsTarget};
use reel_sinks::Transcript;

use super::{TailArgs, TailOutput};
use crate::outputs::{self, Rendering, colour_on_stdout};

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
    let (timeline, so_far) = read_up_to(&mut log, after, output == TailOutput::Text).await?;
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
    let mut stream = StoredStream::of_timeline(id, timeline);
    fanout.send(stream.hello()).await;
    fanout.send(stream.snapshot()).await;
    let end = (!args.wait).then_some(held);
    let status = follow(
        &mut log,
        (after, end),
        &mut stream,
        &mut fanout,
        interrupted,
    )
    .await?;
    if status == DoneStatus::Ok {
        fanout.send(stream.snapshot()).await;
    }
    fanout.send(stream.done(status)).await;
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
    stream: &mut StoredStream,
    fanout: &mut Fanout,
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
        fanout.send(stream.event(entry)).await;
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
