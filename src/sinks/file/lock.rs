//! One writer per directory and prefix: an exclusive lock on `<directory>/.<prefix>.lock`.
//!
//! Two processes appending to the same newest file would each repair the other's batch as
//! a torn line and cut it after it was ACKed. So the first open takes an exclusive
//! `flock` on a lock file beside the data files and keeps it until the sink is dropped
//! (the kernel releases it when the process dies, even by SIGKILL). A second process on
//! the same directory and prefix does not wait: its open fails with the holder's pid,
//! which stops it at start-up with exit 69, and the service manager starts it again
//! once the first one has gone (see `docs/sinks/file.md`).
//!
//! The lock file is never deleted: removing it while held would let a third process lock
//! a new file of the same name. Its content, the holder's pid, is informational only;
//! the lock itself is what excludes.

use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::sinks::contract::SinkError;
use crate::sinks::util::io_error;

/// The lock file's name for `prefix`. It starts with a dot and does not end in `.jsonl`,
/// so it is never taken for a data file.
pub(crate) fn lock_file_name(prefix: &str) -> String {
    format!(".{prefix}.lock")
}

/// What the holder writes into the lock file.
pub(crate) fn holder_text(pid: u32) -> String {
    format!("{pid}\n")
}

/// The holder's pid from the lock file's content, if it is one: digits and an optional
/// trailing line break, nothing else (a file written by someone else says nothing).
pub(crate) fn parse_holder(content: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(content).ok()?;
    let digits = text.strip_suffix('\n').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&pid| pid > 0)
}

/// The message a second writer fails with: where, who holds it, and what to do.
/// The words of [`busy_message`] that say the lock is held, for [`is_lock_busy`].
const IN_USE: &str = "is in use: ";

/// Whether `e` is the refusal of a directory and prefix another process holds locked
/// (`jetsink replay` reports it as a refusal to race that process, not as an outage).
pub fn is_lock_busy(e: &SinkError) -> bool {
    matches!(e, SinkError::Transient { message } if message.contains(IN_USE) && message.contains("holds the lock"))
}

pub(crate) fn busy_message(
    directory: &Path,
    prefix: &str,
    lock: &Path,
    holder: Option<u32>,
) -> String {
    let who = match holder {
        Some(pid) => format!("another process (pid {pid})"),
        None => "another process".to_string(),
    };
    format!(
        "directory {} with prefix {prefix:?} {IN_USE}{who} holds the lock {}; only one \
         jetsink may write a directory and prefix, so this one starts once that process has \
         stopped (or give this sink its own directory or prefix)",
        directory.display(),
        lock.display()
    )
}

/// An exclusive lock on a directory and prefix, held while this value lives.
#[derive(Debug)]
pub(crate) struct DirectoryLock {
    /// Kept open: closing the last descriptor releases the lock.
    _file: File,
}

impl DirectoryLock {
    /// Takes the lock of `prefix` in `directory` without waiting. Held by another process:
    /// a transient error naming the directory, the lock file and the holder's pid.
    pub(crate) fn acquire(directory: &Path, prefix: &str) -> Result<DirectoryLock, SinkError> {
        let path = directory.join(lock_file_name(prefix));
        // Never through a link planted at the name: the pid written below would
        // otherwise cut the link's target to a few bytes.
        let file = crate::files::open_in_place(&path, false).map_err(|e| match e {
            crate::files::WriteError::NotRegular { .. } => SinkError::Misconfigured {
                message: format!("lock file {e}"),
            },
            e => match e.io() {
                Some(io) => io_error(&format!("cannot open lock file {}", path.display()), io),
                None => SinkError::transient(e.to_string()),
            },
        })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = read_holder(&file);
                return Err(SinkError::transient(busy_message(
                    directory, prefix, &path, holder,
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(io_error(&format!("cannot lock {}", path.display()), &e));
            }
        }
        if let Err(e) = write_holder(&file, std::process::id()) {
            // The pid only helps the operator of a second instance; the lock is held.
            tracing::warn!(path = %path.display(), error = %e, "cannot record this process's pid in the lock file");
        }
        tracing::info!(path = %path.display(), "holding the directory lock");
        Ok(DirectoryLock { _file: file })
    }
}

/// The pid recorded by the holder, if readable.
fn read_holder(file: &File) -> Option<u32> {
    let mut buf = [0u8; 24];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse_holder(&buf[..n])
}

/// Replaces the lock file's content with `pid`.
fn write_holder(file: &File, pid: u32) -> io::Result<()> {
    file.set_len(0)?;
    file.write_all_at(holder_text(pid).as_bytes(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn holder_text_round_trips_and_other_content_says_nothing() {
        assert_eq!(parse_holder(holder_text(4242).as_bytes()), Some(4242));
        assert_eq!(parse_holder(b"17"), Some(17));
        for bad in [
            &b""[..],
            b"\n",
            b"0\n",
            b"-3\n",
            b" 12\n",
            b"12\n\n",
            b"1x\n",
            b"\xff\n",
            b"99999999999\n",
        ] {
            assert_eq!(parse_holder(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_lock_file_is_hidden_and_not_a_data_file() {
        let name = lock_file_name("events");
        assert_eq!(name, ".events.lock");
        assert!(crate::sinks::file::naming::FileStamp::parse("events", &name).is_none());
    }

    #[test]
    fn the_busy_message_names_directory_holder_and_lock_file() {
        let m = busy_message(
            Path::new("data/ev"),
            "events",
            Path::new("data/ev/.events.lock"),
            Some(77),
        );
        assert!(m.contains("data/ev "), "{m}");
        assert!(m.contains("pid 77"), "{m}");
        assert!(m.contains("data/ev/.events.lock"), "{m}");
        let m = busy_message(Path::new("d"), "p", Path::new("d/.p.lock"), None);
        assert!(!m.contains("pid"), "{m}");
    }

    #[test]
    fn a_second_lock_on_the_same_prefix_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirectoryLock::acquire(dir.path(), "events").unwrap();
        let other_prefix = DirectoryLock::acquire(dir.path(), "audit").unwrap();
        let refused = DirectoryLock::acquire(dir.path(), "events").unwrap_err();
        match &refused {
            SinkError::Transient { message } => {
                assert!(
                    message.contains(&format!("pid {}", std::process::id())),
                    "{message}"
                )
            }
            other => panic!("expected transient, got {other:?}"),
        }
        drop(first);
        let _again = DirectoryLock::acquire(dir.path(), "events").unwrap();
        drop(other_prefix);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.contains(&".events.lock".to_string()), "{names:?}");
        let pid = std::fs::read(dir.path().join(".events.lock")).unwrap();
        assert_eq!(parse_holder(&pid), Some(std::process::id()));
    }

    #[test]
    fn a_link_planted_at_the_lock_file_is_refused_and_its_target_keeps_its_bytes() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(".events.lock")).unwrap();
        let e = DirectoryLock::acquire(dir.path(), "events").unwrap_err();
        assert!(matches!(e, SinkError::Misconfigured { .. }), "{e:?}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn any_lock_file_content_parses_without_panic(content in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = parse_holder(&content);
        }

        #[test]
        fn every_pid_round_trips(pid in 1u32..) {
            prop_assert_eq!(parse_holder(holder_text(pid).as_bytes()), Some(pid));
        }
    }
}
