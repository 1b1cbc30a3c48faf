//! A database connection every served session shares, connected again when it no longer
//! answers: a PostgreSQL connection ends with a server restart, a network failure or a
//! `--steal-lease`, and the sessions that wrote with it (their locks were its own) stop; the
//! ones loaded after use the new one. A SQLite connection is a file this process holds and
//! always answers.

use std::sync::RwLock;

use reel_server::SourceError;
use reel_storage::{Access, Location, TimelineStore, open_timeline};

use super::sessions::failed;

pub(super) struct SharedConnection {
    current: RwLock<TimelineStore>,
    location: Location,
}

impl SharedConnection {
    /// `store`, connected to `location`.
    pub(super) fn new(store: TimelineStore, location: Location) -> Self {
        Self {
            current: RwLock::new(store),
            location,
        }
    }

    /// A store on the connection, after checking that it answers.
    pub(super) async fn store(&self) -> Result<TimelineStore, SourceError> {
        let mut store = self.current();
        if store.ping().await.is_ok() {
            return Ok(store);
        }
        self.reconnect().await
    }

    /// A store on the connection's reading sibling, after checking that it answers (one round
    /// trip, not two).
    pub(super) async fn reader(&self) -> Result<TimelineStore, SourceError> {
        let mut reader = self.current().reader().await.map_err(failed)?;
        if reader.ping().await.is_ok() {
            return Ok(reader);
        }
        self.reconnect().await?.reader().await.map_err(failed)
    }

    /// A store on the connection as it is, unchecked.
    pub(super) fn current(&self) -> TimelineStore {
        // A panic while it was held left the store whole (it is only ever replaced).
        let current = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        current.shared()
    }

    async fn reconnect(&self) -> Result<TimelineStore, SourceError> {
        tracing::warn!(
            "the connection to {} no longer answers; connecting again",
            self.location.shown()
        );
        let fresh = open_timeline(&self.location, Access::ReadWrite)
            .await
            .map_err(failed)?;
        let store = fresh.shared();
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
        Ok(store)
    }
}
