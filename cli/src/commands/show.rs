//! `reel show SESSION [--at ORDINAL]`: the timeline as a person reads it in a terminal.
//!
//! The stored session's outputs go to the transcript sink in its terminal form: colour when
//! stdout is a terminal (and NO_COLOR is not set), plain text otherwise, and session text with
//! its control characters shown rather than obeyed.

use reel_sinks::TranscriptFormat;

use crate::outputs::{self, Rendering, colour_on_stdout};
use crate::stored::{Database, progress, render, resolve_at};

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The session to show.
    pub session_id: String,
    /// Show the session as it was at this ordinal (default: its newest).
    #[arg(long, value_name = "ORDINAL")]
    pub at: Option<u64>,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(&args.session_id).await?;
    let at = resolve_at(&summary, args.at)?;
    let terminal = TranscriptFormat::Terminal {
        colour: colour_on_stdout(),
        events_in_log: summary.events,
    };
    let sink = outputs::sink(Rendering::Transcript(terminal), std::io::stdout());
    let id = summary.session_id.as_str();
    render(
        &mut reader.store,
        id,
        at,
        sink,
        (progress::events(at, "reading"), "stdout"),
    )
    .await
}
