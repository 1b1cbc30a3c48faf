//! The PostgreSQL store: the same tables as SQLite (schema in `migrations/postgres`), shared by
//! many processes on many machines, one writer per session.
//!
//! The lease is a session-level advisory lock on the store's connection: the server drops it
//! when the connection ends, so a killed process frees its sessions by itself. Events go in with
//! one `INSERT ... SELECT FROM UNNEST(...)` per commit (about 100k rows/s) instead of a
//! statement per row (about 0.5k/s).
//!
//! reel's tables live in the connection's current schema (the first of its `search_path`, which
//! a DSN sets with `?options=-csearch_path%3DNAME`). Other programs' tables may share that
//! schema; tables named like reel's without reel's migration table, or another program's
//! migration table, make reel refuse the database untouched. A read-only store's connection
//! refuses every write.

use std::{str::FromStr, sync::Arc, time::Duration};

use reel_engine::{Commit, StoreError};
use sqlx::{Connection, PgConnection, Row, postgres::PgConnectOptions};

use tokio::sync::broadcast;

use crate::{
    Access, postgres_commit,
    postgres_notices::{self, CommitNotices},
    postgres_search_docs::DocumentWriting,
    rows::db,
    schema::{self, MIGRATION_TABLE, POSTGRES_MIGRATIONS, REEL_TABLES, Refusal, Schema},
    shared_connection::{SharedConnection, SharedReader},
    sql_store::Backend,
};

/// The advisory lock of session `$1`: its id hashed with the schema that holds reel's tables.
/// Advisory locks are the database's, not a schema's: keyed by the id alone, a session "s" of
/// one deployment (its own schema, see the module doc) kept every other deployment in the same
/// database from leasing its own session "s" (migration 0011).
macro_rules! lease_key {
    () => {
        "hashtextextended(quote_ident(current_schema()) || '.' || $1, 0)"
    };
}

/// How a commit's lease check finds the holder of a session's advisory lock (a bigint lock
/// shows in pg_locks as classid, the high half, and objid, the low half).
const LOCK_HOLDER: &str = concat!(
    "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid, \
     (SELECT ",
    lease_key!(),
    " AS h) k \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid::text::bigint = ((k.h >> 32) & 4294967295) \
     AND l.objid::text::bigint = (k.h & 4294967295) \
     AND l.pid <> pg_backend_pid() LIMIT 1"
);

/// A timeline database on a PostgreSQL server.
pub struct PostgresStore {
    pub(crate) conn: SharedConnection<PgConnection>,
    /// The reading connection [`Self::reader`] hands out, shared with the stores sharing `conn`.
    readers: SharedReader<PgConnection>,
    /// The DSN without its password, for messages.
    pub(crate) shown: String,
    /// The DSN itself (never shown): a follower's listener connects with it.
    dsn: String,
    /// Hears of commits, once a follower asks ([`SessionCatalog::wait_for_commits`]); one
    /// connection for this store and the stores sharing its connection.
    notices: CommitNotices,
    /// This store's place among the notices, kept between waits so none is missed.
    heard: Option<broadcast::Receiver<Arc<str>>>,
    /// How commits write the search documents of their entities: always, but for `reel
    /// bench`'s measure of what the index costs (see [`Self::without_search_documents`]).
    pub(crate) writing: DocumentWriting,
}

impl PostgresStore {
    /// A read-only connection to the same database (see
    /// [`crate::TimelineStore::reader`]): opened by the first call, shared by every reader of
    /// this store and of the stores sharing its connection.
    pub async fn reader(&self) -> Result<Self, StoreError> {
        let conn = self
            .readers
            .get_or_try_init(async || {
                let store = Self::connect(&self.dsn, Access::ReadOnly).await?;
                Ok::<_, StoreError>(store.conn)
            })
            .await?
            .share();
        Ok(self.on(conn))
    }

    /// Another store on this store's connection (see [`crate::TimelineStore::shared`]).
    pub fn shared(&self) -> Self {
        self.on(self.conn.share())
    }

    fn on(&self, conn: SharedConnection<PgConnection>) -> Self {
        Self {
            conn,
            readers: Arc::clone(&self.readers),
            shown: self.shown.clone(),
            dsn: self.dsn.clone(),
            notices: Arc::clone(&self.notices),
            heard: None,
            writing: self.writing,
        }
    }

    /// This store, its commits writing no search documents: for `reel bench`, which measures
    /// what the search index costs writes against the same store without it (on SQLite the
    /// database's triggers write them, and the bench drops those). A search then finds nothing
    /// this store committed.
    #[doc(hidden)]
    pub fn without_search_documents(mut self) -> Self {
        self.writing = DocumentWriting::Off;
        self
    }

    /// A second read-write connection to the same database.
    pub async fn sibling(&self) -> Result<Self, StoreError> {
        Self::connect(&self.dsn, Access::ReadWrite).await
    }

    /// Connects to `dsn` (`postgres://user@host:port/database`). For writing, reel's schema is
    /// created or brought up to date; for reading, it must be there and current, and the
    /// connection refuses writes.
    pub async fn connect(dsn: &str, access: Access) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(dsn)
            .map_err(|e| StoreError::database("invalid PostgreSQL DSN", e))?
            .application_name(&format!("reel/{}", std::process::id()));
        let shown = format!(
            "postgres://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        let mut conn = PgConnection::connect_with(&options)
            .await
            .map_err(|e| StoreError::database(format!("cannot connect to {shown}"), e))?;
        if access == Access::ReadWrite {
            create_missing_schema(&mut conn).await.map_err(|e| {
                StoreError::database(format!("cannot create the schema {shown} names"), e)
            })?;
        }
        let schema = read_schema(&mut conn)
            .await
            .map_err(|e| StoreError::database(format!("cannot read the schema of {shown}"), e))?;
        match (schema, access) {
            (Err(why), _) => {
                return Err(StoreError::Foreign(format!(
                    "{shown} is not a reel timeline database: {why}; it was left untouched (give reel a schema of its own with ?options=-csearch_path%3Dreel)"
                )));
            }
            (Ok(Schema::Empty), Access::ReadOnly) => {
                return Err(StoreError::NotFound(format!(
                    "{shown} holds no reel timeline yet (a writing command such as run-command --session-id creates one)"
                )));
            }
            (Ok(Schema::Reel { pending }), Access::ReadOnly) if pending > 0 => {
                return Err(StoreError::Unusable(format!(
                    "{shown} was written by an older reel; a writing command (run-command --resume, replay, fork) upgrades it, and read-only commands never change a database"
                )));
            }
            (Ok(_), Access::ReadOnly) => {
                sqlx::query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                    .execute(&mut conn)
                    .await
                    .map_err(|e| StoreError::database(&shown, e))?;
            }
            (Ok(_), Access::ReadWrite) => {
                schema::bring_up_to_date(&POSTGRES_MIGRATIONS, &mut conn, &shown).await?;
            }
        }
        // Only a writer writes documents; a reader never asks.
        let writing = match access {
            Access::ReadWrite => DocumentWriting::of_database(&mut conn)
                .await
                .map_err(|e| StoreError::database(&shown, e))?,
            Access::ReadOnly => DocumentWriting::Parsed,
        };
        Ok(Self {
            conn: SharedConnection::new(conn),
            readers: SharedReader::default(),
            shown,
            dsn: dsn.to_owned(),
            notices: CommitNotices::default(),
            heard: None,
            writing,
        })
    }

    /// A round trip on the connection (see [`crate::TimelineStore::ping`]).
    pub async fn ping(&mut self) -> Result<(), StoreError> {
        self.conn
            .execute("SELECT 1")
            .await
            .map_err(|e| self.error(e))
    }

    pub(crate) fn error(&self, error: sqlx::Error) -> StoreError {
        StoreError::database(format!("timeline database {}", self.shown), error)
    }

    /// The server process holding `session_id`'s lock, and its application name.
    pub(crate) async fn lock_holder(
        &mut self,
        session_id: &str,
    ) -> Result<Option<(i32, String)>, StoreError> {
        let row = sqlx::query(LOCK_HOLDER)
            .bind(session_id)
            .fetch_optional(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(row.map(|row| {
            (
                row.get(0),
                row.get::<Option<String>, _>(1).unwrap_or_default(),
            )
        }))
    }

    /// Deletes the session's rows; a failed statement rolls the transaction back.
    async fn delete_in_transaction(
        &mut self,
        session_id: &str,
        pruned_at: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn.lock().await;
        let mut tx = conn.begin().await.map_err(db)?;
        Self::delete_rows(&mut tx, session_id, pruned_at).await?;
        tx.commit().await.map_err(db)
    }

    /// Takes the session's lock from the connection holding it (ending that connection),
    /// and names whom it was taken from.
    async fn steal_lock(&mut self, session_id: &str) -> Result<String, StoreError> {
        let Some((pid, name)) = self.lock_holder(session_id).await? else {
            return Err(StoreError::Busy(format!(
                "session {session_id:?} is locked on {} by a connection reel cannot see (another database user?)",
                self.shown
            )));
        };
        // The lock is the holder's connection's: ending the connection frees it.
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        for _ in 0..50 {
            if self.try_lock(session_id).await? {
                return Ok(format!("{name} (server process {pid})"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(StoreError::Busy(format!(
            "session {session_id:?} on {} is still locked 5 s after ending its holder's connection",
            self.shown
        )))
    }

    async fn try_lock(&mut self, session_id: &str) -> Result<bool, StoreError> {
        let locked = sqlx::query(concat!("SELECT pg_try_advisory_lock(", lease_key!(), ")"))
            .bind(session_id)
            .fetch_one(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?
            .get(0);
        Ok(locked)
    }
}

/// What the connection's current schema holds: reel's schema, nothing of reel's, or why reel
/// must not touch it.
async fn read_schema(conn: &mut PgConnection) -> Result<Result<Schema, Refusal>, sqlx::Error> {
    let tables: Vec<String> = sqlx::query(
        "SELECT c.relname::text FROM pg_class c \
         WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
         AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect();
    if tables.iter().any(|t| t == MIGRATION_TABLE) {
        let applied: Vec<schema::Applied> =
            sqlx::query("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect();
        return Ok(schema::judge(&applied, &POSTGRES_MIGRATIONS));
    }
    // Other programs' tables may share a PostgreSQL schema; only reel's names matter here.
    let clashing: Vec<String> = tables
        .into_iter()
        .filter(|t| REEL_TABLES.contains(&t.as_str()))
        .collect();
    Ok(schema::judge_tables(&clashing))
}

/// Creates the first schema of the connection's `search_path` when it does not exist (a DSN's
/// `options=-csearch_path=NAME` names one, and PostgreSQL would otherwise refuse to create
/// anything: "no schema has been selected to create in").
async fn create_missing_schema(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let current: Option<String> = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&mut *conn)
        .await?;
    if current.is_some() {
        return Ok(());
    }
    let path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(&mut *conn)
        .await?;
    let first = path.split(',').next().unwrap_or_default().trim();
    let name = first
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .map_or_else(|| first.to_owned(), |n| n.replace("\"\"", "\""));
    if name.is_empty() || name == "$user" {
        return Ok(());
    }
    tracing::info!("creating the schema {name:?} the DSN's search_path names");
    let quoted = name.replace('"', "\"\"");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS \"{quoted}\""
    )))
    .execute(conn)
    .await?;
    Ok(())
}

#[async_trait::async_trait]
impl Backend for PostgresStore {
    async fn take_lease(
        &mut self,
        session_id: &str,
        steal: bool,
    ) -> Result<Option<String>, StoreError> {
        if self.try_lock(session_id).await? {
            return Ok(None);
        }
        if steal {
            return self.steal_lock(session_id).await.map(Some);
        }
        let holder = match self.lock_holder(session_id).await? {
            Some((_, name)) if !name.is_empty() => format!(" ({name})"),
            _ => String::new(),
        };
        Err(StoreError::Busy(format!(
            "session {session_id:?} is open in another process{holder} on {}; one process writes a session at a time (--steal-lease takes it over, ending that process's connection)",
            self.shown
        )))
    }

    async fn delete_session(
        &mut self,
        session_id: &str,
        pruned_at: Option<u64>,
    ) -> Result<(), StoreError> {
        let deleted = self.delete_in_transaction(session_id, pruned_at).await;
        deleted.map_err(|e| e.within(&format!("timeline database {}", self.shown)))
    }

    async fn write_commit(
        &mut self,
        session_id: &str,
        commit: &Commit,
        last: u64,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn.lock().await;
        let documents = self.writing;
        let written = postgres_commit::write(
            &mut conn,
            (session_id, commit, last),
            documents,
            &self.shown,
        )
        .await;
        written.map_err(|e| e.within(&format!("timeline database {}", self.shown)))
    }

    async fn give_up_lease(&mut self, session_id: &str) -> Result<(), StoreError> {
        sqlx::query(concat!("SELECT pg_advisory_unlock(", lease_key!(), ")"))
            .bind(session_id)
            .execute(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    async fn live_writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.lock_holder(session_id).await?.map(|(_, name)| name))
    }

    async fn commits_heard(&mut self, session_id: &str, _poll: Duration) -> Result<(), StoreError> {
        if self.heard.is_none() {
            let heard = postgres_notices::subscribe(&self.notices, &self.dsn, &self.shown).await?;
            self.heard = Some(heard);
        }
        let heard = self.heard.as_mut().expect("subscribed above");
        // A notice of this session's commit, or a second (which also notices a writer that
        // died, its lock gone without a last commit).
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            loop {
                match heard.recv().await {
                    Ok(session) if &*session != session_id => continue,
                    // Its own, or too far behind to know: either way the store is read again.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        })
        .await;
        Ok(())
    }
}
