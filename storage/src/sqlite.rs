//! The SQLite store: one file holds the logs of many sessions, their materialized entities and
//! snapshots (schema in `migrations/sqlite`).
//!
//! One connection, WAL journal, `synchronous = NORMAL`: a committed transaction survives the
//! process being killed. Writes start with `BEGIN IMMEDIATE`, so a second writer waits for the
//! busy timeout instead of failing halfway. Before anything is opened for writing, the file is
//! inspected ([`crate::sqlite_file`]): reel creates a new file or migrates its own, and refuses
//! anything else untouched. Read-only commands open a read-only connection and never create or
//! migrate. Every commit checks that the file at the path is still the one reel opened, and
//! that this process still holds the session's lease.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use reel_engine::{Commit, StoreError};
use sqlx::{
    ConnectOptions, Row, SqliteConnection,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

use crate::{
    Access,
    schema::{self, SQLITE_MIGRATIONS, Schema},
    shared_connection::{SharedConnection, SharedReader},
    sql_store::Backend,
    sqlite_commit::CommitScript,
    sqlite_file::{self, FileState, Identity},
};

/// How long a statement waits for another program's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A timeline database in one SQLite file.
pub struct SqliteStore {
    pub(crate) conn: SharedConnection<SqliteConnection>,
    /// The reading connection [`Self::reader`] hands out, shared with the stores sharing `conn`.
    readers: SharedReader<SqliteConnection>,
    /// The path, for messages.
    pub(crate) path: String,
    pub(crate) file: PathBuf,
    /// The file opened for writing, to notice it being deleted or replaced.
    identity: Option<Identity>,
}

impl SqliteStore {
    /// A read-only connection to the same file (see [`crate::TimelineStore::reader`]): opened
    /// by the first call, shared by every reader of this store and of the stores sharing its
    /// connection.
    pub async fn reader(&self) -> Result<Self, StoreError> {
        let conn = self
            .readers
            .get_or_try_init(async || {
                sqlite_file::read_only_connection(&self.file)
                    .await
                    .map(SharedConnection::new)
                    .map_err(|e| open_error(&self.path, e))
            })
            .await?
            .share();
        Ok(Self {
            conn,
            readers: Arc::clone(&self.readers),
            path: self.path.clone(),
            file: self.file.clone(),
            identity: None,
        })
    }

    /// Another store on this store's connection (see [`crate::TimelineStore::shared`]).
    pub fn shared(&self) -> Self {
        Self {
            conn: self.conn.share(),
            readers: Arc::clone(&self.readers),
            path: self.path.clone(),
            file: self.file.clone(),
            identity: self.identity,
        }
    }

    /// A second read-write connection to the same file, for another store of the same process
    /// (a turns database kept in the timeline database's file). Like [`Self::reader`] it opens
    /// only the connection: looking at the file again would drop this connection's locks.
    pub async fn sibling(&self) -> Result<Self, StoreError> {
        let conn = writing(connect_options(&self.file))
            .connect()
            .await
            .map_err(|e| open_error(&self.path, e))?;
        Ok(Self {
            conn: SharedConnection::new(conn),
            readers: SharedReader::default(),
            path: self.path.clone(),
            file: self.file.clone(),
            identity: self.identity,
        })
    }

    /// Opens the database at `path`. For writing, a missing or empty file becomes a new
    /// database (its folder is created) and reel's own is migrated; for reading, the file must
    /// hold reel's current schema. Anything else is refused and left untouched.
    pub async fn open(path: &Path, access: Access) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let state = sqlite_file::inspect(path).await?;
        let options = match (access, state) {
            (Access::ReadOnly, FileState::Missing) => {
                return Err(StoreError::NotFound(format!(
                    "there is no timeline database at {shown}"
                )));
            }
            (Access::ReadOnly, FileState::Empty | FileState::Database(Schema::Empty)) => {
                return Err(StoreError::NotFound(format!(
                    "{shown} holds no reel timeline yet (a writing command such as run-command --session-id creates one)"
                )));
            }
            (Access::ReadOnly, FileState::Database(Schema::Reel { pending })) if pending > 0 => {
                return Err(StoreError::Unusable(format!(
                    "{shown} was written by an older reel; a writing command (run-command --resume, replay, fork) upgrades it, and read-only commands never change a database"
                )));
            }
            (Access::ReadOnly, FileState::Database(_)) => {
                let conn = sqlite_file::read_only_connection(path)
                    .await
                    .map_err(|e| open_error(&shown, e))?;
                return Ok(Self {
                    conn: SharedConnection::new(conn),
                    readers: SharedReader::default(),
                    path: shown,
                    file: path.to_path_buf(),
                    identity: None,
                });
            }
            (Access::ReadWrite, state) => {
                if state == FileState::Missing
                    && let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(folder).map_err(|e| {
                        StoreError::database(format!("cannot create the folder of {shown}"), e)
                    })?;
                }
                writing(connect_options(path)).create_if_missing(true)
            }
        };
        let mut conn = options.connect().await.map_err(|e| open_error(&shown, e))?;
        // Only a read-write open gets here: its file is reel's own, or new.
        schema::bring_up_to_date(&SQLITE_MIGRATIONS, &mut conn, &shown).await?;

        let identity = Identity::of(path).map_err(|e| {
            StoreError::database(format!("cannot look at {shown} after opening it"), e)
        })?;
        Ok(Self {
            conn: SharedConnection::new(conn),
            readers: SharedReader::default(),
            path: shown,
            file: path.to_path_buf(),
            identity: Some(identity),
        })
    }

    /// `PRAGMA integrity_check`: "ok" for a sound file.
    pub async fn integrity_check(&mut self) -> Result<String, StoreError> {
        let row = sqlx::query("PRAGMA integrity_check")
            .fetch_one(&mut *self.conn.lock().await)
            .await
            .map_err(|e| self.error(e))?;
        row.try_get::<String, _>(0).map_err(|e| self.error(e))
    }

    /// Checkpoints the WAL into the main file (on shutdown, so the file stands alone).
    pub async fn checkpoint(&mut self) -> Result<(), StoreError> {
        (self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").await).map_err(|e| self.error(e))
    }

    pub(crate) fn error(&self, error: sqlx::Error) -> StoreError {
        let hint = if error.to_string().contains("database is locked") {
            " (another program holds its write lock; reel waited 5 s for it)"
        } else {
            ""
        };
        StoreError::database(format!("timeline database {}{hint}", self.path), error)
    }

    /// Fails when the file reel opened is no longer the file at the path.
    pub(crate) fn check_file(&self) -> Result<(), StoreError> {
        match &self.identity {
            Some(identity) => identity.check(&self.file),
            None => Ok(()),
        }
    }

    /// Runs `work` inside `BEGIN IMMEDIATE ... COMMIT`, rolling back on error, and then checks
    /// that the commit landed in the file at the path.
    pub(crate) async fn immediate<T>(
        &mut self,
        work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Held from BEGIN to COMMIT: no store sharing the connection gets a statement in.
        let mut conn = self.conn.lock().await;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(e))?;
        match work(&mut conn).await {
            Ok(value) => {
                sqlx::query("COMMIT")
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| self.error(e))?;
                self.check_file()?;
                Ok(value)
            }
            Err(error) => {
                let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                Err(error.within(&format!("timeline database {}", self.path)))
            }
        }
    }
}

/// How reel connects to the SQLite file at `path`.
fn connect_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(BUSY_TIMEOUT)
}

/// `options` for a connection that writes: WAL, synced at checkpoints, and freed space zeroed
/// (`secure_delete`), so that text `reel redact` erases leaves no stale copy in the file.
fn writing(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .pragma("secure_delete", "ON")
}

fn open_error(path: &str, error: sqlx::Error) -> StoreError {
    if read_only(path) {
        StoreError::database(
            format!(
                "cannot open timeline database {path}: it is read-only, and reel writes to it (and to its -wal and -shm files beside it)"
            ),
            error,
        )
    } else {
        StoreError::database(format!("cannot open timeline database {path}"), error)
    }
}

/// Whether `path` exists and cannot be opened for writing (a read-only file or file system).
fn read_only(path: &str) -> bool {
    Path::new(path).exists() && std::fs::OpenOptions::new().append(true).open(path).is_err()
}

#[async_trait::async_trait]
impl Backend for SqliteStore {
    async fn take_lease(
        &mut self,
        session_id: &str,
        steal: bool,
    ) -> Result<Option<String>, StoreError> {
        self.lease_row(session_id, steal).await
    }

    async fn delete_session(
        &mut self,
        session_id: &str,
        pruned_at: Option<u64>,
    ) -> Result<(), StoreError> {
        let session_id = session_id.to_owned();
        self.immediate(async move |conn| Self::delete_rows(conn, &session_id, pruned_at).await)
            .await
    }

    async fn write_commit(
        &mut self,
        session_id: &str,
        commit: &Commit,
        last: u64,
    ) -> Result<(), StoreError> {
        let script = CommitScript::new(session_id, commit, last)?;
        let mut conn = self.conn.lock().await;
        script
            .write(&mut conn, &self.path, |e| self.error(e))
            .await?;
        self.check_file()
    }

    async fn give_up_lease(&mut self, session_id: &str) -> Result<(), StoreError> {
        self.release_row(session_id).await?;
        self.checkpoint().await
    }

    async fn live_writer(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        self.lease_holder(session_id).await
    }

    async fn commits_heard(&mut self, _session_id: &str, poll: Duration) -> Result<(), StoreError> {
        // Nothing tells a SQLite reader of another process's commit: look again after `poll`.
        tokio::time::sleep(poll).await;
        Ok(())
    }
}
