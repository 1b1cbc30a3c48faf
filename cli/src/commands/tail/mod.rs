//! `reel tail SESSION`: follows a session another process is writing, printing it as it is
//! committed. As frames (the default when stdout is not a terminal): hello, a snapshot of the
//! session so far, the ui events of every newly committed event, and a snapshot and done when
//! the writer has gone (its lease released, its process dead or its heartbeat expired) and
//! everything it committed has been printed. As text for people (the default on a terminal):
//! the session as `reel show` prints it, then the new events as they land.
//!
//! Without `--wait`, tail of a session nobody writes prints it and ends. With `--wait` it waits
//! for the database, the session and a writer to appear, and ends when that writer has gone.
//!
//! `--after N` starts at ordinal N instead of the end; `--from nats://...` reads the session
//! from a JetStream stream instead of a database (`tail_jetstream.rs`).
//!
//! SQLite is polled (a cheap indexed query); PostgreSQL wakes tail with LISTEN/NOTIFY, every
//! commit notifying the `reel_events` channel, and is polled once a second besides, to notice a
//! writer that died.

mod jetstream;

use std::{io::IsTerminal, time::Duration};

use reel_engine::{DoneStatus, Fanout, SessionCatalog, StoredStream};
use reel_sinks::Transcript;
use reel_storage::TimelineStore;

use crate::{
    outputs::{self, Rendering, colour_on_stdout},
    stored::{Database, Reader, each_event},
};

/// How often `--wait` looks for the database and the session to appear.
const APPEAR_POLL: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TailOutput {
    /// Protocol frames, one JSON line each (the default when stdout is not a terminal).
    Jsonl,
    /// The session as a person reads it (the default on a terminal).
    Text,
}

#[derive(clap::Args, Debug)]
pub struct TailArgs {
    /// The session to follow.
    pub session_id: String,
    /// Wait for the database, the session and a writer to appear, and follow until that writer
    /// has gone (without it, a session nobody writes is printed and tail ends).
    #[arg(long)]
    pub wait: bool,
    /// What to print (default: text on a terminal, frames otherwise).
    #[arg(long, value_enum)]
    pub output: Option<TailOutput>,
    /// Start after this ordinal: the snapshot there, then every later event (default: the end
    /// of what is stored, so that only new events follow the snapshot).
    #[arg(long, value_name = "ORDINAL")]
    pub after: Option<u64>,
    /// Read the session from the JetStream stream a `--sink nats://...` keeps, not from a
    /// database: nats://HOST:PORT/STREAM[?subject_prefix=P&encoding=json|proto].
    #[arg(long, value_name = "URI", conflicts_with_all = ["timeline_db", "timeline_dsn"])]
    pub from: Option<String>,
    /// How often to look for new events in a SQLite database, in ms.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub poll_ms: u64,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: TailArgs) -> anyhow::Result<()> {
    if let Some(uri) = &args.from {
        return jetstream::run(&args, uri).await;
    }
    let id = args.session_id.as_str();
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let Some((mut reader, stored)) = (tokio::select! {
        found = find(&args) => found?,
        _ = &mut interrupted => None,
    }) else {
        return Ok(());
    };
    let events = args.after.unwrap_or(stored);
    if events > stored {
        anyhow::bail!("--after {events} is past the end of session {id} (it has {stored} events)");
    }
    let store = &mut reader.store;
    let output = args.output.unwrap_or(if std::io::stdout().is_terminal() {
        TailOutput::Text
    } else {
        TailOutput::Jsonl
    });
    let rendering = match output {
        TailOutput::Jsonl => Rendering::Frames {
            backend_events: false,
        },
        TailOutput::Text => {
            let mut so_far = Transcript::new();
            each_event(store, id, (0, events), "reading", |entry| {
                so_far.apply(entry);
                Ok(())
            })
            .await?;
            Rendering::Follow {
                colour: colour_on_stdout(),
                so_far,
                events_in_log: events,
            }
        }
    };
    let mut fanout = Fanout::new();
    fanout.attach(outputs::sink(rendering, std::io::stdout()));
    let followed = follow(store, &args, events, &mut fanout, interrupted).await;
    let failures = fanout.close().await;
    followed?;
    match failures.first() {
        Some(failure) => Err(anyhow::anyhow!("cannot write: {}", failure.message)),
        None => Ok(()),
    }
}

/// Hands `fanout` the session from `events` on as it is committed: hello, the snapshot at
/// `events`, each new event, and the snapshot and done `ok` once the writer has gone (done
/// `stopped` alone when the user stops tail).
async fn follow(
    store: &mut TimelineStore,
    args: &TailArgs,
    events: u64,
    fanout: &mut Fanout,
    mut interrupted: std::pin::Pin<&mut impl Future<Output = std::io::Result<()>>>,
) -> anyhow::Result<()> {
    let id = args.session_id.as_str();
    let mut stream = StoredStream::open(store, id, events, None).await?;
    fanout.send(stream.hello()).await;
    fanout.send(stream.snapshot()).await;
    let mut writer_seen = false;
    loop {
        fanout.flush().await;
        if fanout.is_empty() {
            // Stdout failed: there is nobody left to follow for.
            return Ok(());
        }
        let page = stream.next_page(store).await?;
        if !page.is_empty() {
            for output in page {
                fanout.send(output).await;
            }
            continue;
        }
        let writing = store.writer(id).await?.is_some();
        writer_seen |= writing;
        let waiting_for_one = args.wait && !writer_seen;
        if !writing && !waiting_for_one {
            // The writer may have committed its last events just before it let go.
            let rest = stream.next_page(store).await?;
            if rest.is_empty() {
                break;
            }
            for output in rest {
                fanout.send(output).await;
            }
            continue;
        }
        let poll = Duration::from_millis(args.poll_ms);
        let wait = store.wait_for_commits(id, poll);
        tokio::select! {
            _ = &mut interrupted => {
                fanout.send(stream.done(DoneStatus::Stopped)).await;
                return Ok(());
            }
            waited = wait => waited?,
        }
    }
    fanout.send(stream.snapshot()).await;
    fanout.send(stream.done(DoneStatus::Ok)).await;
    Ok(())
}

/// The database and the session, and its events so far; with `--wait`, once they exist.
async fn find(args: &TailArgs) -> anyhow::Result<Option<(Reader, u64)>> {
    loop {
        let opened = match args.database.open().await {
            Ok(mut reader) => match reader.find_session(&args.session_id).await {
                Ok(summary) => return Ok(Some((reader, summary.events))),
                Err(error) => error,
            },
            Err(error) => error,
        };
        if !args.wait {
            return Err(opened);
        }
        tokio::time::sleep(APPEAR_POLL).await;
    }
}
