//! A store's database connection, which the stores of one process may share.
//!
//! A process that hosts many sessions (`reel serve`) cannot give each its own connection: an
//! SQLite connection in sqlx is a thread of its own with its own page cache (megabytes per
//! session), and a PostgreSQL connection is a server process (the server allows a hundred or
//! so). Its sessions' stores share one writing and one reading connection instead, taking
//! turns: each operation holds the connection until it ends, so a transaction is never
//! interleaved with another store's statements. SQLite lets one writer in at a time anyway.

use std::sync::{Arc, Weak};

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

    /// A handle that does not keep the connection open.
    pub(crate) fn downgrade(&self) -> Weak<Mutex<C>> {
        Arc::downgrade(&self.0)
    }
}

impl<C> SharedConnection<C>
where
    C: sqlx::Connection,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
    <C::Database as sqlx::Database>::Arguments: sqlx::IntoArguments<C::Database>,
{
    /// Runs one statement that takes no values and whose rows are not read (`SELECT 1`, a
    /// checkpoint), once no other store is using the connection.
    pub(crate) async fn execute(&self, statement: &'static str) -> Result<(), sqlx::Error> {
        let mut conn = self.lock().await;
        sqlx::query::<C::Database>(statement)
            .execute(&mut *conn)
            .await
            .map(drop)
    }
}

/// The reading connection a store and the stores sharing its connection read beside it,
/// opened on first use.
pub(crate) type SharedReader<C> = Arc<OnceCell<SharedConnection<C>>>;
