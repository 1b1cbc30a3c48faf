//! Hearing of commits on PostgreSQL: every commit notifies a channel with its session's id
//! (LISTEN/NOTIFY). One listening connection serves a store and every store
//! [`crate::TimelineStore::shared`] with it or read beside it: a server following many
//! sessions written elsewhere holds one connection for them all, not one per stream.

use std::sync::Arc;

use reel_engine::StoreError;
use sqlx::postgres::PgListener;
use tokio::sync::{OnceCell, broadcast};

/// The channel every commit notifies, with the session id as payload.
pub(crate) const NOTIFY_CHANNEL: &str = "reel_events";

/// Notices a listener may be ahead of its slowest follower by; one further behind counts as
/// having heard of a commit (it reads the store again, which is all a notice asks).
const NOTICES: usize = 1024;

/// The session ids of commits, as one listening connection hears them; shared.
pub(crate) type CommitNotices = Arc<OnceCell<broadcast::Sender<Arc<str>>>>;

/// Starts the listening connection of `notices` unless it runs, and subscribes to it.
pub(crate) async fn subscribe(
    notices: &CommitNotices,
    dsn: &str,
    shown: &str,
) -> Result<broadcast::Receiver<Arc<str>>, StoreError> {
    let sender = notices
        .get_or_try_init(async || {
            let failed = |e: sqlx::Error| {
                StoreError::database(format!("cannot listen for commits on {shown}"), e)
            };
            let mut listener = PgListener::connect(dsn).await.map_err(failed)?;
            listener.listen(NOTIFY_CHANNEL).await.map_err(failed)?;
            let (sender, _) = broadcast::channel(NOTICES);
            tokio::spawn(relay(listener, sender.clone(), shown.to_owned()));
            Ok::<_, StoreError>(sender)
        })
        .await?;
    Ok(sender.subscribe())
}

/// Passes each notice on, for as long as the process runs. sqlx's listener reconnects by
/// itself; while it cannot, followers still look at the store every second.
async fn relay(mut listener: PgListener, sender: broadcast::Sender<Arc<str>>, shown: String) {
    loop {
        match listener.recv().await {
            Ok(notice) => {
                let _ = sender.send(Arc::from(notice.payload()));
            }
            Err(error) => {
                tracing::warn!("listening for commits on {shown}: {error}; trying again");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

/// Tells followers of `session_id` that it has new events: sent inside the transaction that
/// stores them, PostgreSQL delivers it when they become visible.
pub(crate) async fn notify_commit(
    conn: &mut sqlx::PgConnection,
    session_id: &str,
) -> Result<(), reel_engine::StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(NOTIFY_CHANNEL)
        .bind(session_id)
        .execute(conn)
        .await
        .map(drop)
        .map_err(crate::rows::db)
}
