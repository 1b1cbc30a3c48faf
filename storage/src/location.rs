//! Where a database is, as the user named it: a SQLite file path or a PostgreSQL DSN, and
//! whether a command may write to it.
//!
//! A path is always a path and a DSN is always a DSN: `--timeline-dsn postgress://...` is an
//! error naming the schemes reel knows, never a SQLite file with a strange name.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use reel_engine::StoreError;

/// The DSN schemes reel knows.
const SCHEMES: &str = "sqlite://PATH, postgres://USER@HOST:PORT/DATABASE or postgresql://...";

/// A timeline (or turns) database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server, by DSN (which may hold a password: see [`Location::shown`]).
    Postgres(String),
}

/// What a command does with a database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Creates a new database, or migrates one that is already reel's; refuses anything else.
    ReadWrite,
    /// Never creates, migrates or changes anything: a missing database is an error.
    ReadOnly,
}

impl Location {
    /// A SQLite file at `path`.
    pub fn path(path: impl Into<PathBuf>) -> Self {
        Location::Sqlite(path.into())
    }

    /// A DSN: `sqlite://PATH`, `postgres://...` or `postgresql://...`. Anything else is an
    /// error that names the schemes reel knows.
    pub fn dsn(dsn: &str) -> Result<Self, StoreError> {
        if let Some(path) = dsn.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Unusable(
                    "the DSN sqlite:// names no file (sqlite://PATH)".into(),
                ));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
            return Ok(Location::Postgres(dsn.to_owned()));
        }
        let shown = without_password(dsn);
        let problem = match dsn.split_once("://") {
            Some((scheme, _)) => format!("reel does not know the scheme {scheme:?}"),
            None => "it has no scheme".to_owned(),
        };
        Err(StoreError::Unusable(format!(
            "{shown:?} is not a database DSN reel can use ({problem}); use {SCHEMES}, or --timeline-db PATH for a SQLite file"
        )))
    }

    /// The location as it may appear in messages: a DSN's password is left out.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(dsn) => without_password(dsn),
        }
    }

    /// The SQLite file, if this is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(path) => Some(path),
            Location::Postgres(_) => None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

/// `dsn` without the password of its user-info, and without its query (which may carry
/// credentials too).
pub fn without_password(dsn: &str) -> String {
    let Some((scheme, rest)) = dsn.split_once("://") else {
        return dsn.to_owned();
    };
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials
                .split_once(':')
                .map_or(credentials, |(user, _)| user);
            format!("{scheme}://{user}@{host}")
        }
        None => format!("{scheme}://{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            without_password("postgres://me:secret@db:5432/x"),
            "postgres://me@db:5432/x"
        );
        assert_eq!(
            without_password("postgres://me@db/x?password=secret"),
            "postgres://me@db/x"
        );
        assert_eq!(without_password("postgres://me@db/x"), "postgres://me@db/x");
        assert_eq!(without_password("/tmp/t.db"), "/tmp/t.db");
    }

    #[test]
    fn a_dsn_is_a_dsn() {
        assert_eq!(
            Location::dsn("sqlite:///tmp/a.db").unwrap(),
            Location::Sqlite("/tmp/a.db".into())
        );
        assert!(matches!(
            Location::dsn("postgresql://u@h/d").unwrap(),
            Location::Postgres(_)
        ));
        let typo = Location::dsn("postgress://u:pw@h/d")
            .unwrap_err()
            .to_string();
        assert!(
            typo.contains("\"postgress\"") && typo.contains("postgres://"),
            "{typo}"
        );
        assert!(!typo.contains("pw"), "{typo}");
        assert!(Location::dsn("/tmp/a.db").is_err());
        assert!(Location::dsn("sqlite://").is_err());
    }
}
