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
//! same messages again after a crash or a failed rename replaces the same file instead of
//! adding rows. A crash before the rename leaves only a temporary file, which the next
//! start removes (it holds the directory lock, so no other writer owns it).

use std::fs::{self, File, OpenOptions};
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
use crate::sinks::s3::key::object_name;
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
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// Prepares the directory, takes its lock (the first time) and removes the temporary
    /// files a crash left behind.
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
        for entry in fs::read_dir(dir).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| is_temporary(&self.prefix, n)) {
                let path = entry.path();
                fs::remove_file(&path)
                    .map_err(|e| io_error(&format!("cannot remove {}", path.display()), &e))?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::warn!(directory = %dir.display(), removed, "removed temporary Parquet files an interrupted write left");
            if self.fsync {
                sync_dir(dir)?;
            }
        }
        self.open = true;
        Ok(())
    }

    /// Writes `batch` as one file, durable under its final name before it returns `Ok`.
    pub(crate) fn write(&mut self, batch: &[Envelope], now: SystemTime) -> Result<(), SinkError> {
        let options = self.options.clone().map_err(|e| SinkError::Misconfigured {
            message: e.to_string(),
        })?;
        self.dir.check()?;
        let mut members: Vec<usize> = (0..batch.len()).collect();
        members.sort_by_key(|&i| batch[i].stream_sequence);
        let seqs: Vec<u64> = members.iter().map(|&i| batch[i].stream_sequence).collect();
        let name = file_name(&self.prefix, &seqs);
        let path = self.dir.path().join(&name);
        let temporary = self.dir.path().join(format!(".{name}{TEMPORARY}"));
        let result = self.commit(batch, &members, options, now, &temporary, &path);
        if result.is_err() {
            // Best effort: the next start removes what is left.
            let _ = fs::remove_file(&temporary);
            if !matches!(result, Err(SinkError::Permanent { .. })) {
                self.open = false;
            }
        }
        result
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
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(temporary)
            .map_err(|e| io_error(&format!("cannot create {shown}"), &e))?;
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
        if self.fsync {
            file.sync_data()
                .map_err(|e| io_error(&format!("cannot sync {shown}"), &e))?;
        }
        drop(file);
        fs::rename(temporary, path)
            .map_err(|e| io_error(&format!("cannot rename {shown} to {}", path.display()), &e))?;
        if self.fsync {
            sync_dir(self.dir.path())?;
        }
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
        let data = match fs::read(&path) {
            Ok(data) => data,
            Err(source) => return Err(CountError::Read { path, source }),
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
