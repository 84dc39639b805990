//! The directory a file destination writes into: created the first time the sink opens
//! it, and afterwards required to be the same directory (device and inode), so an
//! unmounted volume's empty mount point is never written to. Shared by the JSON Lines
//! files and the Parquet files.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::sinks::contract::SinkError;
use crate::sinks::util::file_identity::FileIdentity;
use crate::sinks::util::{io_error, open_io_error};

/// A destination's directory and what the first open found there.
pub(crate) struct Directory {
    path: PathBuf,
    /// Sync the parent after creating the directory.
    fsync: bool,
    /// The directory was prepared once; later opens must find it, never create it.
    prepared: bool,
    /// The directory as first opened: a different one at the same path (an unmounted
    /// volume's empty mount point) is refused rather than written to.
    identity: Option<FileIdentity>,
}

impl Directory {
    /// The directory at `path`; nothing is touched yet.
    pub(crate) fn new(path: PathBuf, fsync: bool) -> Directory {
        Directory {
            path,
            fsync,
            prepared: false,
            identity: None,
        }
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The first time, creates the directory; later, requires it to be the same one.
    pub(crate) fn prepare(&mut self) -> Result<(), SinkError> {
        let dir = &self.path;
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
                            open_io_error(&format!("cannot create directory {}", dir.display()), &e)
                        }
                    })?;
                    if self.fsync {
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
                    return Err(open_io_error(
                        &format!("cannot access directory {}", dir.display()),
                        &e,
                    ))
                }
            }
            let identity = FileIdentity::of(dir)
                .map_err(|e| io_error(&format!("cannot stat {}", dir.display()), &e))?;
            self.identity = Some(identity);
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
        self.check()
    }

    /// Fails if the path now names another directory than the one first opened.
    pub(crate) fn check(&self) -> Result<(), SinkError> {
        match &self.identity {
            Some(identity) => identity.check().map_err(|m| {
                SinkError::transient(format!(
                    "directory is not the one opened at start-up ({m}); restart to accept a \
                     new one"
                ))
            }),
            None => Ok(()),
        }
    }
}

/// Makes the directory's entries durable (a created or renamed file's name).
pub(crate) fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(&format!("cannot sync directory {}", dir.display()), &e))
}
