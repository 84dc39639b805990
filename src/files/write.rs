//! The one way jetsink writes a file it owns: the metrics snapshot, a Parquet file of the
//! file destination, a key file from `keygen`.
//!
//! The bytes go to a temporary file in the target's directory (so the rename cannot cross
//! a filesystem), created new with `O_CREAT|O_EXCL|O_NOFOLLOW`: if anything already has
//! that name, the open fails instead of following it, so a link planted there to a file
//! outside the directory is never written through. The temporary name is unpredictable
//! ([`Staged::beside`]: a fresh random token, another on a clash), or a name the caller owns
//! and checks ([`Staged::at`]: whatever is there — a crash's leftover, or a planted link —
//! is unlinked, the link itself and never what it points to, and the file created anew).
//! Then the file is synced, renamed over the target ([`Staged::rename_over`]) or linked to
//! a name that must not exist yet ([`Staged::link_as_new`], which never replaces
//! anything), and the directory synced, so the name survives a power cut. A target that
//! is a device, FIFO, socket or directory is never replaced: jetsink owns files, not
//! those. A temporary file left by a failed step is removed when its [`Staged`] is
//! dropped.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use super::read::what;
use std::path::{Path, PathBuf};

/// How many temporary names are tried before giving up: a clash on a random name means
/// someone is guessing, a clash on a checked name someone is racing the removal.
const ATTEMPTS: usize = 4;

/// Why a file was not written; each variant names the file and the step.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path has no file name (`/`, `..`).
    #[error("{} names no file", .path.display())]
    NoName {
        /// The path.
        path: PathBuf,
    },
    /// The temporary file could not be created.
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        /// The temporary file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// The bytes could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The temporary file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// The file could not be synced.
    #[error("cannot sync {}: {source}", .path.display())]
    Sync {
        /// The temporary file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// Something other than a regular file (or a link) is at a name jetsink would replace.
    #[error("{} is {what}, not a regular file; jetsink does not replace it", .path.display())]
    NotRegular {
        /// The name.
        path: PathBuf,
        /// What is there.
        what: &'static str,
    },
    /// The target of [`Staged::link_as_new`] exists.
    #[error("{} exists; jetsink does not replace it", .path.display())]
    Exists {
        /// The target.
        path: PathBuf,
    },
    /// The temporary file could not be given the target's name.
    #[error("cannot rename {} to {}: {source}", .from.display(), .to.display())]
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The target.
        to: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// The directory could not be synced (the file is in place, its name maybe not yet
    /// durable).
    #[error("cannot sync directory {}: {source}", .path.display())]
    SyncDirectory {
        /// The directory.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
}

impl WriteError {
    /// The operating system's error behind it, if any.
    pub fn io(&self) -> Option<&io::Error> {
        match self {
            WriteError::Create { source, .. }
            | WriteError::Write { source, .. }
            | WriteError::Sync { source, .. }
            | WriteError::Rename { source, .. }
            | WriteError::SyncDirectory { source, .. } => Some(source),
            WriteError::NoName { .. }
            | WriteError::NotRegular { .. }
            | WriteError::Exists { .. } => None,
        }
    }
}

/// The directory and file name of `target` (`.` for a bare name).
fn split(target: &Path) -> Result<(PathBuf, &OsStr), WriteError> {
    let name = target.file_name().ok_or_else(|| WriteError::NoName {
        path: target.to_path_buf(),
    })?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

/// Creates `path` new, never through a link, with `mode` (less the umask).
fn create(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Syncs the directory `dir`, so a rename or link in it is durable.
fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| WriteError::SyncDirectory {
            path: dir.to_path_buf(),
            source,
        })
}

/// A temporary file created for a target, not yet in place; removed when dropped unless
/// it was renamed or linked.
#[derive(Debug)]
pub struct Staged {
    temporary: PathBuf,
    target: PathBuf,
    dir: PathBuf,
    done: bool,
}

impl Staged {
    /// Creates a temporary file for `target` at an unpredictable name beside it
    /// (`.<name>.<16 hex digits>.tmp`), with `mode` less the umask.
    pub fn beside(target: &Path, mode: u32) -> Result<(Staged, File), WriteError> {
        Staged::beside_with(target, mode, &mut || {
            format!("{:016x}", rand::random::<u64>())
        })
    }

    /// [`Staged::beside`] with the random tokens drawn by `token`.
    fn beside_with(
        target: &Path,
        mode: u32,
        token: &mut dyn FnMut() -> String,
    ) -> Result<(Staged, File), WriteError> {
        let (dir, name) = split(target)?;
        let mut tried = Vec::new();
        for _ in 0..ATTEMPTS {
            let temporary = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), token()));
            match create(&temporary, mode) {
                Ok(file) => return Ok((Staged::new(temporary, target, dir), file)),
                // Taken (a clash, or a guess planted there): never opened, try another.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => tried.push((temporary, e)),
                Err(source) => {
                    return Err(WriteError::Create {
                        path: temporary,
                        source,
                    })
                }
            }
        }
        let (path, source) = tried.pop().ok_or_else(|| WriteError::NoName {
            path: target.to_path_buf(),
        })?;
        Err(WriteError::Create { path, source })
    }

    /// Creates the temporary file `temporary` for `target`: a name in the target's
    /// directory that the caller owns. Whatever already has that name — a leftover of a
    /// crash, or a link someone planted — is unlinked (the link, never what it points to)
    /// and the file created anew; a directory, FIFO or the like there is left alone and
    /// refused.
    pub fn at(target: &Path, temporary: &Path, mode: u32) -> Result<(Staged, File), WriteError> {
        let (dir, _) = split(target)?;
        let create_error = |source| WriteError::Create {
            path: temporary.to_path_buf(),
            source,
        };
        let (beside, _) = split(temporary)?;
        if beside != dir {
            return Err(create_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not in the directory of {}", target.display()),
            )));
        }
        for attempt in 1..=ATTEMPTS {
            match create(temporary, mode) {
                Ok(file) => return Ok((Staged::new(temporary.to_path_buf(), target, dir), file)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < ATTEMPTS => {
                    match fs::symlink_metadata(temporary) {
                        Ok(m) if m.file_type().is_symlink() || m.file_type().is_file() => {
                            match fs::remove_file(temporary) {
                                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                                    return Err(create_error(e))
                                }
                                _ => {
                                    tracing::warn!(path = %temporary.display(), link = m.file_type().is_symlink(), "removed what was at a temporary file's name before writing it");
                                }
                            }
                        }
                        Ok(m) => {
                            return Err(WriteError::NotRegular {
                                path: temporary.to_path_buf(),
                                what: what(m.file_type()),
                            })
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(create_error(e)),
                    }
                }
                Err(e) => return Err(create_error(e)),
            }
        }
        Err(create_error(io::Error::from(io::ErrorKind::AlreadyExists)))
    }

    fn new(temporary: PathBuf, target: &Path, dir: PathBuf) -> Staged {
        Staged {
            temporary,
            target: target.to_path_buf(),
            dir,
            done: false,
        }
    }

    /// The temporary file's path.
    pub fn temporary(&self) -> &Path {
        &self.temporary
    }

    /// Puts `file` (the one [`Staged::beside`] or [`Staged::at`] returned, written) in
    /// place of the target: with `durable`, synced first and the directory after. A
    /// target that is a regular file or a link is replaced (the link itself, not what it
    /// points to); anything else is refused.
    pub fn rename_over(mut self, file: File, durable: bool) -> Result<(), WriteError> {
        if durable {
            file.sync_all().map_err(|source| WriteError::Sync {
                path: self.temporary.clone(),
                source,
            })?;
        }
        drop(file);
        match fs::symlink_metadata(&self.target) {
            Ok(m) if !(m.file_type().is_file() || m.file_type().is_symlink()) => {
                return Err(WriteError::NotRegular {
                    path: self.target.clone(),
                    what: what(m.file_type()),
                })
            }
            _ => {}
        }
        fs::rename(&self.temporary, &self.target).map_err(|source| WriteError::Rename {
            from: self.temporary.clone(),
            to: self.target.clone(),
            source,
        })?;
        self.done = true;
        if durable {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Gives `file` (written) the target's name only if nothing has that name yet — not a
    /// file, not a link, not a dangling link — synced, then the directory synced. The
    /// temporary name is removed either way.
    pub fn link_as_new(mut self, file: File) -> Result<(), WriteError> {
        file.sync_all().map_err(|source| WriteError::Sync {
            path: self.temporary.clone(),
            source,
        })?;
        drop(file);
        fs::hard_link(&self.temporary, &self.target).map_err(|source| {
            if source.kind() == io::ErrorKind::AlreadyExists {
                WriteError::Exists {
                    path: self.target.clone(),
                }
            } else {
                WriteError::Rename {
                    from: self.temporary.clone(),
                    to: self.target.clone(),
                    source,
                }
            }
        })?;
        // The file has its name; the temporary one is only a second name of it.
        let _ = fs::remove_file(&self.temporary);
        self.done = true;
        sync_dir(&self.dir)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.temporary);
        }
    }
}

/// Opens `path` to be written in place, for the few files that cannot be replaced by a
/// rename: a lock file (the lock lives on its inode) and a log a child process writes.
/// Created when absent; never through a link (`O_NOFOLLOW`: a link there is refused, its
/// target untouched); anything but a regular file refused (opened without blocking, so a
/// FIFO cannot hang the open); with `truncate`, emptied only once it is known to be one.
pub fn open_in_place(path: &Path, truncate: bool) -> Result<File, WriteError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ELOOP) {
                WriteError::NotRegular {
                    path: path.to_path_buf(),
                    what: "a symbolic link",
                }
            } else {
                WriteError::Create {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
    let write_error = |source| WriteError::Write {
        path: path.to_path_buf(),
        source,
    };
    let meta = file.metadata().map_err(write_error)?;
    if !meta.file_type().is_file() {
        return Err(WriteError::NotRegular {
            path: path.to_path_buf(),
            what: what(meta.file_type()),
        });
    }
    if truncate {
        file.set_len(0).map_err(write_error)?;
    }
    Ok(file)
}

/// Replaces `target` with `bytes` ([`Staged::beside`], write, [`Staged::rename_over`],
/// durable); a new file gets `mode` less the umask.
pub fn replace(target: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let (staged, mut file) = Staged::beside(target, mode)?;
    file.write_all(bytes).map_err(|source| WriteError::Write {
        path: staged.temporary.clone(),
        source,
    })?;
    staged.rename_over(file, true)
}

/// Creates `target` holding `bytes` with `mode` (less the umask), only if nothing has that
/// name: [`WriteError::Exists`] otherwise. Readers never see it half written.
pub fn create_new(target: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let (staged, mut file) = Staged::beside(target, mode)?;
    file.write_all(bytes).map_err(|source| WriteError::Write {
        path: staged.temporary.clone(),
        source,
    })?;
    staged.link_as_new(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};

    /// Names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A file outside the written directory that a planted link points to.
    fn victim() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("victim");
        fs::write(&p, b"precious").unwrap();
        (dir, p)
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.json");
        replace(&target, b"one", 0o666).unwrap();
        replace(&target, b"two", 0o666).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["m.json"]);
    }

    #[test]
    fn a_link_planted_at_a_checked_temporary_name_is_removed_never_followed() {
        let (_outside, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("events-1-2.parquet");
        let temporary = dir.path().join(".events-1-2.parquet.tmp");
        symlink(&victim, &temporary).unwrap();
        let (staged, mut file) = Staged::at(&target, &temporary, 0o666).unwrap();
        file.write_all(b"PAR1 new").unwrap();
        staged.rename_over(file, true).unwrap();
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"precious",
            "the victim keeps its bytes"
        );
        assert_eq!(fs::read(&target).unwrap(), b"PAR1 new");
        let meta = fs::symlink_metadata(&target).unwrap();
        assert!(
            meta.file_type().is_file(),
            "the final name is a file, not a link"
        );
        assert_eq!(names(dir.path()), ["events-1-2.parquet"]);
        // A hard link there (to a file the daemon may not own) is unlinked, not written.
        fs::hard_link(&victim, &temporary).unwrap();
        let (staged, mut file) = Staged::at(&target, &temporary, 0o666).unwrap();
        file.write_all(b"PAR1 again").unwrap();
        staged.rename_over(file, false).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn a_link_at_a_random_temporary_name_is_never_opened_and_another_name_is_drawn() {
        let (_outside, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.json");
        symlink(&victim, dir.path().join(".m.json.guessed.tmp")).unwrap();
        let mut tokens = ["guessed", "fresh"].into_iter().map(String::from);
        let (staged, mut file) =
            Staged::beside_with(&target, 0o666, &mut || tokens.next().unwrap()).unwrap();
        assert_eq!(staged.temporary(), dir.path().join(".m.json.fresh.tmp"));
        file.write_all(b"{}").unwrap();
        staged.rename_over(file, true).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&target).unwrap(), b"{}");
        // Every name taken: refused, nothing written anywhere.
        let mut same = || "guessed".to_string();
        let e = Staged::beside_with(&target, 0o666, &mut same).unwrap_err();
        assert!(e.to_string().starts_with("cannot create "), "{e}");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn a_device_fifo_or_directory_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let e = replace(&fifo, b"x", 0o666).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a FIFO, not a regular file; jetsink does not replace it",
                fifo.display()
            )
        );
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        assert!(matches!(
            replace(&sub, b"x", 0o666),
            Err(WriteError::NotRegular {
                what: "a directory",
                ..
            })
        ));
        assert_eq!(names(dir.path()), ["fifo", "sub"], "no temporary file left");
        // A directory at a checked temporary name is left and refused.
        let target = dir.path().join("t");
        let temporary = dir.path().join(".t.tmp");
        fs::create_dir(&temporary).unwrap();
        assert!(matches!(
            Staged::at(&target, &temporary, 0o666),
            Err(WriteError::NotRegular { .. })
        ));
        assert!(temporary.is_dir());
    }

    #[test]
    fn a_new_file_never_replaces_a_file_or_a_link_and_keeps_its_mode() {
        let (_outside, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.key");
        create_new(&key, b"secret\n", 0o600).unwrap();
        assert_eq!(fs::read(&key).unwrap(), b"secret\n");
        assert_eq!(
            fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let e = create_new(&key, b"other\n", 0o600).unwrap_err();
        assert!(matches!(e, WriteError::Exists { .. }), "{e}");
        assert_eq!(fs::read(&key).unwrap(), b"secret\n");
        // A link, even one to nowhere, is a name that exists: never written through.
        let link = dir.path().join("planted.key");
        symlink(&victim, &link).unwrap();
        assert!(matches!(
            create_new(&link, b"x", 0o600),
            Err(WriteError::Exists { .. })
        ));
        let dangling = dir.path().join("dangling.key");
        let nowhere = dir.path().join("nowhere");
        symlink(&nowhere, &dangling).unwrap();
        assert!(matches!(
            create_new(&dangling, b"x", 0o600),
            Err(WriteError::Exists { .. })
        ));
        assert!(!nowhere.exists());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(names(dir.path()), ["dangling.key", "k.key", "planted.key"]);
    }

    #[test]
    fn a_file_opened_in_place_is_never_a_link_or_a_fifo() {
        let (_outside, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(".events.lock");
        symlink(&victim, &lock).unwrap();
        let e = open_in_place(&lock, true).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a symbolic link, not a regular file; jetsink does not replace it",
                lock.display()
            )
        );
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        assert!(matches!(
            open_in_place(&fifo, false),
            Err(WriteError::NotRegular { what: "a FIFO", .. })
        ));
        let log = dir.path().join("log");
        fs::write(&log, b"old").unwrap();
        let mut f = open_in_place(&log, true).unwrap();
        f.write_all(b"new").unwrap();
        assert_eq!(fs::read(&log).unwrap(), b"new");
        let kept = open_in_place(&log, false).unwrap();
        drop(kept);
        assert_eq!(fs::read(&log).unwrap(), b"new");
    }

    #[test]
    fn a_staged_file_dropped_before_it_is_in_place_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x");
        let (staged, file) = Staged::beside(&target, 0o666).unwrap();
        assert!(staged.temporary().exists());
        drop(file);
        drop(staged);
        assert!(names(dir.path()).is_empty());
        assert!(matches!(
            Staged::beside(Path::new("/"), 0o666),
            Err(WriteError::NoName { .. })
        ));
        let other = tempfile::tempdir().unwrap();
        let e = Staged::at(&target, &other.path().join(".x.tmp"), 0o666).unwrap_err();
        assert!(e.to_string().contains("not in the directory of"), "{e}");
    }
}
