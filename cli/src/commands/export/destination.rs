//! Where `reel export -o PATH` writes, decided before a byte is written, so that an export
//! never destroys what is not its own.
//!
//! * A new path, or a regular file the user may write: the export is written to a temporary
//!   file beside it and renamed into place when complete (a failed export never leaves half a
//!   file under the name). A new file gets the mode the umask allows, as `>` would; a replaced
//!   file keeps its mode.
//! * A symlink is followed, deliberately: the file it points to is replaced, the link stays.
//! * A device or a FIFO (`/dev/null`, `/dev/stdout`, a named pipe) is written by opening it:
//!   it is never replaced by a regular file.
//! * A directory, a socket, a file the user may not write, and any database the command has
//!   open are refused.

use anyhow::Context;
use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::{Path, PathBuf},
};

use crate::same_file::{self, InUse};

/// How many symlinks are followed before giving up (a loop).
const MAX_LINKS: usize = 40;

/// Where the export goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Destination {
    /// A regular file, new or replaced: written beside it and renamed; `mode` is the replaced
    /// file's.
    Replace { target: PathBuf, mode: Option<u32> },
    /// A device or a FIFO, written by opening it.
    Open(PathBuf),
}

/// Decides where an export to `path` goes; `in_use` are the files the command has open.
pub fn choose(path: &Path, in_use: &[InUse]) -> anyhow::Result<Destination> {
    let target = follow_links(path)?;
    if let Some(used) = same_file::clash(&target, in_use) {
        return Err(anyhow::anyhow!(
            "{} is {}: exporting there would destroy it; choose another path",
            path.display(),
            used.what
        ));
    }
    let metadata = match fs::metadata(&target) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(Destination::Replace { target, mode: None });
        }
        Err(error) => {
            return Err(anyhow::anyhow!(
                "cannot look at {}: {error}",
                path.display()
            ));
        }
    };
    let kind = metadata.file_type();
    if kind.is_dir() {
        return Err(anyhow::anyhow!(
            "{} is a directory; name a file",
            path.display()
        ));
    }
    if kind.is_socket() {
        return Err(anyhow::anyhow!(
            "{} is a socket; name a file",
            path.display()
        ));
    }
    if kind.is_char_device() || kind.is_block_device() || kind.is_fifo() {
        return Ok(Destination::Open(target));
    }
    // Opening for writing (without truncating) asks the system whether the user may write it.
    if let Err(error) = OpenOptions::new().write(true).open(&target) {
        return Err(anyhow::anyhow!(
            "{} cannot be written ({error}); reel replaces only files it may write",
            path.display()
        ));
    }
    Ok(Destination::Replace {
        target,
        mode: Some(metadata.permissions().mode()),
    })
}

/// `path` with every symlink at its end followed (a dangling link resolves to where it points).
fn follow_links(path: &Path) -> anyhow::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                let to = fs::read_link(&current)
                    .with_context(|| format!("cannot read the link {}", current.display()))?;
                current = match current.parent() {
                    Some(folder) if to.is_relative() => folder.join(to),
                    _ => to,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(anyhow::anyhow!(
        "{} is a chain of more than {MAX_LINKS} symlinks (a loop?)",
        path.display()
    ))
}

/// A writer into the destination, finished with [`Output::finish`].
pub enum Output {
    Replace {
        file: tempfile::NamedTempFile,
        target: PathBuf,
        mode: Option<u32>,
    },
    Open(File),
}

impl Output {
    pub fn create(destination: Destination) -> anyhow::Result<Self> {
        match destination {
            Destination::Open(path) => OpenOptions::new()
                .write(true)
                .open(&path)
                .map(Output::Open)
                .with_context(|| format!("cannot open {}", path.display())),
            Destination::Replace { target, mode } => {
                let folder = target
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                // 0666 before the umask, as a shell's `>` creates files.
                let file = tempfile::Builder::new()
                    .prefix(".reel-export-")
                    .permissions(fs::Permissions::from_mode(0o666))
                    .tempfile_in(folder)
                    .with_context(|| format!("cannot write in {}", folder.display()))?;
                Ok(Output::Replace { file, target, mode })
            }
        }
    }

    /// A second handle on the file, for the sink that writes the export (this one puts it in
    /// place when the sink is done).
    pub fn writer(&self) -> io::Result<File> {
        match self {
            Output::Replace { file, .. } => file.as_file().try_clone(),
            Output::Open(file) => file.try_clone(),
        }
    }

    /// Puts the written export in place.
    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            Output::Open(mut file) => file.flush().context("cannot write"),
            Output::Replace { file, target, mode } => {
                let failed = || format!("cannot write {}", target.display());
                if let Some(mode) = mode {
                    fs::set_permissions(file.path(), fs::Permissions::from_mode(mode))
                        .with_context(failed)?;
                }
                file.as_file().sync_all().with_context(failed)?;
                file.persist(&target)
                    .map_err(|e| e.error)
                    .with_context(failed)?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_opened_links_followed_databases_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            choose(Path::new("/dev/null"), &[]).unwrap(),
            Destination::Open("/dev/null".into())
        );
        let real = dir.path().join("real.md");
        fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.md");
        std::os::unix::fs::symlink("real.md", &link).unwrap();
        assert!(matches!(
            choose(&link, &[]).unwrap(),
            Destination::Replace { target, mode: Some(_) } if target == dir.path().join("real.md")
        ));
        let db = dir.path().join("t.db");
        fs::write(&db, "db").unwrap();
        let in_use = InUse::database(&db, "the timeline database");
        assert!(
            choose(&db, &in_use)
                .unwrap_err()
                .to_string()
                .contains("timeline database")
        );
        std::os::unix::fs::symlink(&db, dir.path().join("db-link")).unwrap();
        assert!(choose(&dir.path().join("db-link"), &in_use).is_err());
        assert!(
            choose(dir.path(), &[])
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
        assert_eq!(
            choose(&dir.path().join("new.md"), &[]).unwrap(),
            Destination::Replace {
                target: dir.path().join("new.md"),
                mode: None
            }
        );
    }
}
