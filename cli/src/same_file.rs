//! Whether two paths name the same file, and the files reel has open for a command: so that an
//! output (the debug file, an export) never truncates or replaces a database, a command file
//! or a script the same command reads or writes.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// A file reel uses for some purpose, and what that purpose is (for messages).
pub struct InUse {
    pub path: PathBuf,
    pub what: String,
}

impl InUse {
    pub fn new(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            what: what.into(),
        }
    }

    /// A SQLite database and the files SQLite keeps beside it (`-wal`, `-shm`, `-journal`).
    pub fn database(path: &Path, what: &str) -> Vec<Self> {
        let mut files = vec![Self::new(path, what)];
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push(Self::new(name, format!("{what}'s {suffix} file")));
        }
        files
    }
}

/// Whether `a` and `b` are the same file: the same device and inode when both exist, else the
/// same path once each folder is resolved (through symlinks) and a symlink at the path itself
/// is followed.
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    match (resolved(a), resolved(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// `path` with its folder canonicalized (the file itself may not exist yet).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(path) = std::fs::canonicalize(path) {
        return Some(path);
    }
    let name = path.file_name()?;
    let folder = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(folder) => std::fs::canonicalize(folder).ok()?,
        None => std::env::current_dir().ok()?,
    };
    Some(folder.join(name))
}

/// The use `path` would clash with, if any.
pub fn clash<'a>(path: &Path, in_use: &'a [InUse]) -> Option<&'a InUse> {
    in_use.iter().find(|used| same_file(path, &used.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_file_by_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        std::fs::write(&db, b"x").unwrap();
        std::os::unix::fs::symlink(&db, dir.path().join("link")).unwrap();
        assert!(same_file(&db, &dir.path().join("link")));
        assert!(
            same_file(&db, &dir.path().join("sub/../t.db")) || !dir.path().join("sub").exists()
        );
        assert!(same_file(
            &dir.path().join("new"),
            &dir.path().join("./new")
        ));
        assert!(!same_file(&db, &dir.path().join("other")));
        let in_use = InUse::database(&db, "the timeline database");
        let wal = dir.path().join("t.db-wal");
        assert_eq!(
            clash(&wal, &in_use).map(|u| u.what.as_str()),
            Some("the timeline database's -wal file")
        );
    }
}
