//! `reel export SESSION --format jsonl|markdown|html|turns|parquet [--at ORDINAL] [-o FILE]`, and
//! `reel export --all [--since DATE] --format parquet -o DIR`.
//!
//! Every format is the stored session's outputs up to the ordinal (the ones its live run
//! produced, read page by page) handed to the format's sink, the sink a live run's `--output`
//! uses. Where it goes is decided first ([`destination`]): a file is written next to its destination and
//! renamed into place when complete, so a failed export never leaves half a file under the name
//! asked for; a device or FIFO is opened; nothing else (a directory, the database) is touched.

mod destination;
mod parquet;

use anyhow::Context;
use std::path::PathBuf;

use crate::stored::{Database, Format, progress, render, resolve_at};
use crate::{outputs, same_file::InUse};
use destination::Output;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The session to export.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub session_id: Option<String>,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Export the session as it was at this ordinal (default: its newest).
    #[arg(long, value_name = "ORDINAL", conflicts_with = "all")]
    pub at: Option<u64>,
    /// Write to this file instead of stdout (with --all: into this directory, new or empty).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Every session of the database (Parquet only), a file per day under -o DIR.
    #[arg(long)]
    pub all: bool,
    /// With --all: only the events appended at or after this time (2026-11-27 or
    /// 2026-11-27T10:00:00Z).
    #[arg(long, value_name = "DATE", requires = "all", value_parser = reel_server::parse_date_ms)]
    pub since: Option<u64>,
    #[command(flatten)]
    pub database: Database,
}

/// What `reel export` writes: one of the stream's formats, or Parquet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// The frame stream a client would have seen: hello, snapshot, ui events, snapshot, done.
    Jsonl,
    /// A readable transcript.
    Markdown,
    /// One self-contained HTML page (no script, nothing loaded from the network).
    Html,
    /// The model context as a JSON list of messages in the OpenAI chat format.
    Turns,
    /// One row per log event, for DuckDB, pandas or Spark (needs -o).
    Parquet,
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let mut reader = args.database.open().await?;
    let in_use = match reader.location.sqlite_path() {
        Some(db) => InUse::database(db, "the timeline database this export reads"),
        None => Vec::new(),
    };
    let stream_format = match args.format {
        ExportFormat::Jsonl => Some(Format::Jsonl),
        ExportFormat::Markdown => Some(Format::Markdown),
        ExportFormat::Html => Some(Format::Html),
        ExportFormat::Turns => Some(Format::Turns),
        ExportFormat::Parquet => None,
    };
    let Some(id) = &args.session_id else {
        let Some(dir) = args.output.as_deref().filter(|_| stream_format.is_none()) else {
            return Err(anyhow::anyhow!(
                "--all exports Parquet into a directory: --format parquet -o DIR"
            ));
        };
        let (sessions, days, rows) =
            parquet::all_sessions(&mut reader.store, args.since, dir).await?;
        tracing::info!(
            "exported {rows} events of {sessions} sessions into {days} day files under {}",
            dir.display()
        );
        return Ok(());
    };
    let summary = reader.find_session(id).await?;
    let at = resolve_at(&summary, args.at)?;
    let id = summary.session_id.as_str();
    let Some(format) = stream_format else {
        let Some(path) = &args.output else {
            return Err(anyhow::anyhow!(
                "Parquet is a binary file: name it with -o FILE"
            ));
        };
        return parquet::one_session(&mut reader.store, id, at, path, &in_use).await;
    };
    let rendering = format.rendering();
    let Some(path) = &args.output else {
        let sink = outputs::sink(rendering, std::io::stdout());
        return render(
            &mut reader.store,
            id,
            at,
            sink,
            (progress::events(at, "exporting"), "the export"),
        )
        .await;
    };
    let output = Output::create(destination::choose(path, &in_use)?)?;
    let writer = output
        .writer()
        .with_context(|| format!("cannot write {}", path.display()))?;
    let sink = outputs::sink(rendering, writer);
    render(
        &mut reader.store,
        id,
        at,
        sink,
        (progress::events(at, "exporting"), "the export"),
    )
    .await?;
    output.finish()
}
