//! `reel prune (--older-than DURATION | --keep-last N) [--dry-run]`: removes whole sessions
//! from a timeline database for their age, never one a live process holds, and remembers each
//! (a reader asking for one is told it is gone). `--dry-run` lists what would go.

use std::{io::Write, time::Duration};

use reel_engine::Retention;
use reel_storage::prune;

use crate::stored::Database;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("retention").required(true).args(["older_than", "keep_last"])))]
pub struct PruneArgs {
    /// Remove the sessions not written for this long (e.g. 30d, 12h).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Keep the N sessions written last and remove the others.
    #[arg(long, value_name = "N")]
    pub keep_last: Option<usize>,
    /// List the sessions that would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: PruneArgs) -> anyhow::Result<()> {
    let retention = match (args.older_than, args.keep_last) {
        (Some(age), _) => Retention::OlderThan(age),
        (None, Some(n)) => Retention::KeepLast(n),
        (None, None) => unreachable!("clap requires one of them"),
    };
    let mut store = args.database.open_for_writing().await?;
    let pruned = prune(&mut store, retention, args.dry_run).await?;
    let mut out = std::io::stdout().lock();
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for session in &pruned.removed {
        writeln!(out, "{verb} {}", session.session_id)?;
    }
    for (id, why) in &pruned.held {
        writeln!(out, "kept {id}: {why}")?;
    }
    tracing::info!(
        "{verb} {} sessions, kept {} a process holds",
        pruned.removed.len(),
        pruned.held.len()
    );
    Ok(())
}
