//! Helpers shared by destinations: I/O error classification, the guard that notices
//! when a file a sink writes has been removed or replaced underneath it, and the rules of
//! archives named by the sequences they hold ([`archive`]). The database family's shared
//! parts live in [`super::database`].

pub mod archive;
pub mod file_identity;
pub mod holdings;
pub mod rollover;

use std::io;
use std::path::Path;

use super::contract::{Probe, SinkError};

/// Classifies a filesystem error. Everything the operating system reports for a local
/// file (permissions, read-only filesystem, disk full, missing directory) can be fixed
/// outside the process, so it is transient: the batch is kept and retried, never dropped.
pub fn io_error(context: &str, err: &std::io::Error) -> SinkError {
    SinkError::transient(format!("{context}: {err}"))
}

/// Classifies a filesystem error met while a destination is opened the first time. A
/// path the process may not use (permission denied, a read-only filesystem) is not
/// something waiting cures, and a process that waited for it would start up looking
/// healthy while writing nothing: it is `Misconfigured` (exit 78 at start-up). Anything
/// else is [`io_error`].
pub fn open_io_error(context: &str, err: &std::io::Error) -> SinkError {
    match err.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            SinkError::Misconfigured {
                message: format!("{context}: {err}"),
            }
        }
        _ => io_error(context, err),
    }
}

/// The longest path the kernel opens (`PATH_MAX` less the NUL), in bytes.
const PATH_MAX: usize = 4_095;
/// The longest name of one directory entry (`NAME_MAX`), in bytes.
const NAME_MAX: usize = 255;

/// Why `path` cannot name what a destination opens, whatever the filesystem holds: too
/// long for the kernel, a component longer than a file name may be, or — with
/// `file` — a path that can only name a directory (`.`, `..`, a trailing `/`). Pure, so
/// `validate` refuses what `open` would (exit 78 before, not 69 or 78 at start-up).
pub fn path_problem(path: &str, file: bool) -> Option<String> {
    if path.len() > PATH_MAX {
        return Some(format!(
            "a path of {} bytes; the kernel opens at most {PATH_MAX}",
            path.len()
        ));
    }
    if let Some(long) = path.split('/').find(|c| c.len() > NAME_MAX) {
        return Some(format!(
            "a path component of {} bytes; a file name holds at most {NAME_MAX}",
            long.len()
        ));
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    if file && matches!(last, "" | "." | "..") {
        return Some(format!(
            "{path:?} names a directory; give the path of a file"
        ));
    }
    None
}

/// Whether this process may create files in the existing directory `dir` (write and
/// search permission, as the kernel decides for this user, read-only mounts included),
/// checked without creating anything.
fn may_create_in(dir: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; access(2) only
    // reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Checks, creating nothing, that `dir` is a directory this process may create files in,
/// or that the nearest existing ancestor is one, so that `dir` could be created: what a
/// destination's `probe` says about the directory its files go to.
pub fn probe_directory(dir: &Path) -> Result<Probe, SinkError> {
    let shown = dir.display();
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(SinkError::Misconfigured {
                    message: format!("{} exists and is not a directory", at.display()),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(at);
                at = match at.parent() {
                    Some(p) if p.as_os_str().is_empty() => Path::new("."),
                    Some(p) => p,
                    None => return Err(io_error(&format!("cannot reach {shown}"), &e)),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                return Err(SinkError::Misconfigured {
                    message: format!("cannot use {shown}: a parent is not a directory"),
                })
            }
            Err(e) => return Err(io_error(&format!("cannot access {}", at.display()), &e)),
        }
    }
    may_create_in(at).map_err(|e| {
        io_error(
            &format!("directory {} is not writable by this user", at.display()),
            &e,
        )
    })?;
    if missing.is_empty() {
        Ok(Probe::Ready(format!(
            "directory {shown} exists and is writable"
        )))
    } else {
        Ok(Probe::WouldCreate(format!(
            "directory {shown} (in {}, which is writable)",
            at.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_the_kernel_cannot_open_as_a_file_are_named() {
        assert_eq!(path_problem("data/jobs.db", true), None);
        assert_eq!(path_problem("x.db ", true), None);
        assert_eq!(
            path_problem("data/", false),
            None,
            "a directory may end with /"
        );
        for dir in [".", "..", "data/", "data/.", "a/..", "/"] {
            assert!(
                path_problem(dir, true).is_some_and(|m| m.contains("names a directory")),
                "{dir}"
            );
        }
        let long = format!("data/{}.db", "n".repeat(300));
        assert!(path_problem(&long, true).is_some_and(|m| m.contains("component of 303 bytes")));
        let deep = "d/".repeat(2100) + "x.db";
        assert!(path_problem(&deep, false).is_some_and(|m| m.contains("at most 4095")));
    }

    #[test]
    fn a_directory_is_ready_or_would_be_created_and_nothing_is_created() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(matches!(probe_directory(tmp.path()), Ok(Probe::Ready(_))));
        let deep = tmp.path().join("a/b");
        assert!(matches!(probe_directory(&deep), Ok(Probe::WouldCreate(_))));
        assert!(!tmp.path().join("a").exists(), "nothing was created");
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").expect("file");
        let e = probe_directory(&file.join("d")).unwrap_err();
        assert!(matches!(e, SinkError::Misconfigured { .. }), "{e}");
    }

    #[test]
    fn a_read_only_directory_is_refused_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let ro = tmp.path().join("ro");
        std::fs::create_dir(&ro).expect("dir");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        // root may write anyway; the check follows what the kernel allows this user.
        let root = may_create_in(&ro).is_ok();
        let result = probe_directory(&ro.join("sub"));
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        if !root {
            let e = result.unwrap_err();
            assert!(e.to_string().contains("not writable"), "{e}");
        }
    }

    #[test]
    fn a_path_the_process_may_not_use_is_a_misconfiguration_at_open_and_an_outage_is_not() {
        let denied = std::io::Error::from(io::ErrorKind::PermissionDenied);
        let e = open_io_error("creating directory /x", &denied);
        assert!(matches!(e, SinkError::Misconfigured { .. }), "{e}");
        let busy = std::io::Error::from(io::ErrorKind::TimedOut);
        let e = open_io_error("creating directory /x", &busy);
        assert!(matches!(e, SinkError::Transient { .. }), "{e}");
    }
}
