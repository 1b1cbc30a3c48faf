//! `reel export SESSION --format jsonl|markdown|html|turns [--at ORDINAL] [-o FILE]`.
//!
//! Every format is the stored session's outputs up to the ordinal (the ones its live run
//! produced, read page by page) handed to the format's sink, the sink a live run's `--output`
//! uses. Where it goes is decided first ([`destination`]): a file is written next to its destination and
//! renamed into place when complete, so a failed export never leaves half a file under the name
//! asked for; a device or FIFO is opened; nothing else (a directory, the database) is touched.

mod destination;

use anyhow::Context;
use std::path::PathBuf;

use crate::stored::{Database, Format, progress, render, resolve_at};
use crate::{outputs, same_file::InUse};
use destination::Output;

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

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(&args.session_id).await?;
    let at = resolve_at(&summary, args.at)?;
    let id = summary.session_id.as_str();
    let rendering = args.format.rendering();
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
    let in_use = match reader.location.sqlite_path() {
        Some(db) => InUse::database(db, "the timeline database this export reads"),
        None => Vec::new(),
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
