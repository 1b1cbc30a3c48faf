//! Whose database is this? reel migrates only a database that is already its own, or one that
//! holds nothing at all; anything else (another program's tables, a newer reel's schema, a
//! half-failed migration) is refused before a single byte of it changes.
//!
//! A database is reel's when its `_sqlx_migrations` table lists only migrations reel knows,
//! each with reel's checksum and applied completely. The check reads; it never writes.

use reel_engine::StoreError;
use sqlx::migrate::Migrator;

/// reel's migrations for SQLite files.
pub(crate) static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");
/// reel's migrations for PostgreSQL databases.
pub(crate) static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

/// Brings the database behind `conn` (`shown` in messages) up to reel's schema by `migrations`.
pub(crate) async fn bring_up_to_date<C: sqlx::migrate::Migrate>(
    migrations: &Migrator,
    conn: &mut C,
    shown: &str,
) -> Result<(), StoreError> {
    // `run` is `run_direct(None, conn, false)` behind `Acquire`, whose future is `Send` only
    // for some lifetimes: a server's connections open on tasks that must be `Send`.
    (migrations.run_direct(None, conn, false).await)
        .map_err(|e| StoreError::database(format!("cannot bring {shown} up to reel's schema"), e))
}

/// The migration table sqlx keeps.
pub(crate) const MIGRATION_TABLE: &str = "_sqlx_migrations";

/// reel's own tables: a database that has one of them without reel's migration table is
/// another program's.
pub(crate) const REEL_TABLES: &[&str] = &[
    "sessions",
    "events",
    "entities",
    "snapshots",
    "leases",
    "turns",
    "serve_nodes",
    "pruned_sessions",
    "search_docs",
    "approval_deadlines",
];

/// What an existing database holds, as far as reel is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Schema {
    /// No tables at all: nothing of anyone's to destroy, so reel may create its schema.
    Empty,
    /// reel's schema, with `pending` of reel's migrations not applied yet.
    Reel { pending: usize },
}

/// One row of the migration table: version, checksum, whether it completed.
pub(crate) type Applied = (i64, Vec<u8>, bool);

/// Why a database is not reel's to touch.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error(
        "its migration table lists version {0}, which this reel does not know (a newer reel wrote it, or another program)"
    )]
    UnknownMigration(i64),
    #[error("its migration {version} is not reel's ({ours}): another program's schema")]
    ForeignMigration { version: i64, ours: String },
    #[error("its migration {0} failed partway")]
    FailedMigration(i64),
    #[error("it holds another program's tables ({0}) and no reel schema")]
    ForeignTables(String),
    #[error("it has tables named like reel's ({0}) that reel did not create")]
    ClashingTables(String),
}

/// Judges a database that has a migration table: reel's (with how many migrations are
/// pending), or why not.
pub(crate) fn judge(applied: &[Applied], migrator: &Migrator) -> Result<Schema, Refusal> {
    for (version, checksum, success) in applied {
        let Some(ours) = migrator.iter().find(|m| m.version == *version) else {
            return Err(Refusal::UnknownMigration(*version));
        };
        if ours.checksum.as_ref() != checksum.as_slice() {
            return Err(Refusal::ForeignMigration {
                version: *version,
                ours: ours.description.to_string(),
            });
        }
        if !success {
            return Err(Refusal::FailedMigration(*version));
        }
    }
    let pending = migrator
        .iter()
        .filter(|m| !applied.iter().any(|(version, ..)| *version == m.version))
        .count();
    Ok(Schema::Reel { pending })
}

/// Judges a database without a migration table from the names of its tables.
pub(crate) fn judge_tables(tables: &[String]) -> Result<Schema, Refusal> {
    if tables.is_empty() {
        return Ok(Schema::Empty);
    }
    let clashing: Vec<&str> = tables
        .iter()
        .map(String::as_str)
        .filter(|t| REEL_TABLES.contains(t))
        .collect();
    if !clashing.is_empty() {
        return Err(Refusal::ClashingTables(clashing.join(", ")));
    }
    let mut shown: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
    if tables.len() > shown.len() {
        shown.push("...");
    }
    Err(Refusal::ForeignTables(shown.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(n: usize) -> Vec<Applied> {
        SQLITE_MIGRATIONS
            .iter()
            .take(n)
            .map(|m| (m.version, m.checksum.to_vec(), true))
            .collect()
    }

    #[test]
    fn reel_migrations_are_recognized_and_others_refused() {
        let all = SQLITE_MIGRATIONS.iter().count();
        assert_eq!(
            judge(&applied(all), &SQLITE_MIGRATIONS),
            Ok(Schema::Reel { pending: 0 })
        );
        assert_eq!(
            judge(&applied(1), &SQLITE_MIGRATIONS),
            Ok(Schema::Reel { pending: all - 1 })
        );
        let mut foreign = applied(1);
        foreign[0].1 = vec![0; 48];
        assert!(matches!(
            judge(&foreign, &SQLITE_MIGRATIONS),
            Err(Refusal::ForeignMigration { version: _, .. })
        ));
        let mut newer = applied(all);
        newer.push((99_999, vec![1], true));
        let refusal = judge(&newer, &SQLITE_MIGRATIONS).unwrap_err();
        assert_eq!(refusal, Refusal::UnknownMigration(99_999));
        assert!(refusal.to_string().contains("newer"));
        let mut failed = applied(1);
        failed[0].2 = false;
        assert!(matches!(
            judge(&failed, &SQLITE_MIGRATIONS),
            Err(Refusal::FailedMigration(_))
        ));
    }

    #[test]
    fn tables_without_a_migration_table_are_another_programs() {
        assert_eq!(judge_tables(&[]), Ok(Schema::Empty));
        assert_eq!(
            judge_tables(&["users".into()]),
            Err(Refusal::ForeignTables("users".into()))
        );
        let many: Vec<String> = (0..7).map(|n| format!("t{n}")).collect();
        assert_eq!(
            judge_tables(&many).unwrap_err().to_string(),
            "it holds another program's tables (t0, t1, t2, t3, t4, ...) and no reel schema"
        );
        assert_eq!(
            judge_tables(&["events".into(), "users".into()]),
            Err(Refusal::ClashingTables("events".into()))
        );
    }
}
