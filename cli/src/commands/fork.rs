//! `reel fork SESSION --at ORDINAL --new-session ID`: a new session whose history is the first
//! ORDINAL events of another. Resuming it continues from there; the parent is only read.
//!
//! The events are copied page by page (one transaction each), then the new session gets its
//! entities and a snapshot as of the fork point, so it resumes without replaying anything. A
//! fork taken in the middle of a run holds that run open: resuming it closes the run as
//! interrupted, as after a crash.

use anyhow::Context;

use reel_engine::LogStore;

use crate::stored::{Database, check_fork_point, copy_leased};

#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// The session to fork.
    pub session_id: String,
    /// The new session holds the events up to and including this ordinal.
    #[arg(long, value_name = "ORDINAL")]
    pub at: u64,
    /// The new session's id.
    #[arg(long, value_name = "ID")]
    pub new_session: String,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: ForkArgs) -> anyhow::Result<()> {
    // The writer first: it brings a database an older reel wrote up to date.
    let mut writer = args.database.open_for_writing().await?;
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(&args.session_id).await?;
    let mut reader = reader.store;
    if args.at > summary.events {
        return Err(anyhow::anyhow!(
            "session {:?} has {} events; it cannot be forked at {}",
            args.session_id,
            summary.events,
            args.at
        ));
    }
    check_fork_point(args.at)?;
    let new = args.new_session.as_str();
    reel_engine::check_session_id(new).context("--new-session")?;
    if writer.exists(new).await? {
        return Err(anyhow::anyhow!(
            "there is a session {new:?} already; pick another id"
        ));
    }
    copy_leased(&mut reader, &mut writer, &args.session_id, new, args.at).await?;
    tracing::info!(
        "forked session {} at ordinal {} as {new}",
        args.session_id,
        args.at
    );
    Ok(())
}
