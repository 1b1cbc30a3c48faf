//! `reel sessions`: the sessions of a timeline database, newest first.
//!
//! One query over the `sessions` table, whose run count and last run status every commit keeps
//! up to date: listing never reads a log, however long the logs are.

use anyhow::Context;
use std::io::Write;

use reel_engine::{SessionCatalog, SessionSummary};

use reel_sinks::{one_line, printable};

use crate::stored::Database;

#[derive(clap::Args, Debug)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub database: Database,
    /// One JSON array of sessions instead of a table, for scripts.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: SessionsArgs) -> anyhow::Result<()> {
    let location = args.database.location()?;
    let nothing_yet =
        args.database.is_default() && location.sqlite_path().is_some_and(|path| !path.exists());
    let sessions = if nothing_yet {
        // A fresh machine: the default database does not exist yet, and listing must not
        // create it.
        Vec::new()
    } else {
        let mut reader = args.database.open().await?;
        reader.store.sessions().await?
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &sessions)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        write_table(&mut out, &sessions)
    };
    written
        .and_then(|()| out.flush())
        .context("cannot write the list")
}

fn write_table(out: &mut impl Write, sessions: &[SessionSummary]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<38} {:<20} {:<20} {:>5} {:>9}  {:<9} TITLE",
        "SESSION", "CREATED", "UPDATED", "RUNS", "EVENTS", "LAST RUN"
    )?;
    for s in sessions {
        writeln!(
            out,
            "{:<38} {:<20} {:<20} {:>5} {:>9}  {:<9} {}",
            printable(&s.session_id),
            timestamp(s.created_at_ms),
            timestamp(s.updated_at_ms),
            s.runs,
            s.events,
            if s.last_run_status.is_empty() {
                "-"
            } else {
                &s.last_run_status
            },
            one_line(&s.title, 60)
        )?;
    }
    Ok(())
}

/// Milliseconds since the epoch as `2026-11-25T10:00:00Z`.
pub fn timestamp(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}
