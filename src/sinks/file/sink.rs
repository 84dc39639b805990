//! [`FileSink`]: the I/O half of the file destination. It holds the directory lock, owns
//! the current file, decides when to rotate, appends each batch with one write and one
//! fdatasync — leaving out what the files already hold ([`Catalog`]) — and turns every
//! failure into a transient error that leaves no partial line behind and cuts nothing it
//! did not write (`tail`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::append::{commit, cut_torn_tail};
use super::columnar::ParquetFiles;
use super::config::FileConfig;
use super::directory::{sync_dir, Directory};
use super::held::Catalog;
use super::lock::DirectoryLock;
use super::naming::{self, FileStamp};
use super::rotation::rotation_due;
use super::tail::{self, Expected, Found, Reopen};
use crate::envelope::Envelope;
use crate::sinks::blocking::BlockingSink;
use crate::sinks::contract::{Feed, Probe, SinkError, Written};
use crate::sinks::parquet::Format;
use crate::sinks::util::archive::predates_stream;
use crate::sinks::util::file_identity::FileIdentity;
use crate::sinks::util::io_error;

/// Where the sink reads the time: file names, rotation by age and `written_at`.
pub type Clock = Box<dyn Fn() -> SystemTime + Send + Sync>;

/// Runs between the fdatasync and the identity check of each batch; tests inject one to
/// unlink or replace the file at exactly that point.
pub(crate) type AfterSync = Box<dyn FnMut(&Path) + Send + Sync>;

/// Above this capacity the encode buffer is released after a batch instead of kept.
pub(super) const RETAINED_BUFFER_BYTES: usize = 8 << 20;

/// Writes batches as JSON Lines into rotating files of a directory.
///
/// See the [module documentation](super) for the file format, the rotation and recovery
/// rules and the at-least-once guarantee.
pub struct FileSink {
    pub(super) config: FileConfig,
    /// The directory, created at the first open only and then required to stay the same.
    pub(super) dir: Directory,
    pub(super) clock: Clock,
    /// The exclusive lock on the directory and prefix, taken at the first open and held
    /// until the sink is dropped.
    pub(super) lock: Option<DirectoryLock>,
    /// The file batches go to; `None` after a failure, so the next call reopens.
    pub(super) current: Option<Current>,
    /// What this writer knows of the last file it wrote, kept across a failure so the
    /// reopen cuts only its own bytes; `None` before the first open.
    pub(super) expected: Option<Expected>,
    /// Test hook between the sync and the identity check.
    pub(super) after_sync: Option<AfterSync>,
    /// Encoded batch, reused between batches.
    pub(super) buffer: Vec<u8>,
    /// With `format: "parquet"`, the writer of whole files, which every call goes to.
    pub(super) parquet: Option<ParquetFiles>,
    /// The source stream, whose lines count as held ([`BlockingSink::attach_blocking`]).
    pub(super) stream: Option<String>,
    /// When the source stream was created: older files hold another stream's messages.
    pub(super) since: Option<SystemTime>,
    /// What the files hold; loaded at each open.
    pub(super) catalog: Catalog,
}

/// The open file batches are appended to.
pub(super) struct Current {
    file: File,
    path: PathBuf,
    stamp: FileStamp,
    identity: FileIdentity,
    /// When it was created, for rotation by age.
    created: SystemTime,
}

impl FileSink {
    /// A sink for `config`, reading the system clock. Does no I/O: [`Sink::open`](crate::sinks::contract::Sink::open)
    /// does.
    pub fn new(config: FileConfig) -> FileSink {
        FileSink::with_clock(config, Box::new(SystemTime::now))
    }

    /// A sink reading time from `clock` (tests inject one to drive rotation by age).
    pub fn with_clock(config: FileConfig, clock: Clock) -> FileSink {
        FileSink {
            parquet: (config.format == Format::Parquet).then(|| ParquetFiles::new(&config)),
            dir: Directory::new(PathBuf::from(&config.directory), config.fsync),
            config,
            clock,
            lock: None,
            current: None,
            expected: None,
            after_sync: None,
            buffer: Vec::new(),
            stream: None,
            since: None,
            catalog: Catalog::default(),
        }
    }

    /// Installs a hook run after each fdatasync, before the file's identity is checked.
    #[cfg(test)]
    pub(crate) fn set_after_sync(&mut self, hook: AfterSync) {
        self.after_sync = Some(hook);
    }

    /// Takes the directory lock unless this sink already holds it.
    fn take_lock(&mut self) -> Result<(), SinkError> {
        if self.lock.is_none() {
            self.lock = Some(DirectoryLock::acquire(
                self.dir.path(),
                &self.config.prefix,
            )?);
        }
        Ok(())
    }

    /// The newest file of this prefix in the directory, if any.
    fn newest_file(&self) -> Result<Option<(FileStamp, PathBuf)>, SinkError> {
        let dir = self.dir.path();
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
    fn create_file(
        &mut self,
        now: SystemTime,
        after: Option<FileStamp>,
    ) -> Result<Current, SinkError> {
        self.dir.check()?;
        let stamp = FileStamp::next(naming::utc(now), after);
        let path = self.dir.path().join(stamp.file_name(&self.config.prefix));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error(&format!("cannot create {}", path.display()), &e))?;
        if self.config.fsync {
            sync_dir(self.dir.path())?;
        }
        let current = Current::new(file, path, stamp, now)?;
        self.expected = Some(Expected::at(found(&current.file, &current.path)?));
        tracing::info!(path = %current.path.display(), "started a new file");
        Ok(current)
    }

    /// Closes `current` — sealing what it holds beside it — and starts the next file.
    fn rotate(&mut self, current: Current, now: SystemTime) -> Result<Current, SinkError> {
        let stamp = current.stamp;
        let name = stamp.file_name(&self.config.prefix);
        drop(current);
        self.catalog
            .close_current(self.dir.path(), &name)
            .map_err(|e| {
                io_error(
                    &format!("cannot seal {}", self.dir.path().join(&name).display()),
                    &e,
                )
            })?;
        self.create_file(now, Some(stamp))
    }

    /// Appends the encoded batch to the current file, rotating first if due. Any failure
    /// leaves `current` empty, so the next call reopens.
    pub(super) fn append_buffer(
        &mut self,
        now: SystemTime,
        messages: usize,
    ) -> Result<(), SinkError> {
        let Some(mut current) = self.current.take() else {
            return Err(SinkError::transient("file sink is not open"));
        };
        let mut size = file_len(&current)?;
        if let Some(expected) = self.expected.filter(|e| e.len != size) {
            // Someone else wrote to or cut the file: leave it as it is.
            tracing::warn!(
                path = %current.path.display(),
                expected = expected.len,
                found = size,
                "the file changed size outside this writer; continuing in a new file"
            );
            current = self.rotate(current, now)?;
            size = file_len(&current)?;
        } else if let Some(reason) = rotation_due(
            size,
            current.created,
            now,
            self.config.rotate_bytes,
            self.config.rotate_interval_ms,
        ) {
            tracing::debug!(path = %current.path.display(), ?reason, size, "rotating");
            current = self.rotate(current, now)?;
            size = file_len(&current)?;
        }
        current
            .identity
            .check()
            .map_err(|e| SinkError::transient(e.to_string()))?;
        let bytes = self.buffer.len() as u64;
        let mut hook = self.after_sync.take();
        let result = commit(
            &mut current.file,
            size,
            &self.buffer,
            self.config.fsync,
            &current.path,
            &mut |p: &Path| {
                if let Some(h) = hook.as_mut() {
                    h(p)
                }
            },
        );
        self.after_sync = hook;
        let expected = self.expected.map(|e| match &result {
            Ok(()) => e.committed(bytes),
            Err(_) => e.failed(bytes),
        });
        self.expected = expected;
        result.map_err(|e| {
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

impl Current {
    /// The open file `file` at `path`, with the identity of the path now.
    fn new(
        file: File,
        path: PathBuf,
        stamp: FileStamp,
        created: SystemTime,
    ) -> Result<Current, SinkError> {
        let identity = FileIdentity::of(&path)
            .map_err(|e| io_error(&format!("cannot stat {}", path.display()), &e))?;
        Ok(Current {
            file,
            path,
            stamp,
            identity,
            created,
        })
    }
}

impl BlockingSink for FileSink {
    fn attach_blocking(&mut self, feed: &Feed) {
        self.stream = Some(feed.stream.clone());
    }

    /// Files modified before `at` hold a deleted stream's messages: they are not counted,
    /// and a JSON Lines writer starts a new file rather than append to one.
    fn stream_created_blocking(&mut self, at: SystemTime) {
        if let Some(p) = self.parquet.as_mut() {
            p.stream_created(at);
        } else if self.since != Some(at) {
            self.since = Some(at);
            // Reopened before the next write, which catalogs the files again.
            self.current = None;
        }
    }

    fn is_open(&self) -> bool {
        match &self.parquet {
            Some(p) => p.is_open(),
            None => self.current.is_some(),
        }
    }

    /// Prepares the directory (created the first time only), takes the directory lock
    /// (the first time only), and continues the newest file of the prefix or starts a new
    /// one, as `tail::reopen` decides: a torn last line is cut at the first open, later
    /// only this writer's own failed bytes.
    fn open_blocking(&mut self) -> Result<(), SinkError> {
        if let Some(p) = self.parquet.as_mut() {
            return p.open();
        }
        self.current = None;
        self.dir.prepare()?;
        self.take_lock()?;
        let newest = self.newest_file()?;
        let now = (self.clock)();
        let mut after = None;
        if let Some((stamp, path)) = newest {
            after = Some(stamp);
            // Never through a link planted at the newest name, and only a regular file: a
            // torn tail is cut here, and must be cut in this writer's own file.
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .map_err(|e| io_error(&format!("cannot open {}", path.display()), &e))?;
            if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
                return Err(SinkError::Misconfigured {
                    message: format!(
                        "{} is not a regular file; jetsink continues only a JSON Lines file it wrote",
                        path.display()
                    ),
                });
            }
            let on_disk = found(&file, &path)?;
            let repair = |e: io::Error| io_error(&format!("cannot repair {}", path.display()), &e);
            let len = match tail::reopen(on_disk, self.expected) {
                Reopen::Continue => Some(on_disk.len),
                Reopen::CutTo(len) => {
                    file.set_len(len)
                        .and_then(|()| file.sync_all())
                        .map_err(repair)?;
                    tracing::warn!(
                        path = %path.display(),
                        cut_bytes = on_disk.len - len,
                        "cut the rest of a failed batch"
                    );
                    Some(len)
                }
                Reopen::RepairTorn => Some(cut_torn_tail(&file, &path).map_err(repair)?),
                Reopen::StartNew(why) => {
                    tracing::warn!(path = %path.display(), ?why, "the newest file is not as this writer left it; leaving it alone and starting a new file");
                    None
                }
            };
            let older = self.since.is_some_and(|since| {
                file.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| predates_stream(m, since))
            });
            if let Some(len) = len.filter(|_| !older) {
                if self.config.rotate_bytes == 0 || len < self.config.rotate_bytes {
                    if self.config.fsync {
                        // Covers a file whose creation was not yet made durable (the
                        // directory sync failed before the process stopped or the handle
                        // was dropped).
                        sync_dir(self.dir.path())?;
                    }
                    let current = Current::new(file, path, stamp, SystemTime::from(stamp.created))?;
                    self.expected = Some(Expected::at(Found { len, ..on_disk }));
                    self.load_catalog(&current.path)?;
                    self.current = Some(current);
                    return Ok(());
                }
            }
        }
        let current = self.create_file(now, after)?;
        self.load_catalog(&current.path)?;
        self.current = Some(current);
        Ok(())
    }

    /// The directory: there and writable, or creatable. The lock is not taken.
    fn probe_blocking(&mut self) -> Result<Probe, SinkError> {
        crate::sinks::util::probe_directory(self.dir.path())
    }

    /// Distinct keys of `stream` in this prefix's files, read back from the directory.
    fn stored_keys_blocking(&mut self, stream: &str) -> Result<Option<u64>, SinkError> {
        let (dir, prefix) = (self.dir.path(), self.config.prefix.as_str());
        match self.parquet {
            Some(_) => super::columnar::stored_keys(dir, prefix, stream)
                .map_err(|e| SinkError::transient(e.to_string())),
            None => super::count::distinct_sequences(dir, prefix, stream)
                .map(Some)
                .map_err(|e| SinkError::transient(e.to_string())),
        }
    }

    /// As `write_outcomes_blocking`, for the whole batch.
    fn write_blocking(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        self.write_new(batch).map(|_| ())
    }

    /// Appends the batch with one write and, when `fsync` is on, one fdatasync; or, with
    /// Parquet, writes it as one file. Either way what the files already hold is left out
    /// and named, committed without a second copy.
    fn write_outcomes_blocking(&mut self, batch: &[Envelope]) -> Written {
        match self.write_new(batch) {
            Ok(already) => Written::committed(batch.len(), &already),
            Err(e) => Written::Batch(Err(e)),
        }
    }

    /// Checks the current file is still the one opened.
    fn health_blocking(&mut self) -> Result<(), SinkError> {
        if let Some(p) = self.parquet.as_mut() {
            return p.health();
        }
        let Some(current) = &self.current else {
            return Err(SinkError::transient("file sink is not open"));
        };
        if let Err(m) = current.identity.check() {
            // Dropped, so the next call tries to open again and notices a recovery.
            self.current = None;
            return Err(SinkError::transient(m.to_string()));
        }
        Ok(())
    }
}

/// The identity and length of the open `file` at `path`.
fn found(file: &File, path: &Path) -> Result<Found, SinkError> {
    let meta = file
        .metadata()
        .map_err(|e| io_error(&format!("cannot stat {}", path.display()), &e))?;
    Ok(Found {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
    })
}

/// The current length of the open file.
fn file_len(current: &Current) -> Result<u64, SinkError> {
    current
        .file
        .metadata()
        .map(|m| m.len())
        .map_err(|e| io_error(&format!("cannot stat {}", current.path.display()), &e))
}
