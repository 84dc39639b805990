//! [`FileSink`]: the I/O half of the file destination. It owns the current file, decides
//! when to rotate, appends each batch with one write and one fdatasync, and turns every
//! failure into a transient error that leaves no partial line behind.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::config::FileConfig;
use super::naming::{self, FileStamp};
use super::record;
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::blocking::BlockingSink;
use crate::sinks::util::file_identity::FileIdentity;
use crate::sinks::util::io_error;
use crate::sinks::SinkError;

/// Where the sink reads the time: file names, rotation by age and `written_at`.
pub type Clock = Box<dyn Fn() -> SystemTime + Send + Sync>;

/// Above this capacity the encode buffer is released after a batch instead of kept.
const RETAINED_BUFFER_BYTES: usize = 8 << 20;

/// How much of a file is read at a time when looking back for the last line break.
const SCAN_CHUNK_BYTES: u64 = 64 << 10;

/// Why the current file is closed before the next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rotation {
    /// It reached `rotate_bytes`.
    Size,
    /// It is at least `rotate_interval_ms` old.
    Age,
}

/// The rotation decision, a pure function of the current file and the clock.
///
/// `size` is the file's length, `created` when it was created, `now` the clock. A limit of
/// 0 is off. An empty file is never rotated: starting another empty file would only leave
/// an empty file behind.
pub(crate) fn rotation_due(
    size: u64,
    created: SystemTime,
    now: SystemTime,
    rotate_bytes: u64,
    rotate_interval_ms: u64,
) -> Option<Rotation> {
    if size == 0 {
        return None;
    }
    if rotate_bytes > 0 && size >= rotate_bytes {
        return Some(Rotation::Size);
    }
    let age = now.duration_since(created).unwrap_or(Duration::ZERO);
    if rotate_interval_ms > 0 && age >= Duration::from_millis(rotate_interval_ms) {
        return Some(Rotation::Age);
    }
    None
}

/// Writes batches as JSON Lines into rotating files of a directory.
///
/// See the [module documentation](super) for the file format, the rotation and recovery
/// rules and the at-least-once guarantee.
pub struct FileSink {
    config: FileConfig,
    directory: PathBuf,
    clock: Clock,
    /// The directory was prepared once; later opens must find it, never create it.
    prepared: bool,
    /// The directory as first opened: a different one at the same path (an unmounted
    /// volume's empty mount point) is refused rather than written to.
    directory_identity: Option<FileIdentity>,
    /// The file batches go to; `None` after a failure, so the next call reopens.
    current: Option<Current>,
    /// Encoded batch, reused between batches.
    buffer: Vec<u8>,
}

/// The open file batches are appended to.
struct Current {
    file: File,
    path: PathBuf,
    stamp: FileStamp,
    identity: FileIdentity,
    /// When it was created, for rotation by age.
    created: SystemTime,
}

impl FileSink {
    /// A sink for `config`, reading the system clock. Does no I/O: [`Sink::open`](crate::sinks::Sink::open)
    /// does.
    pub fn new(config: FileConfig) -> FileSink {
        FileSink::with_clock(config, Box::new(SystemTime::now))
    }

    /// A sink reading time from `clock` (tests inject one to drive rotation by age).
    pub fn with_clock(config: FileConfig, clock: Clock) -> FileSink {
        FileSink {
            directory: PathBuf::from(&config.directory),
            config,
            clock,
            prepared: false,
            directory_identity: None,
            current: None,
            buffer: Vec::new(),
        }
    }

    /// The first time, creates the directory; later, requires it to be the same one.
    fn prepare_directory(&mut self) -> Result<(), SinkError> {
        let dir = &self.directory;
        if !self.prepared {
            match fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(SinkError::Misconfigured {
                        message: format!("{} exists and is not a directory", dir.display()),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir_all(dir).map_err(|e| {
                        if e.kind() == io::ErrorKind::NotADirectory {
                            SinkError::Misconfigured {
                                message: format!(
                                    "cannot create directory {}: a parent is not a directory",
                                    dir.display()
                                ),
                            }
                        } else {
                            io_error(&format!("cannot create directory {}", dir.display()), &e)
                        }
                    })?;
                    if self.config.fsync {
                        if let Some(parent) = dir.parent() {
                            let parent = if parent.as_os_str().is_empty() {
                                Path::new(".")
                            } else {
                                parent
                            };
                            sync_dir(parent)?;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    return Err(SinkError::Misconfigured {
                        message: format!(
                            "cannot use directory {}: a parent is not a directory",
                            dir.display()
                        ),
                    })
                }
                Err(e) => {
                    return Err(io_error(
                        &format!("cannot access directory {}", dir.display()),
                        &e,
                    ))
                }
            }
            let identity = FileIdentity::of(dir)
                .map_err(|e| io_error(&format!("cannot stat {}", dir.display()), &e))?;
            self.directory_identity = Some(identity);
            self.prepared = true;
            return Ok(());
        }
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(SinkError::transient(format!(
                    "{} is no longer a directory",
                    dir.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SinkError::transient(format!(
                    "directory {} is missing; it is only created at start-up (is its volume \
                     mounted?)",
                    dir.display()
                )))
            }
            Err(e) => {
                return Err(io_error(
                    &format!("cannot access directory {}", dir.display()),
                    &e,
                ))
            }
        }
        self.check_directory()
    }

    /// Fails if the directory path now names another directory than the one first opened.
    fn check_directory(&self) -> Result<(), SinkError> {
        match &self.directory_identity {
            Some(identity) => identity.check().map_err(|m| {
                SinkError::transient(format!(
                    "directory is not the one opened at start-up ({m}); restart to accept a \
                     new one"
                ))
            }),
            None => Ok(()),
        }
    }

    /// The newest file of this prefix in the directory, if any.
    fn newest_file(&self) -> Result<Option<(FileStamp, PathBuf)>, SinkError> {
        let dir = &self.directory;
        let list_error = |e: io::Error| io_error(&format!("cannot list {}", dir.display()), &e);
        let mut newest: Option<(FileStamp, std::ffi::OsString)> = None;
        for entry in fs::read_dir(dir).map_err(list_error)? {
            let name = entry.map_err(list_error)?.file_name();
            let Some(stamp) = name
                .to_str()
                .and_then(|n| FileStamp::parse(&self.config.prefix, n))
            else {
                continue;
            };
            if newest.as_ref().is_none_or(|(s, _)| stamp > *s) {
                newest = Some((stamp, name));
            }
        }
        Ok(newest.map(|(stamp, name)| (stamp, dir.join(name))))
    }

    /// Creates the next file after `after`, making its name durable when `fsync` is on.
    fn create_file(&self, now: SystemTime, after: Option<FileStamp>) -> Result<Current, SinkError> {
        self.check_directory()?;
        let stamp = FileStamp::next(naming::utc(now), after);
        let path = self.directory.join(stamp.file_name(&self.config.prefix));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error(&format!("cannot create {}", path.display()), &e))?;
        if self.config.fsync {
            sync_dir(&self.directory)?;
        }
        let identity = FileIdentity::of(&path)
            .map_err(|e| io_error(&format!("cannot stat {}", path.display()), &e))?;
        tracing::info!(path = %path.display(), "started a new file");
        Ok(Current {
            file,
            path,
            stamp,
            identity,
            created: now,
        })
    }

    /// Appends the encoded batch to the current file, rotating first if due. Any failure
    /// leaves `current` empty, so the next call reopens.
    fn append_buffer(&mut self, now: SystemTime, messages: usize) -> Result<(), SinkError> {
        let Some(mut current) = self.current.take() else {
            return Err(SinkError::transient("file sink is not open"));
        };
        let mut size = file_len(&current)?;
        if let Some(reason) = rotation_due(
            size,
            current.created,
            now,
            self.config.rotate_bytes,
            self.config.rotate_interval_ms,
        ) {
            tracing::debug!(path = %current.path.display(), ?reason, size, "rotating");
            current = self.create_file(now, Some(current.stamp))?;
            size = file_len(&current)?;
        }
        current.identity.check().map_err(SinkError::transient)?;
        commit(
            &mut current.file,
            size,
            &self.buffer,
            self.config.fsync,
            &current.path,
        )
        .map_err(|e| {
            io_error(
                &format!(
                    "cannot write {messages} messages to {}",
                    current.path.display()
                ),
                &e,
            )
        })?;
        self.current = Some(current);
        Ok(())
    }
}

impl BlockingSink for FileSink {
    fn is_open(&self) -> bool {
        self.current.is_some()
    }

    /// Prepares the directory (created the first time only) and opens (or reopens) the
    /// newest file of the prefix, cutting a torn last line, or starts a new file.
    fn open_blocking(&mut self) -> Result<(), SinkError> {
        self.current = None;
        self.prepare_directory()?;
        let newest = self.newest_file()?;
        let now = (self.clock)();
        let mut after = None;
        if let Some((stamp, path)) = newest {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)
                .map_err(|e| io_error(&format!("cannot open {}", path.display()), &e))?;
            let len = cut_torn_tail(&file, &path)
                .map_err(|e| io_error(&format!("cannot repair {}", path.display()), &e))?;
            if self.config.rotate_bytes == 0 || len < self.config.rotate_bytes {
                let identity = FileIdentity::of(&path)
                    .map_err(|e| io_error(&format!("cannot stat {}", path.display()), &e))?;
                if self.config.fsync {
                    // Covers a file whose creation was not yet made durable (the directory
                    // sync failed before the process stopped or the handle was dropped).
                    sync_dir(&self.directory)?;
                }
                self.current = Some(Current {
                    file,
                    path,
                    stamp,
                    identity,
                    created: SystemTime::from(stamp.created),
                });
                return Ok(());
            }
            after = Some(stamp);
        }
        self.current = Some(self.create_file(now, after)?);
        Ok(())
    }

    /// Appends the batch with one write and, when `fsync` is on, one fdatasync.
    fn write_blocking(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        let now = (self.clock)();
        self.buffer.clear();
        let written_at = rfc3339(naming::utc(now));
        for (index, envelope) in batch.iter().enumerate() {
            record::encode(envelope, &written_at, &mut self.buffer).map_err(|e| {
                SinkError::Permanent {
                    index: Some(index),
                    message: format!("cannot encode message as a JSON line: {e}"),
                }
            })?;
        }
        let result = self.append_buffer(now, batch.len());
        if self.buffer.capacity() > RETAINED_BUFFER_BYTES {
            self.buffer = Vec::new();
        }
        result
    }

    /// Checks the current file is still the one opened.
    fn health_blocking(&mut self) -> Result<(), SinkError> {
        let Some(current) = &self.current else {
            return Err(SinkError::transient("file sink is not open"));
        };
        if let Err(m) = current.identity.check() {
            // Dropped, so the next call tries to open again and notices a recovery.
            self.current = None;
            return Err(SinkError::transient(m));
        }
        Ok(())
    }
}

/// What [`commit`] needs from a file: lets tests inject a failing write.
pub(crate) trait BatchFile {
    /// Appends all of `buf`.
    fn append_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the appended data durable (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
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
}

/// Appends `buf` to a file that was `before` bytes long and syncs it if `fsync`. On
/// failure, cuts the file back to `before` so no partial line of the batch stays.
pub(crate) fn commit<F: BatchFile>(
    file: &mut F,
    before: u64,
    buf: &[u8],
    fsync: bool,
    path: &Path,
) -> io::Result<()> {
    let result = file
        .append_all(buf)
        .and_then(|()| if fsync { file.sync_data() } else { Ok(()) });
    if let Err(e) = result {
        if let Err(cut) = file.truncate(before) {
            tracing::warn!(
                path = %path.display(),
                error = %cut,
                "cannot remove the failed batch from the file; a torn last line is cut on reopen"
            );
        }
        return Err(e);
    }
    Ok(())
}

/// The current length of the open file.
fn file_len(current: &Current) -> Result<u64, SinkError> {
    current
        .file
        .metadata()
        .map(|m| m.len())
        .map_err(|e| io_error(&format!("cannot stat {}", current.path.display()), &e))
}

/// If the file does not end with `\n` (a write interrupted by a crash), cuts it back to
/// just after its last `\n` (or to empty) and syncs it. Returns the resulting length.
fn cut_torn_tail(file: &File, path: &Path) -> io::Result<u64> {
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

/// Makes the directory's entries durable (a created file's name).
fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(&format!("cannot sync directory {}", dir.display()), &e))
}
