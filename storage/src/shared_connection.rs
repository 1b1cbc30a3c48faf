//! A store's database connection, which the stores of one process may share.
//!
//! A process that hosts many sessions (`reel serve`) cannot give each its own connection: an
//! SQLite connection in sqlx is a thread of its own with its own page cache (megabytes per
//! session), and a PostgreSQL connection is a server process (the server allows a hundred or
//! so). Its sessions' stores share one writing and one reading connection instead, taking
//! turns: each operation holds the connection until it ends, so a transaction is never
//! interleaved with another store's statements. SQLite lets one writer in at a time anyway.

use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard, OnceCell};

/// A connection, owned by one store or shared by several.
pub(crate) struct SharedConnection<C>(Arc<Mutex<C>>);

impl<C> SharedConnection<C> {
    pub(crate) fn new(conn: C) -> Self {
        Self(Arc::new(Mutex::new(conn)))
    }

    /// The connection, once no other store is using it.
    pub(crate) async fn lock(&self) -> MutexGuard<'_, C> {
        self.0.lock().await
    }

    /// Another handle on the same connection.
    pub(crate) fn share(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// The reading connection a store and the stores sharing its connection read beside it,
/// opened on first use.
pub(crate) type SharedReader<C> = Arc<OnceCell<SharedConnection<C>>>;
