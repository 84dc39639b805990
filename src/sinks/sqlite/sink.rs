//! The SQLite destination's I/O: connection lifecycle, one transaction per batch (written by
//! `insert`), and the guards that keep a commit from landing anywhere but the configured
//! database file.
//!
//! SQLite calls block, so the sink is a [`BlockingSink`] and every call runs inside
//! [`tokio::task::block_in_place`]. After a transient failure the connection is dropped and
//! the next call reopens it, so a retry never inherits a half-finished transaction or a
//! handle to a file that is gone. Reopening never creates anything: once a database has
//! been opened, its disappearance is an error until it is restored (or jetsink restarts),
//! not a reason to start an empty one.

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::classify::classify;
use super::config::SqliteConfig;
use super::insert::{insert_batch, Scratch};
use super::schema;
use crate::envelope::Envelope;
use crate::sinks::blocking::BlockingSink;
use crate::sinks::contract::{Located, Probe, SinkError, Wanted};
use crate::sinks::util::file_identity::FileIdentity;
use crate::sinks::util::{io_error, open_io_error, probe_directory};

/// Refuses a path that exists and is not a regular file, naming what it is: a directory
/// cannot be a database, a FIFO would block the open, a device would take the writes and
/// leave a `-journal` beside it. Misconfigured (exit 78 at start-up), as `validate` says.
fn not_a_database(path: &std::path::Path, path_text: &str) -> Result<(), SinkError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(SinkError::Misconfigured {
            message: format!(
                "sqlite path {path_text} is {}, not a database file",
                crate::files::what(m.file_type())
            ),
        }),
        _ => Ok(()),
    }
}

/// Writes envelopes as rows of one SQLite table, a transaction per batch, idempotent on
/// [`Envelope::idempotency_key`].
pub struct SqliteSink {
    config: SqliteConfig,
    path: PathBuf,
    scratch: Scratch,
    conn: Option<Connection>,
    /// The database file as last opened.
    identity: Option<FileIdentity>,
    /// The `-wal` file as last opened: in WAL mode commits land there first.
    wal_identity: Option<FileIdentity>,
    /// Whether an open has ever succeeded: from then on nothing is created.
    opened_once: bool,
}

impl SqliteSink {
    /// A sink for `config`. Does no I/O; [`Sink::open`](crate::sinks::contract::Sink::open)
    /// connects.
    pub fn new(config: SqliteConfig) -> SqliteSink {
        SqliteSink {
            path: PathBuf::from(&config.path),
            scratch: Scratch::default(),
            config,
            conn: None,
            identity: None,
            wal_identity: None,
            opened_once: false,
        }
    }

    fn wal_path(&self) -> PathBuf {
        let mut p = OsString::from(self.path.as_os_str());
        p.push("-wal");
        PathBuf::from(p)
    }

    /// Fails unless the database (and WAL) files at the path are the ones opened.
    fn check_identity(&self) -> Result<(), SinkError> {
        let check = |id: &Option<FileIdentity>| id.as_ref().map_or(Ok(()), FileIdentity::check);
        check(&self.identity)
            .and_then(|()| check(&self.wal_identity))
            .map_err(|m| {
                SinkError::transient(format!(
                    "sqlite database changed underneath jetsink, not writing: {m}"
                ))
            })
    }

    /// Drops the connection after a transient or unclassified failure, or when a failure left a
    /// transaction open, so the next call starts from a clean reopen.
    fn after(&mut self, result: Result<(), SinkError>) -> Result<(), SinkError> {
        if let Err(e) = &result {
            let in_tx = self.conn.as_ref().is_some_and(|c| !c.is_autocommit());
            if matches!(
                e,
                SinkError::Transient { .. } | SinkError::Unclassified { .. }
            ) || in_tx
            {
                self.conn = None;
            }
        }
        result
    }
}

/// Sets the pragmas jetsink relies on.
pub(super) fn configure(conn: &Connection, config: &SqliteConfig) -> Result<(), SinkError> {
    // rusqlite panics on a timeout above i32::MAX milliseconds.
    let ms = config.busy_timeout_ms.min(i32::MAX as u64);
    conn.busy_timeout(Duration::from_millis(ms))
        .map_err(|e| classify(&e, None))?;
    // Only a database with no page yet takes a page size; it must precede the switch to
    // WAL, which writes the first page.
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .map_err(|e| classify(&e, None))?;
    if pages == 0 {
        conn.execute_batch(&format!("PRAGMA page_size={}", config.page_size))
            .map_err(|e| classify(&e, None))?;
    }
    let mode = journal_mode_wal(conn, Duration::from_millis(ms)).map_err(|e| classify(&e, None))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SinkError::transient(format!(
            "sqlite refused journal_mode=WAL (still {mode}); the filesystem may not support \
             shared memory, or another process holds the database in another mode"
        )));
    }
    // Each multi-row INSERT of a batch's transaction keeps a statement journal (the pages it
    // changes, to undo it alone); kept on file, a 32 KiB page spilled it to a temporary file
    // after two pages, and the kernel's copies into it were about 5 % of jetsink's CPU in a
    // SQLite drain. In memory it holds the few pages one statement changes.
    conn.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA temp_store=MEMORY",
        config.synchronous.pragma()
    ))
    .map_err(|e| classify(&e, None))
}

/// Switches the database to WAL. Connections that switch one database at the same moment
/// (instances starting together on a file in rollback mode) can each hold the shared lock
/// the other needs for the switch; SQLite then answers `SQLITE_BUSY` at once, without the
/// busy handler (its deadlock avoidance), and the one that lost would fail its start. The
/// switch is asked again, every 10 ms, until `within` (the busy timeout) has passed.
fn journal_mode_wal(conn: &Connection, within: Duration) -> rusqlite::Result<String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

impl BlockingSink for SqliteSink {
    fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    fn open_blocking(&mut self) -> Result<(), SinkError> {
        // Close any previous connection before looking at the file.
        self.conn = None;
        let path_text = self.path.display().to_string();
        if !self.opened_once {
            if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    open_io_error(
                        &format!("creating directory {} for sqlite", parent.display()),
                        &e,
                    )
                })?;
            }
        } else {
            match self.path.try_exists() {
                Ok(true) => {}
                Ok(false) => {
                    return Err(SinkError::transient(format!(
                        "sqlite database file {path_text} disappeared after it was opened; \
                         restore it, or restart jetsink to start a new database"
                    )))
                }
                Err(e) => return Err(io_error(&format!("checking {path_text}"), &e)),
            }
        }
        not_a_database(&self.path, &path_text)?;

        let conn = if self.opened_once {
            // Never create: the existence check above could race with a removal.
            let flags = OpenFlags::default().difference(OpenFlags::SQLITE_OPEN_CREATE);
            Connection::open_with_flags(&self.path, flags)
        } else {
            Connection::open(&self.path)
        }
        .map_err(|e| classify(&e, None).with_context(&format!("opening {path_text}")))?;
        configure(&conn, &self.config)
            .map_err(|e| e.with_context(&format!("configuring {path_text}")))?;
        schema::ensure_table(&conn, &self.config.table, &path_text)?;

        let identity =
            FileIdentity::of(&self.path).map_err(|e| io_error(&format!("stat {path_text}"), &e))?;
        if let Some(previous) = &self.identity {
            if *previous != identity {
                tracing::warn!(
                    path = %path_text,
                    "sqlite database file was replaced since it was last opened; writing to \
                     the file now at this path"
                );
            }
        }
        // The WAL exists once the connection has read in WAL mode; if it does not, there is
        // nothing to guard yet.
        self.wal_identity = FileIdentity::of(&self.wal_path()).ok();
        self.identity = Some(identity);
        self.conn = Some(conn);
        self.opened_once = true;
        tracing::info!(
            path = %path_text,
            table = %self.config.table,
            synchronous = self.config.synchronous.pragma(),
            "sqlite destination open"
        );
        Ok(())
    }

    /// Distinct keys of `stream` in the table, through the sink's own connection.
    fn stored_keys_blocking(&mut self, stream: &str) -> Result<Option<u64>, SinkError> {
        if self.conn.is_none() {
            self.open_blocking()?;
        }
        let Some(conn) = self.conn.as_ref() else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT COUNT(DISTINCT idempotency_key) FROM {} WHERE stream = ?1",
            schema::quote_ident(&self.config.table)
        );
        conn.query_row(&sql, [stream], |r| r.get::<_, i64>(0))
            .map(|n| Some(n.max(0) as u64))
            .map_err(|e| classify(&e, None).with_context("counting the stored keys"))
    }

    fn drop_table_blocking(&mut self) -> Result<(), SinkError> {
        if self.conn.is_none() {
            self.open_blocking()?;
        }
        let Some(conn) = self.conn.as_ref() else {
            return Ok(());
        };
        let sql = format!(
            "DROP TABLE IF EXISTS {}",
            schema::quote_ident(&self.config.table)
        );
        conn.execute_batch(&sql)
            .map_err(|e| classify(&e, None).with_context("dropping the table"))
    }

    /// The row of one message, through a read-only connection of its own.
    fn locate_blocking(&mut self, stream: &str, wanted: Wanted<'_>) -> Result<Located, SinkError> {
        super::locate::locate(&self.path, &self.config.table, stream, wanted)
    }

    /// The file's directory, the file (writable, never created here), and the table, read
    /// through a read-only connection.
    fn probe_blocking(&mut self) -> Result<Probe, SinkError> {
        let path_text = self.path.display().to_string();
        let table = &self.config.table;
        not_a_database(&self.path, &path_text)?;
        let exists = self
            .path
            .try_exists()
            .map_err(|e| io_error(&format!("checking {path_text}"), &e))?;
        if !exists {
            let parent = self
                .path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let dir = match probe_directory(parent)? {
                Probe::Ready(_) => String::new(),
                Probe::WouldCreate(d) => format!("{d}, "),
            };
            return Ok(Probe::WouldCreate(format!(
                "{dir}sqlite database {path_text} with table {table}"
            )));
        }
        // Opening for writing without create or truncate changes nothing, and proves the
        // file is writable.
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.path)
            .map_err(|e| io_error(&format!("opening {path_text} for writing"), &e))?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)
            .map_err(|e| classify(&e, None).with_context(&format!("opening {path_text}")))?;
        Ok(match schema::probe_table(&conn, table, &path_text)? {
            None => Probe::Ready(format!(
                "sqlite database {path_text} is writable and table {table} fits"
            )),
            Some(what) => Probe::WouldCreate(what),
        })
    }

    fn write_blocking(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        let result = self.check_identity().and_then(|()| {
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| SinkError::transient("sqlite connection is not open"))?;
            insert_batch(conn, &self.config.table, batch, &mut self.scratch)
        });
        // A commit into a file unlinked meanwhile is no commit: check again before the
        // runner ACKs. A retry of a batch that did land is absorbed by ON CONFLICT.
        let result = result.and_then(|()| self.check_identity());
        let result =
            result.map_err(|e| e.with_context(&format!("writing to {}", self.path.display())));
        if result.is_ok() && self.wal_identity.is_none() {
            // The first commit created the WAL: guard it from now on.
            self.wal_identity = FileIdentity::of(&self.wal_path()).ok();
        }
        self.after(result)
    }

    fn health_blocking(&mut self) -> Result<(), SinkError> {
        let result = self.check_identity().and_then(|()| {
            let conn = self
                .conn
                .as_ref()
                .ok_or_else(|| SinkError::transient("sqlite connection is not open"))?;
            conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                .map(drop)
                .map_err(|e| classify(&e, None))
        });
        let result =
            result.map_err(|e| e.with_context(&format!("checking {}", self.path.display())));
        self.after(result)
    }
}

impl std::fmt::Debug for SqliteSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSink")
            .field("path", &self.path)
            .field("table", &self.config.table)
            .field("open", &self.conn.is_some())
            .finish()
    }
}
