//! [`ParquetFiles`]: the file destination with `format: "parquet"`. A Parquet file cannot
//! be appended to (its footer, which every reader starts from, is written last), so each
//! write is one whole file: encoded into a hidden temporary name, synced, renamed to its
//! final name and the directory synced — and only then reported committed, so a batch is
//! never ACKed before the file holding it is durable under its final name. With the
//! destination's `rollover`, the runner gathers several pulled batches into one write,
//! which is what "rotation" is here: a new file per write, sized by `max_messages` and
//! `max_age_ms`.
//!
//! The final name is a function of the stream sequences the file holds, as the s3
//! destination's object keys (`<prefix>-<first>-<last>[-<hash>].parquet`), so writing the
//! same messages again after a failed rename replaces the same file instead of adding
//! rows. A crash before the rename leaves only a temporary file, which the next start
//! removes (it holds the directory lock, so no other writer owns it).
//!
//! A crash after the rename and before the ACKs, a server that rolls its consumer state
//! back, or a replay brings messages back, in batches cut elsewhere and often as first
//! deliveries. So the writer keeps a catalog of what the directory holds
//! ([`Holdings`]): built from the listing `open` makes anyway, kept in step with every
//! file it renames into place, and built again from a fresh listing after a write that
//! failed part-way. Every message of a batch is checked against it — by the names alone,
//! or for a hashed name by reading the file's `stream_sequence` column once — and those
//! the directory holds are left out and reported already stored ([`ParquetFiles::write`];
//! the naming rules are [`crate::sinks::util::archive`]'s). A message is then in exactly
//! one file. Files last modified before the source stream was created are not counted:
//! they hold a deleted stream's messages, whose sequences the new stream uses again.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::config::FileConfig;
use super::directory::{sync_dir, Directory};
use super::lock::DirectoryLock;
use super::naming;
use crate::envelope::Envelope;
use crate::sinks::contract::SinkError;
use crate::sinks::parquet::read::ReadError;
use crate::sinks::parquet::{EncodeError, Encoder, Options, SettingsRefused};
use crate::sinks::util::archive::{self, object_name, predates_stream, Known, Named};
use crate::sinks::util::holdings::Holdings;
use crate::sinks::util::io_error;

/// The ending of every Parquet file.
pub const EXTENSION: &str = ".parquet";
/// The ending of a temporary file, after [`EXTENSION`].
const TEMPORARY: &str = ".tmp";

/// Writes each batch as one Parquet file of a directory.
pub(crate) struct ParquetFiles {
    dir: Directory,
    prefix: String,
    fsync: bool,
    options: Result<Arc<Options>, SettingsRefused>,
    lock: Option<DirectoryLock>,
    open: bool,
    /// What the directory's files hold; `None` until listed, and again after a write that
    /// failed part-way (it may have renamed its file before failing).
    holdings: Option<Holdings>,
    /// The sequences of hashed files read (or written) so far, by file name.
    known: Known,
    /// When the source stream was created: older files are not counted.
    since: Option<SystemTime>,
}

/// `<prefix>-<first>-<last>[-<hash>].parquet` for `sorted` sequences.
pub fn file_name(prefix: &str, sorted: &[u64]) -> String {
    format!("{prefix}-{}{EXTENSION}", object_name(sorted))
}

/// Whether `name` is a temporary file of `prefix` (`.<final name>.tmp`).
fn is_temporary(prefix: &str, name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_prefix(prefix))
        .is_some_and(|n| n.starts_with('-') && n.ends_with(&format!("{EXTENSION}{TEMPORARY}")))
}

impl ParquetFiles {
    /// The Parquet files `config` describes; nothing is touched yet.
    pub(crate) fn new(config: &FileConfig) -> ParquetFiles {
        let options = config
            .parquet_keys()
            .resolve()
            .map(Arc::new)
            .map_err(SettingsRefused);
        ParquetFiles {
            dir: Directory::new(PathBuf::from(&config.directory), config.fsync),
            prefix: config.prefix.clone(),
            fsync: config.fsync,
            options,
            lock: None,
            open: false,
            holdings: None,
            known: Known::default(),
            since: None,
        }
    }

    /// Counts only files modified at or after `created`, when the source stream was
    /// created ([`crate::sinks::Sink::stream_created`]); a change lists the directory again.
    pub(crate) fn stream_created(&mut self, created: SystemTime) {
        if self.since != Some(created) {
            self.since = Some(created);
            self.holdings = None;
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// Prepares the directory, takes its lock (the first time), removes the temporary
    /// files a crash left behind and catalogs what the directory holds.
    pub(crate) fn open(&mut self) -> Result<(), SinkError> {
        self.open = false;
        if let Err(e) = &self.options {
            return Err(SinkError::Misconfigured {
                message: e.to_string(),
            });
        }
        self.dir.prepare()?;
        if self.lock.is_none() {
            self.lock = Some(DirectoryLock::acquire(self.dir.path(), &self.prefix)?);
        }
        let dir = self.dir.path();
        let list_error =
            |e: std::io::Error| io_error(&format!("cannot list {}", dir.display()), &e);
        let mut removed = 0usize;
        let mut holdings = Holdings::new();
        let mut older = 0usize;
        for entry in fs::read_dir(dir).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if is_temporary(&self.prefix, name) {
                let path = entry.path();
                fs::remove_file(&path)
                    .map_err(|e| io_error(&format!("cannot remove {}", path.display()), &e))?;
                removed += 1;
                continue;
            }
            let Some((stem, named)) = self.named(name) else {
                continue;
            };
            if let Some(since) = self.since {
                let modified = entry.metadata().and_then(|m| m.modified());
                let modified = modified.map_err(|e| {
                    io_error(&format!("cannot stat {}", entry.path().display()), &e)
                })?;
                if predates_stream(modified, since) {
                    older += 1;
                    continue;
                }
            }
            holdings.add_named(stem, named);
        }
        if older > 0 {
            tracing::info!(directory = %dir.display(), files = older, "Parquet files written before the source stream was created are not counted as holding its messages");
        }
        self.holdings = Some(holdings);
        if removed > 0 {
            tracing::warn!(directory = %dir.display(), removed, "removed temporary Parquet files an interrupted write left");
            if self.fsync {
                sync_dir(dir)?;
            }
        }
        self.open = true;
        Ok(())
    }

    /// Writes `batch` as one file, durable under its final name before it returns `Ok`,
    /// leaving out the messages the directory's files already hold (and a second copy of
    /// a message in the batch): `Ok` names their positions, committed without being
    /// written again. When every message is held, no file is written.
    pub(crate) fn write(
        &mut self,
        batch: &[Envelope],
        now: SystemTime,
    ) -> Result<Vec<usize>, SinkError> {
        let options = self.options.clone().map_err(|e| SinkError::Misconfigured {
            message: e.to_string(),
        })?;
        self.dir.check()?;
        let mut members: Vec<usize> = (0..batch.len()).collect();
        members.sort_by_key(|&i| batch[i].stream_sequence);
        let held = self.held(batch.iter().map(|e| e.stream_sequence))?;
        let (members, stored) = archive::split(batch, &members, &held);
        if members.is_empty() {
            return Ok(stored);
        }
        let seqs: Vec<u64> = members.iter().map(|&i| batch[i].stream_sequence).collect();
        let name = file_name(&self.prefix, &seqs);
        let path = self.dir.path().join(&name);
        let temporary = self.dir.path().join(format!(".{name}{TEMPORARY}"));
        let result = self.commit(batch, &members, options, now, &temporary, &path);
        match &result {
            Ok(()) => self.wrote(name, &seqs),
            Err(e) => {
                // Best effort: the next start removes what is left.
                let _ = fs::remove_file(&temporary);
                if !matches!(e, SinkError::Permanent { .. }) {
                    // The file may be in place: list the directory again.
                    self.open = false;
                    self.holdings = None;
                }
            }
        }
        result.map(|()| stored)
    }

    /// Records a file renamed into place.
    fn wrote(&mut self, name: String, seqs: &[u64]) {
        let Some(holdings) = self.holdings.as_mut() else {
            return;
        };
        let stem = object_name(seqs);
        holdings.add_unit(&stem, seqs);
        if Named::parse(&stem).is_some_and(|n| n.hashed) {
            // Kept, so a later batch finds what it holds without reading it back.
            self.known.insert(name, Some(Arc::from(seqs)));
        }
    }

    /// Which of `batch`'s sequences the directory's files hold: a name without hash by its
    /// range, a hashed one by the sequences read from it (once; then from [`Known`]).
    fn held(
        &mut self,
        batch: impl IntoIterator<Item = u64>,
    ) -> Result<std::collections::BTreeSet<u64>, SinkError> {
        if self.holdings.is_none() {
            self.open()?;
        }
        let Some(holdings) = self.holdings.as_ref() else {
            return Err(SinkError::transient("the Parquet directory is not open"));
        };
        let wanted = holdings.may_hold(batch);
        if wanted.is_empty() {
            return Ok(wanted);
        }
        let dir = self.dir.path().to_path_buf();
        for stem in holdings.to_read(&wanted) {
            let name = format!("{}-{stem}{EXTENSION}", self.prefix);
            if self.known.get(&name).is_some() {
                continue;
            }
            // A file gone since the listing holds nothing.
            let read = read_sequences(&dir.join(&name), &stem)?.flatten();
            self.known.insert(name, read);
        }
        let known = &self.known;
        let held = holdings.held(&wanted, |stem| {
            known
                .get(&format!("{}-{stem}{EXTENSION}", self.prefix))
                .flatten()
        });
        if !held.is_empty() {
            tracing::debug!(directory = %dir.display(), messages = held.len(), "messages delivered again are in the directory's files; not written again");
        }
        Ok(held)
    }

    /// A final file of this prefix: its name without prefix and extension, and what that
    /// says.
    fn named<'a>(&self, name: &'a str) -> Option<(&'a str, Named)> {
        let stem = name
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('-')?
            .strip_suffix(EXTENSION)?;
        Some((stem, Named::parse(stem)?))
    }

    fn commit(
        &self,
        batch: &[Envelope],
        members: &[usize],
        options: Arc<Options>,
        now: SystemTime,
        temporary: &Path,
        path: &Path,
    ) -> Result<(), SinkError> {
        let shown = temporary.display();
        // The one writer of a file jetsink owns: created new, never through a link planted
        // at the temporary name (one there is unlinked first), renamed over `path` below.
        let (staged, file) = crate::files::Staged::at(path, temporary, 0o666)
            .map_err(|e| SinkError::transient(e.to_string()))?;
        let written_at = naming::utc(now);
        let refused = |e: EncodeError| match e {
            EncodeError::Refused { index, message } => SinkError::Permanent {
                index: Some(index),
                message: format!(
                    "{}: stream {} sequence {}: {message}",
                    self.dir.path().display(),
                    batch[index].stream,
                    batch[index].stream_sequence
                ),
            },
            EncodeError::Failed(m) => SinkError::transient(format!("cannot write {shown}: {m}")),
        };
        let mut encoder = Encoder::new(file, options).map_err(refused)?;
        for group in members.chunks(encoder.rows_per_group()) {
            encoder
                .write_group(batch, group, written_at)
                .map_err(refused)?;
        }
        let file: File = encoder.finish().map_err(refused)?;
        // Synced (file, then directory) when `fsync` is on, as before.
        staged
            .rename_over(file, self.fsync)
            .map_err(|e| SinkError::transient(e.to_string()))?;
        // A directory replaced meanwhile (an unmounted volume) would hold the file where
        // no one looks: fail the batch, it is written again.
        self.dir.check()
    }

    /// Checks the directory is still the one opened.
    pub(crate) fn health(&mut self) -> Result<(), SinkError> {
        let result = self.dir.check();
        if result.is_err() {
            self.open = false;
        }
        result
    }
}

/// The sorted sequences of the hashed file `path` (named `stem`): `Ok(None)` when it is
/// gone, `Ok(Some(None))` when it cannot tell — unreadable, not jetsink's layout, or
/// holding other sequences than its name says — which is warned about (once: the caller
/// keeps the answer), and the messages are written again rather than trusted to it. An
/// error reading the disk is transient, and holds the batch.
fn read_sequences(path: &Path, stem: &str) -> Result<Option<Option<Arc<[u64]>>>, SinkError> {
    let read = match crate::files::read(path, crate::files::Kind::Parquet) {
        Ok(data) => crate::sinks::parquet::read::sequences(data.into()).map_err(|e| e.to_string()),
        Err(crate::files::FileError::Io { source, .. }) => {
            if source.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(io_error(
                &format!("cannot read {}", path.display()),
                &source,
            ));
        }
        // Not a regular file, or larger than any Parquet file jetsink reads: it holds
        // nothing, and what it may hold is written again.
        Err(e) => Err(e.to_string()),
    };
    let why = match read {
        Ok(Some(seqs)) if archive::gives_back(stem, &seqs) => {
            return Ok(Some(Some(Arc::from(seqs))))
        }
        Ok(Some(_)) => "it holds other sequences than its name says".to_string(),
        Ok(None) => "its layout has no stream_sequence column".to_string(),
        Err(e) => e,
    };
    tracing::warn!(path = %path.display(), reason = %why, "cannot tell which messages a Parquet file with an archive name holds; messages delivered again that it may hold are written again");
    Ok(Some(None))
}

/// Why the Parquet files of a directory could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum CountError {
    /// The directory could not be listed.
    #[error("cannot list {}: {source}", dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a Parquet file jetsink can read.
    #[error("{}: {source}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        #[source]
        source: ReadError,
    },
}

/// The distinct idempotency keys of `stream` in the Parquet files of `prefix` in `dir`
/// (what `jetsink bench` checks); `None` when a file's layout has no key or stream column.
pub fn stored_keys(dir: &Path, prefix: &str, stream: &str) -> Result<Option<u64>, CountError> {
    let mut keys = std::collections::HashSet::new();
    let list = |source| CountError::List {
        dir: dir.to_path_buf(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(list)? {
        let path = entry.map_err(list)?.path();
        let ours = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n.strip_prefix(prefix)
                .is_some_and(|r| r.starts_with('-') && r.ends_with(EXTENSION))
        });
        if !ours {
            continue;
        }
        let data = match crate::files::read(&path, crate::files::Kind::Parquet) {
            Ok(data) => data,
            Err(e) => {
                let source = std::io::Error::other(e.to_string());
                return Err(CountError::Read { path, source });
            }
        };
        let counted = match crate::sinks::parquet::read::stream_keys(data.into(), stream, &mut keys)
        {
            Ok(counted) => counted,
            Err(source) => return Err(CountError::Parquet { path, source }),
        };
        if !counted {
            return Ok(None);
        }
    }
    Ok(Some(keys.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_sequences_and_temporary_names_are_recognised() {
        assert_eq!(
            file_name("events", &[5, 6, 7]),
            "events-00000000000000000005-00000000000000000007.parquet"
        );
        assert!(file_name("events", &[5, 7])
            .starts_with("events-00000000000000000005-00000000000000000007-"));
        let temporary = format!(".{}{TEMPORARY}", file_name("events", &[1]));
        assert!(is_temporary("events", &temporary));
        assert!(!is_temporary("events", &file_name("events", &[1])));
        assert!(!is_temporary("other", &temporary));
        assert!(!is_temporary("event", &temporary), "another prefix's files");
        assert!(!is_temporary("events", ".events.lock"));
    }
}
