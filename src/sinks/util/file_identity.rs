//! Detects a destination file that was deleted, moved or replaced while open.
//!
//! Writing to an open descriptor of a deleted file succeeds: the data goes to an inode no
//! one can read any more. A sink that ACKed such a write would lose the batch. Before each
//! commit a sink compares the path's current device and inode with the ones it opened; a
//! difference is a transient failure and the sink reopens only when the original is back
//! (or after a restart), never silently writing somewhere new.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The identity of a file as opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    /// Records the identity of the file now at `path`.
    pub fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let meta = std::fs::metadata(path)?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Fails unless `path` still names the same file.
    pub fn check(&self) -> Result<(), IdentityError> {
        match std::fs::metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => Ok(()),
            Ok(_) => Err(IdentityError::Replaced {
                path: self.path.clone(),
            }),
            Err(source) => Err(IdentityError::Unreachable {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

/// Why the path no longer names the file that was opened.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Another file (another device or inode) is at the path now.
    #[error("{} was replaced by another file while open", .path.display())]
    Replaced {
        /// The path opened.
        path: PathBuf,
    },
    /// Nothing can be found at the path (deleted, moved, an unmounted volume).
    #[error("{} is no longer reachable: {source}", .path.display())]
    Unreachable {
        /// The path opened.
        path: PathBuf,
        /// Why it cannot be stat'ed.
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_and_replacement_are_noticed_and_restoring_heals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let id = FileIdentity::of(&path).unwrap();
        assert!(id.check().is_ok());
        let away = dir.path().join("away");
        std::fs::rename(&path, &away).unwrap();
        assert!(matches!(id.check(), Err(IdentityError::Unreachable { .. })));
        assert!(id
            .check()
            .unwrap_err()
            .to_string()
            .contains("no longer reachable"));
        std::fs::write(&path, b"y").unwrap();
        assert!(matches!(id.check(), Err(IdentityError::Replaced { .. })));
        assert!(id.check().unwrap_err().to_string().contains("replaced"));
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&away, &path).unwrap();
        assert!(id.check().is_ok());
    }
}
