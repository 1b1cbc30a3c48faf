//! `reel rm SESSION`: deletes a session (its events, entities, snapshots and turns) from a
//! timeline database, and its turns from a turns database if one is named. It takes the
//! session's lease first, so it refuses while a writer holds the session and no writer can
//! start in the middle of the delete.

use reel_engine::LogStore;

use crate::stored::{Database, TurnsDatabase};

#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// The session to delete.
    pub session_id: String,
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub turns: TurnsDatabase,
}

pub async fn run(args: RmArgs) -> anyhow::Result<()> {
    let id = args.session_id.as_str();
    let mut store = args
        .database
        .lease_existing(id, "deleting the session")
        .await?;
    let removed = store.remove(id).await;
    let released = store.release(id).await;
    removed?;
    released?;
    if let Some(mut turns) = args.turns.open().await? {
        turns.remove(id).await?;
    }
    tracing::info!("deleted session {id}");
    Ok(())
}
