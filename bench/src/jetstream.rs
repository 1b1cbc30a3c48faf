//! The JetStream benchmark: the same scripted reply through the SQLite timeline sink, through
//! the JetStream sink alone, and through both as `--session-id ... --sink nats://...` runs
//! them (JetStream publishing each event once SQLite has committed it), each run's done
//! waiting for every durable sink's acknowledgement.
//!
//! Prints events per second acknowledged and bytes per event stored (the SQLite file, the
//! stream's own count of its bytes) for each, and the ratio of JetStream's rate to SQLite's.
//! The stream is the bench's own, deleted at the end.

use std::path::Path;

use anyhow::Context;
use async_nats::jetstream;
use reel_engine::{Fanout, LogStore, SessionState, new_id};
use reel_nats::{JetStreamSink, NatsTarget};
use reel_sinks::TimelineDbSink;
use reel_storage::{Access, Location, open_timeline};

/// Which durable sinks a measured run has.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sinks {
    Sqlite,
    JetStream,
    Both,
}

impl Sinks {
    fn name(self) -> &'static str {
        match self {
            Sinks::Sqlite => "SQLite",
            Sinks::JetStream => "JetStream",
            Sinks::Both => "SQLite + JetStream",
        }
    }
}

/// Measures a reply of `deltas` deltas through each set of sinks, against the NATS server at
/// `server` (`nats://HOST:PORT`).
pub async fn run(deltas: usize, server: &str) -> anyhow::Result<bool> {
    let host = server.trim_start_matches("nats://").trim_end_matches('/');
    let stream = format!("REEL_BENCH_{}", std::process::id());
    let target = NatsTarget::parse(&format!("nats://{host}/{stream}?subject_prefix={stream}"))
        .map_err(|e| anyhow::anyhow!("--nats {e}"))?;
    let client = async_nats::connect(host)
        .await
        .with_context(|| format!("cannot connect to NATS at {host}"))?;
    let admin = jetstream::new(client);
    let _ = admin.delete_stream(&stream).await;
    println!(
        "reel bench: a scripted reply of {deltas} deltas through durable sinks (done waits for every acknowledgement)"
    );
    println!(
        "{:<20} {:>10} {:>10} {:>12} {:>12}",
        "sinks", "events", "seconds", "events/s", "bytes/event"
    );
    let dir = tempfile::tempdir()?;
    let mut rates = Vec::new();
    let measured = async {
        for sinks in [Sinks::Sqlite, Sinks::JetStream, Sinks::Both] {
            let session = format!("bench-{}", new_id());
            let database = dir.path().join(format!("{session}.db"));
            let stream_before = stream_bytes(&admin, &stream).await;
            let (events, seconds) =
                reply_through(sinks, &database, &target, &session, deltas as u64).await?;
            let mut bytes = stream_bytes(&admin, &stream).await - stream_before;
            if sinks != Sinks::JetStream {
                bytes += file_bytes(&database);
            }
            let rate = events as f64 / seconds;
            println!(
                "{:<20} {events:>10} {seconds:>10.3} {rate:>12.0} {:>12.1}",
                sinks.name(),
                bytes as f64 / events as f64
            );
            rates.push(rate);
        }
        anyhow::Ok(())
    }
    .await;
    let _ = admin.delete_stream(&stream).await;
    measured?;
    println!(
        "JetStream / SQLite events/s: {:.2}; SQLite + JetStream / SQLite: {:.2}",
        rates[1] / rates[0],
        rates[2] / rates[0]
    );
    Ok(true)
}

/// Streams the reply into a new session with `sinks`; returns the events and the seconds from
/// the prompt to the last acknowledgement.
async fn reply_through(
    sinks: Sinks,
    database: &Path,
    target: &NatsTarget,
    session_id: &str,
    deltas: u64,
) -> anyhow::Result<(u64, f64)> {
    let mut fanout = Fanout::new();
    if sinks != Sinks::JetStream {
        let mut store = open_timeline(&Location::path(database), Access::ReadWrite).await?;
        store.lease(session_id).await?;
        fanout.attach(Box::new(TimelineDbSink::new(
            store,
            session_id,
            SessionState::default(),
            0,
        )));
    }
    if sinks != Sinks::Sqlite {
        let committed = fanout.store_committed();
        let sink = JetStreamSink::connect(target, session_id, None, 0, committed).await?;
        fanout.attach(Box::new(sink));
    }
    super::durable::reply_through(fanout, session_id, deltas, || {})
        .await
        .with_context(|| sinks.name())
}

/// The bytes the stream stores (0 before it exists).
async fn stream_bytes(admin: &jetstream::Context, stream: &str) -> u64 {
    match admin.get_stream(stream).await {
        Ok(mut stream) => stream.info().await.map_or(0, |info| info.state.bytes),
        Err(_) => 0,
    }
}

/// A SQLite database's bytes: the file and its write-ahead log.
fn file_bytes(database: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    size(database) + size(&database.with_extension("db-wal"))
}
