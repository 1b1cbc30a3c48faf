//! The file behind a SQLite store: what is at the path before reel opens it, and whether the
//! file reel opened is still the one at the path while it writes.
//!
//! [`inspect`] looks before anything is opened for writing: a missing or empty path, a SQLite
//! database (reel's, or one with no tables), or something reel must leave alone (another
//! program's database, a file that is no database at all, a directory, a pipe or a device). It
//! reads the file's first bytes and then its schema over a read-only connection.
//!
//! [`Identity`] catches a database deleted or replaced under a running writer: SQLite keeps
//! writing to the file it opened, so without this check the commits would land in an unlinked
//! file and vanish with the process.

use std::{io::Read, os::unix::fs::MetadataExt, path::Path};

use reel_engine::StoreError;
use sqlx::{ConnectOptions, Row, sqlite::SqliteConnectOptions};

use crate::schema::{self, MIGRATION_TABLE, Refusal, SQLITE_MIGRATIONS, Schema};

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What is at a store's path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileState {
    Missing,
    /// A file of zero bytes (made by `touch` or `mktemp`): SQLite treats it as a new database.
    Empty,
    Database(Schema),
}

/// Looks at `path` without changing it. Errors when what is there must be left alone.
pub(crate) async fn inspect(path: &Path) -> Result<FileState, StoreError> {
    let shown = path.display();
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileState::Missing);
        }
        Err(error) => {
            return Err(StoreError::database(
                format!("cannot look at {shown}"),
                error,
            ));
        }
    };
    if !metadata.is_file() {
        return Err(StoreError::Foreign(format!(
            "{shown} is not a regular file (a directory, a device or a pipe), so it cannot be a timeline database; it was left untouched"
        )));
    }
    if metadata.len() == 0 {
        return Ok(FileState::Empty);
    }
    let mut header = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut header));
    if read.is_err() || &header != SQLITE_HEADER {
        return Err(StoreError::Foreign(format!(
            "{shown} is not a SQLite database, so it cannot be a timeline database; it was left untouched"
        )));
    }
    let schema = read_schema(path).await?;
    schema.map(FileState::Database).map_err(|why| {
        StoreError::Foreign(format!(
            "{shown} is not a reel timeline database: {why}; it was left untouched"
        ))
    })
}

/// The schema of the SQLite database at `path`, read over a read-only connection.
async fn read_schema(path: &Path) -> Result<Result<Schema, Refusal>, StoreError> {
    let shown = path.display().to_string();
    let failed = |error: sqlx::Error| {
        let text = error.to_string();
        if text.contains("not a database") || text.contains("malformed") {
            StoreError::Damaged(format!(
                "{shown} is damaged or not a database ({text}); it was left untouched"
            ))
        } else {
            StoreError::database(format!("cannot read {shown}"), error)
        }
    };
    let mut conn = read_only_connection(path).await.map_err(failed)?;
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(failed)?
    .iter()
    .map(|row| row.get(0))
    .collect();
    if !tables.iter().any(|t| t == MIGRATION_TABLE) {
        return Ok(schema::judge_tables(&tables));
    }
    let applied: Vec<schema::Applied> =
        sqlx::query("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .map_err(failed)?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
    Ok(schema::judge(&applied, &SQLITE_MIGRATIONS))
}

/// A read-only connection to the SQLite database at `path`. A database in WAL mode needs its
/// `-shm` file, which SQLite creates beside it; where it cannot (a read-only file system, a
/// folder the user may not write), nobody can be writing the file either, so it is opened as
/// immutable instead.
pub(crate) async fn read_only_connection(
    path: &Path,
) -> Result<sqlx::SqliteConnection, sqlx::Error> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(std::time::Duration::from_secs(5));
    // SQLite opens the -shm file at the first read, not at connect: probe with one.
    let probe = async |options: SqliteConnectOptions| {
        let mut conn = options.connect().await?;
        sqlx::query("SELECT count(*) FROM sqlite_master")
            .fetch_one(&mut conn)
            .await?;
        Ok::<_, sqlx::Error>(conn)
    };
    match probe(options.clone()).await {
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("14") => {
            probe(options.immutable(true)).await
        }
        other => other,
    }
}

/// Which file a path named when it was opened: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    device: u64,
    inode: u64,
}

impl Identity {
    pub(crate) fn of(path: &Path) -> std::io::Result<Self> {
        let metadata = std::fs::metadata(path)?;
        Ok(Self {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }

    /// Fails when the file at `path` is no longer this one (deleted, or replaced).
    pub(crate) fn check(&self, path: &Path) -> Result<(), StoreError> {
        let lost = |what: &str| {
            StoreError::Unusable(format!(
                "the timeline database {} {what} while reel was writing to it; what reel committed since then is lost with the old file",
                path.display()
            ))
        };
        match Self::of(path) {
            Ok(now) if now == *self => Ok(()),
            Ok(_) => Err(lost("was replaced by another file")),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(lost("was deleted")),
            Err(error) => Err(lost(&format!("cannot be looked at ({error})"))),
        }
    }
}
