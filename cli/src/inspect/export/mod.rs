//! `reel export SESSION --format jsonl|markdown|html|turns [--at ORDINAL] [-o FILE]`.
//!
//! Every format is regenerated from the log up to the ordinal, streamed page by page. Where it
//! goes is decided first ([`destination`]): a file is written next to its destination and
//! renamed into place when complete, so a failed export never leaves half a file under the name
//! asked for; a device or FIFO is opened; nothing else (a directory, the database) is touched.

mod destination;
mod html;
mod jsonl;
mod markdown;

use std::{
    io::{BufWriter, Write},
    path::PathBuf,
};

use reel_engine::{ModelContextProjection, Projection};

use super::{Database, LogPages, resolve_at, show};
use crate::same_file::InUse;
use destination::Output;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The frame stream a client would have seen: hello, snapshot, ui events, snapshot, done.
    Jsonl,
    /// A readable transcript.
    Markdown,
    /// One self-contained HTML page (no script, nothing loaded from the network).
    Html,
    /// The model context as a JSON list of messages in the OpenAI chat format, led by the
    /// newest run's system prompt.
    Turns,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The session to export.
    pub session_id: String,
    #[arg(long, value_enum)]
    pub format: Format,
    /// Export the session as it was at this ordinal (default: its newest).
    #[arg(long, value_name = "ORDINAL")]
    pub at: Option<u64>,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: ExportArgs) -> Result<(), String> {
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(&args.session_id).await?;
    let store = &mut reader.store;
    let at = resolve_at(&summary, args.at)?;
    let id = summary.session_id.as_str();
    match &args.output {
        None => {
            let out = BufWriter::new(std::io::stdout().lock());
            export(store, args.format, id, at, out).await?;
            Ok(())
        }
        Some(path) => {
            let in_use = match reader.location.sqlite_path() {
                Some(db) => InUse::database(db, "the timeline database this export reads"),
                None => Vec::new(),
            };
            let output = Output::create(destination::choose(path, &in_use)?)?;
            let out = export(store, args.format, id, at, BufWriter::new(output)).await?;
            let output = out
                .into_inner()
                .map_err(|e| format!("cannot write {}: {}", path.display(), e.error()))?;
            output.finish()
        }
    }
}

/// Writes the export to `out` and hands `out` back, flushed.
async fn export<W: Write>(
    store: &mut reel_storage::TimelineStore,
    format: Format,
    session_id: &str,
    at: u64,
    out: W,
) -> Result<W, String> {
    let failed = |e: std::io::Error| format!("cannot write the export: {e}");
    match format {
        Format::Jsonl => jsonl::write(store, session_id, at, out).await,
        Format::Markdown | Format::Html => {
            let transcript = show::fold(store, session_id, at).await?;
            let mut out = out;
            match format {
                Format::Markdown => markdown::write(&mut out, session_id, &transcript),
                _ => html::write(&mut out, session_id, &transcript),
            }
            .and_then(|()| out.flush())
            .map_err(failed)?;
            Ok(out)
        }
        Format::Turns => {
            let mut context = ModelContextProjection::new();
            // The system prompt is not part of the conversation: the newest run's is used.
            let mut system_prompt = String::new();
            LogPages::new(store, session_id, 0, at)
                .each("reading", |entry| {
                    context.apply(entry);
                    if let reel_proto::Any::ChatRunStarted(run) = &entry.event {
                        system_prompt.clone_from(&run.system_prompt);
                    }
                    Ok(())
                })
                .await?;
            let system = Some(system_prompt.as_str()).filter(|s| !s.is_empty());
            let messages = reel_engine::openai_messages(system, context.messages());
            let mut out = out;
            serde_json::to_writer_pretty(&mut out, &messages)
                .map_err(std::io::Error::other)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush())
                .map_err(failed)?;
            Ok(out)
        }
    }
}
