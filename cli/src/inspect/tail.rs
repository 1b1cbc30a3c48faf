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
//! SQLite is polled (a cheap indexed query); PostgreSQL wakes tail with LISTEN/NOTIFY, every
//! commit notifying the `reel_events` channel, and is polled once a second besides, to notice a
//! writer that died.

use std::{io::IsTerminal, time::Duration};

use reel_engine::{DoneStatus, Projection, SessionCatalog, TimelineProjection};
use reel_proto::rpc::UiEventFrame;
use reel_storage::TimelineStore;

use super::{Database, LogPages, PAGE, Reader, frames::FrameWriter, show, tail_text::TextTail};

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
    /// How often to look for new events in a SQLite database, in ms.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub poll_ms: u64,
    #[command(flatten)]
    pub database: Database,
}

/// Where tail prints.
enum Printer {
    Frames(FrameWriter<std::io::StdoutLock<'static>>),
    Text(TextTail<std::io::StdoutLock<'static>>),
}

impl Printer {
    fn event(&mut self, event: UiEventFrame) -> std::io::Result<()> {
        match self {
            Printer::Frames(frames) => frames.ui_event(event),
            Printer::Text(text) => text.event(&event),
        }
    }

    fn end(&mut self, timeline: &TimelineProjection, status: DoneStatus) -> std::io::Result<()> {
        match self {
            Printer::Frames(frames) => {
                if status == DoneStatus::Ok {
                    frames.snapshot(timeline.snapshot())?;
                }
                frames.done(status)?;
                frames.flush()
            }
            Printer::Text(text) => {
                text.done(status)?;
                text.flush()
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Printer::Frames(frames) => frames.flush(),
            Printer::Text(text) => text.flush(),
        }
    }
}

pub async fn run(args: TailArgs) -> Result<(), String> {
    let id = args.session_id.as_str();
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let Some((mut reader, events)) = (tokio::select! {
        found = find(&args) => found?,
        _ = &mut interrupted => None,
    }) else {
        return Ok(());
    };
    let mut timeline = timeline_at(&mut reader.store, id, events).await?;
    let failed = |e: std::io::Error| format!("cannot write: {e}");
    let output = args.output.unwrap_or(if std::io::stdout().is_terminal() {
        TailOutput::Text
    } else {
        TailOutput::Jsonl
    });
    let mut printer = match output {
        TailOutput::Jsonl => {
            let mut frames = FrameWriter::new(std::io::stdout().lock(), id);
            frames.hello().map_err(failed)?;
            frames.snapshot(timeline.snapshot()).map_err(failed)?;
            Printer::Frames(frames)
        }
        TailOutput::Text => {
            let so_far = show::fold(&mut reader.store, id, events).await?;
            let mut text = TextTail::new(std::io::stdout().lock(), show::Paint::for_stdout());
            text.start(id, events, &so_far).map_err(failed)?;
            Printer::Text(text)
        }
    };
    printer.flush().map_err(failed)?;
    let store = &mut reader.store;
    let mut after = events;
    let mut writer_seen = false;
    loop {
        let page = store
            .events_page(id, after, PAGE)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(last) = page.last() {
            after = last.ordinal;
            for entry in &page {
                for event in timeline.apply(entry) {
                    printer.event(event).map_err(failed)?;
                }
            }
            printer.flush().map_err(failed)?;
            continue;
        }
        let writing = store.writer(id).await.map_err(|e| e.to_string())?.is_some();
        writer_seen |= writing;
        let waiting_for_one = args.wait && !writer_seen;
        if !writing && !waiting_for_one {
            // The writer may have committed its last events just before it let go.
            let rest = store
                .events_page(id, after, 1)
                .await
                .map_err(|e| e.to_string())?;
            if rest.is_empty() {
                break;
            }
            continue;
        }
        let poll = Duration::from_millis(args.poll_ms);
        let wait = store.wait_for_commits(id, poll);
        tokio::select! {
            _ = &mut interrupted => return printer.end(&timeline, DoneStatus::Stopped).map_err(failed),
            waited = wait => waited.map_err(|e| e.to_string())?,
        }
    }
    printer.end(&timeline, DoneStatus::Ok).map_err(failed)
}

/// The database and the session, and its events so far; with `--wait`, once they exist.
async fn find(args: &TailArgs) -> Result<Option<(Reader, u64)>, String> {
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

/// The timeline up to `at`: from the newest snapshot at or before it, then its later events.
async fn timeline_at(
    store: &mut TimelineStore,
    id: &str,
    at: u64,
) -> Result<TimelineProjection, String> {
    let state = store
        .snapshot_at_most(id, at)
        .await
        .map_err(|e| e.to_string())?;
    let mut timeline = state.timeline;
    let from = timeline.last_ordinal();
    LogPages::new(store, id, from, at)
        .each("reading", |entry| {
            timeline.apply(entry);
            Ok(())
        })
        .await?;
    Ok(timeline)
}
