//! Appending one batch to a JSON Lines file durably, and undoing what a failed append left:
//! the write, the fdatasync and the check that the file is still the one at its path, then,
//! on any failure, cutting the batch back out when nothing else can have been appended
//! after it ([`crate::sinks::file::tail`] decides); and at reopen, cutting a torn last
//! line left by a crash.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::tail;

/// How much of a file is read at a time when looking back for the last line break.
const SCAN_CHUNK_BYTES: u64 = 64 << 10;

/// What [`commit`] needs from a file: lets tests inject a failing write.
pub(crate) trait BatchFile {
    /// Appends all of `buf`.
    fn append_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the appended data durable (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Its current length.
    fn len(&self) -> io::Result<u64>;
    /// Fails unless `path` still names this open file: an unlinked or replaced file would
    /// hold a batch no one can read.
    fn still_at(&self, path: &Path) -> Result<(), StillAtError>;
}

/// Why an open file is no longer the one at its path, so a batch written to it is lost.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StillAtError {
    /// The open file itself cannot be stat'ed.
    #[error("cannot stat the open file {}: {source}", .path.display())]
    Stat {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The open file has no name left: it was unlinked.
    #[error("{} was deleted during the write", .path.display())]
    Deleted {
        /// The path it had.
        path: PathBuf,
    },
    /// The path names another file now.
    #[error("{} was replaced by another file during the write", .path.display())]
    Replaced {
        /// The path.
        path: PathBuf,
    },
    /// Nothing can be stat'ed at the path.
    #[error("{} was moved or deleted during the write: {source}", .path.display())]
    Gone {
        /// The path.
        path: PathBuf,
        /// Why it cannot be stat'ed.
        source: io::Error,
    },
}

impl BatchFile for File {
    fn append_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
    fn still_at(&self, path: &Path) -> Result<(), StillAtError> {
        let path_buf = || path.to_path_buf();
        let open = self.metadata().map_err(|source| StillAtError::Stat {
            path: path_buf(),
            source,
        })?;
        if open.nlink() == 0 {
            return Err(StillAtError::Deleted { path: path_buf() });
        }
        match fs::metadata(path) {
            Ok(now) if now.dev() == open.dev() && now.ino() == open.ino() => Ok(()),
            Ok(_) => Err(StillAtError::Replaced { path: path_buf() }),
            Err(source) => Err(StillAtError::Gone {
                path: path_buf(),
                source,
            }),
        }
    }
}

/// Appends `buf` to a file that was `before` bytes long, syncs it if `fsync`, runs
/// `after_sync`, and checks that `path` still names the file: only then is the batch
/// committed. On failure, cuts the file back to `before` if everything past `before` can
/// be this batch ([`tail::may_cut_failed_batch`]), so no partial line of the batch stays
/// and no one else's bytes are cut.
pub(crate) fn commit<F: BatchFile>(
    file: &mut F,
    before: u64,
    buf: &[u8],
    fsync: bool,
    path: &Path,
    after_sync: &mut dyn FnMut(&Path),
) -> io::Result<()> {
    let result = file
        .append_all(buf)
        .and_then(|()| if fsync { file.sync_data() } else { Ok(()) })
        .and_then(|()| {
            after_sync(path);
            file.still_at(path).map_err(io::Error::other)
        });
    if let Err(e) = result {
        match file.len() {
            Ok(now) if tail::may_cut_failed_batch(before, now, buf.len() as u64) => {
                if let Err(cut) = file.truncate(before) {
                    tracing::warn!(
                        path = %path.display(),
                        error = %cut,
                        "cannot remove the failed batch from the file; it is cut on reopen"
                    );
                }
            }
            Ok(now) if now == before => {}
            Ok(now) => tracing::warn!(
                path = %path.display(),
                before,
                now,
                batch_bytes = buf.len(),
                "the file changed size outside this writer during the write; not cutting it"
            ),
            Err(stat) => tracing::warn!(
                path = %path.display(),
                error = %stat,
                "cannot stat the file after a failed batch; not cutting it"
            ),
        }
        return Err(e);
    }
    Ok(())
}

/// If the file does not end with `\n` (a write interrupted by a crash), cuts it back to
/// just after its last `\n` (or to empty) and syncs it. Returns the resulting length.
pub(super) fn cut_torn_tail(file: &File, path: &Path) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    let keep = end_of_last_line(file, len)?;
    file.set_len(keep)?;
    file.sync_all()?;
    tracing::warn!(
        path = %path.display(),
        cut_bytes = len - keep,
        "cut a torn last line left by an interrupted write"
    );
    Ok(keep)
}

/// The offset just after the last `\n` in the first `len` bytes of `file`, or 0.
fn end_of_last_line(file: &File, len: u64) -> io::Result<u64> {
    let mut buf = Vec::new();
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(SCAN_CHUNK_BYTES);
        // At most SCAN_CHUNK_BYTES, so it fits in usize.
        buf.resize((end - start) as usize, 0);
        file.read_exact_at(&mut buf, start)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}
