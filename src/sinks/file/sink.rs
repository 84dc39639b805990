//! [`FileSink`]: the I/O half of the file destination. It holds the directory lock, owns
//! the current file, decides when to rotate, appends each batch with one write and one
//! fdatasync — leaving out what the files already hold ([`Catalog`]) — and turns every
//! failure into a transient error that leaves no partial line behind and cuts nothing it
//! did not write (`tail`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::append::{commit, cut_torn_tail};
use super::columnar::ParquetFiles;
use super::config::FileConfig;
use super::directory::{sync_dir, Directory};
use super::held::Catalog;
use super::lock::DirectoryLock;
use super::naming::{self, FileStamp};
use super::record;
use super::tail::{self, Expected, Found, Reopen};
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::blocking::BlockingSink;
use crate::sinks::contract::{Feed, Probe, SinkError, Written};
use crate::sinks::parquet::Format;
use crate::sinks::util::file_identity::FileIdentity;
use crate::sinks::util::io_error;

/// Where the sink reads the time: file names, rotation by age and `written_at`.
pub type Clock = Box<dyn Fn() -> SystemTime + Send + Sync>;

/// Runs between the fdatasync and the identity check of each batch; tests inject one to
/// unlink or replace the file at exactly that point.
pub(crate) type AfterSync = Box<dyn FnMut(&Path) + Send + Sync>;

/// Above this capacity the encode buffer is released after a batch instead of kept.
const RETAINED_BUFFER_BYTES: usize = 8 << 20;

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
    /// The directory, created at the first open only and then required to stay the same.
    dir: Directory,
    clock: Clock,
    /// The exclusive lock on the directory and prefix, taken at the first open and held
    /// until the sink is dropped.
    lock: Option<DirectoryLock>,
    /// The file batches go to; `None` after a failure, so the next call reopens.
    current: Option<Current>,
    /// What this writer knows of the last file it wrote, kept across a failure so the
    /// reopen cuts only its own bytes; `None` before the first open.
    expected: Option<Expected>,
    /// Test hook between the sync and the identity check.
    after_sync: Option<AfterSync>,
    /// Encoded batch, reused between batches.
    buffer: Vec<u8>,
    /// With `format: "parquet"`, the writer of whole files, which every call goes to.
    parquet: Option<ParquetFiles>,
    /// The source stream, whose lines count as held ([`BlockingSink::attach_blocking`]).
    stream: Option<String>,
    /// When the source stream was created: older files hold another stream's messages.
    since: Option<SystemTime>,
    /// What the files hold; loaded at each open.
    catalog: Catalog,
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
            .close_current(self.dir.path(), &name, self.config.fsync)
            .map_err(|e| io_error(&format!("cannot seal {}", self.dir.path().join(&name).display()), &e))?;
        self.create_file(now, Some(stamp))
    }

    /// Appends the encoded batch to the current file, rotating first if due. Any failure
    /// leaves `current` empty, so the next call reopens.
    fn append_buffer(&mut self, now: SystemTime, messages: usize) -> Result<(), SinkError> {
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

impl FileSink {
    /// Catalogs what the prefix's files hold; `current` is the file appended to next.
    fn load_catalog(&mut self, current: &Path) -> Result<(), SinkError> {
        let dir = self.dir.path();
        let (catalog, read) = Catalog::load(
            self.stream.clone(),
            dir,
            &self.config.prefix,
            self.since,
            Some(current),
            self.config.fsync,
        )
        .map_err(|e| io_error(&format!("cannot catalog the files of {}", dir.display()), &e))?;
        if read > 1 {
            tracing::info!(directory = %dir.display(), files = read, "read JSON Lines files without a seal to learn which messages they hold; sealed them");
        }
        self.catalog = catalog;
        Ok(())
    }

    /// Writes what of `batch` the files do not hold yet, in the batch's order; the
    /// positions of the rest (held, or a second copy of a message in the batch).
    fn write_new(&mut self, batch: &[Envelope]) -> Result<Vec<usize>, SinkError> {
        let now = (self.clock)();
        if let Some(p) = self.parquet.as_mut() {
            return p.write(batch, now);
        }
        let held = self
            .catalog
            .held(self.dir.path(), batch.iter().map(|e| e.stream_sequence))
            .map_err(|e| io_error(&format!("cannot read the seals of {}", self.dir.path().display()), &e))?;
        let mut seen = std::collections::HashSet::with_capacity(batch.len());
        let mut already = Vec::new();
        let mut written = Vec::with_capacity(batch.len());
        self.buffer.clear();
        let written_at = rfc3339(naming::utc(now));
        for (index, envelope) in batch.iter().enumerate() {
            let seq = envelope.stream_sequence;
            if held.contains(&seq) || !seen.insert(seq) {
                already.push(index);
                continue;
            }
            record::encode(envelope, &written_at, &mut self.buffer).map_err(|e| {
                SinkError::Permanent {
                    index: Some(index),
                    message: format!("cannot encode message as a JSON line: {e}"),
                }
            })?;
            written.push(seq);
        }
        if !already.is_empty() {
            tracing::debug!(directory = %self.dir.path().display(), messages = already.len(), "messages delivered again are in the directory's files; not written again");
        }
        let result = match written.is_empty() {
            true => Ok(()),
            false => self.append_buffer(now, written.len()),
        };
        if self.buffer.capacity() > RETAINED_BUFFER_BYTES {
            self.buffer = Vec::new();
        }
        result?;
        self.catalog.appended(&written);
        Ok(already)
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
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)
                .map_err(|e| io_error(&format!("cannot open {}", path.display()), &e))?;
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
                    .is_ok_and(|m| m < since)
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
