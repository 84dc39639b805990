//! The one way jetsink reads a file an operator names: the config, key files, tokens,
//! passwords, NATS credentials, TLS material, a payload file, a metrics snapshot,
//! `decrypt`'s records. Each read has a size bound suited to its [`Kind`], and only a
//! regular file is read at all; a stream (stdin) is read through the same bound
//! ([`read_stream`]), and a file too large to hold at once line by line, each line bounded
//! ([`open_regular`], [`read_line`]).
//!
//! A path is operator input and a mistake in it must not cost the process: `/dev/zero`
//! read to its end fills memory until the kernel kills the daemon, a FIFO blocks start-up
//! forever, `/dev/tty` waits for a keystroke. So the file is opened without blocking
//! (`O_NONBLOCK`, which a regular file ignores), refused unless `fstat` says it is a
//! regular file, refused when it is larger than its bound, and read through a
//! `take(bound + 1)` in case it grows while being read. Symbolic links are followed, as an
//! operator expects. Errors name the path and what is wrong, never the content.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a file holds, and so how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The JSON config file: 4 MiB, far beyond 64 sinks with every option written out.
    Config,
    /// An AES-256 key file (44 characters of base64): 4 KiB.
    Key,
    /// A token, a password, an NKEY seed, an S3 key, a secret header value: 64 KiB.
    Secret,
    /// A NATS `.creds` file (a JWT and a seed): 64 KiB.
    Credentials,
    /// PEM certificates (a CA bundle, a certificate chain): 4 MiB, ten times the system
    /// bundle.
    Certificates,
    /// A PEM private key: 64 KiB.
    PrivateKey,
    /// A message payload (`jetsink submit --payload-file`): 64 MiB, NATS' own hard limit.
    Payload,
    /// A metrics snapshot file (`jetsink metrics show FILE`), or a `/metrics` answer: 16
    /// MiB, far beyond 64 sinks' metrics as pretty JSON.
    Metrics,
    /// `jetsink decrypt`'s records: one JSON document, or one line of JSON Lines (a JSON
    /// Lines input is read line by line, so only a line is bounded): 256 MiB, a 64 MiB
    /// payload as base64 or escaped JSON text with room to spare.
    Records,
    /// A Parquet file given to `jetsink decrypt` (read whole: its footer is at the end):
    /// 1 GiB.
    Parquet,
    /// A file of `/proc` (a process's `stat`, the socket tables): 16 MiB.
    Proc,
    /// The seal of a JSON Lines file (the stream sequences it holds, as runs): 64 MiB,
    /// beyond any file's lines each a run of their own.
    Seal,
}

impl Kind {
    /// The largest file of this kind that is read, in bytes.
    pub const fn limit(self) -> u64 {
        match self {
            Kind::Config | Kind::Certificates => 4 << 20,
            Kind::Key => 4 << 10,
            Kind::Secret | Kind::Credentials | Kind::PrivateKey => 64 << 10,
            Kind::Payload | Kind::Seal => 64 << 20,
            Kind::Metrics | Kind::Proc => 16 << 20,
            Kind::Records => 256 << 20,
            Kind::Parquet => 1 << 30,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Config => "config file",
            Kind::Key => "key file",
            Kind::Secret => "secret file",
            Kind::Credentials => "credentials file",
            Kind::Certificates => "certificate file",
            Kind::PrivateKey => "private key file",
            Kind::Payload => "payload",
            Kind::Metrics => "metrics snapshot file",
            Kind::Seal => "JSON Lines seal",
            Kind::Records => "record input",
            Kind::Parquet => "Parquet input",
            Kind::Proc => "/proc file",
        }
    }
}

/// Why a file was not read. Every variant names the path; none quotes the content.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The operating system refused to open or read it.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The reason.
        source: std::io::Error,
    },
    /// A directory, a device, a FIFO or a socket.
    #[error("{} is {what}, not a regular file", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// Larger than its kind's bound.
    #[error("{} is larger than {}, the most a {} may hold", .path.display(), Size(*.limit), .kind.name())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        limit: u64,
        /// What it was read as.
        kind: Kind,
    },
    /// Read as text, but not UTF-8.
    #[error("{} is not UTF-8 text", .path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

/// A byte count as an operator reads it: `4 KiB`, `64 MiB`, `1 GiB`, or bytes.
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            n if n >= 1 << 30 && n % (1 << 30) == 0 => write!(f, "{} GiB", n >> 30),
            n if n >= 1 << 20 && n % (1 << 20) == 0 => write!(f, "{} MiB", n >> 20),
            n if n >= 1 << 10 && n % (1 << 10) == 0 => write!(f, "{} KiB", n >> 10),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// What a file that is not a regular file is, for a message: `a FIFO`, `a directory`.
pub fn what(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Opens `path` without blocking and checks that it is a regular file no larger than
/// `limit`.
fn open(path: &Path, limit: u64, kind: Kind) -> Result<(File, u64), FileError> {
    let io = |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what: what(meta.file_type()),
        });
    }
    if meta.len() > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            limit,
            kind,
        });
    }
    Ok((file, meta.len()))
}

/// The bytes of the regular file at `path`, at most `kind`'s bound.
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, FileError> {
    read_limited(path, kind, kind.limit())
}

fn read_limited(path: &Path, kind: Kind, limit: u64) -> Result<Vec<u8>, FileError> {
    let (file, len) = open(path, limit, kind)?;
    // The size fstat reported, so a growing file is read once and refused, not copied.
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            limit,
            kind,
        });
    }
    Ok(out)
}

/// The regular file at `path`, opened without blocking, for a caller that reads it in
/// bounded pieces ([`read_line`]); no bound on the whole file.
pub fn open_regular(path: &Path, kind: Kind) -> Result<File, FileError> {
    open(path, u64::MAX, kind).map(|(file, _)| file)
}

/// Appends to `buf` what `reader` gives, up to and including `stop` (to the end without
/// it), but never more than `max` bytes in all: a longer input is left unread there.
/// `buf` grows at most to `max`, never doubling past it, so a bound of 256 MiB costs at
/// most 256 MiB, not the 512 MiB a `Vec` doubling at 256 MiB and one byte would ask for.
/// Whether anything was read.
fn fill(
    reader: &mut (impl BufRead + ?Sized),
    buf: &mut Vec<u8>,
    max: usize,
    stop: Option<u8>,
) -> std::io::Result<bool> {
    let mut read_any = false;
    while buf.len() < max {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            break;
        }
        read_any = true;
        let (len, ends) = match stop.and_then(|b| chunk.iter().position(|&c| c == b)) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let n = len.min(max - buf.len());
        if buf.capacity() - buf.len() < n {
            let target = (buf.capacity().max(8 << 10) * 2)
                .max(buf.len() + n)
                .min(max);
            buf.reserve_exact(target - buf.len());
        }
        buf.extend_from_slice(&chunk[..n]);
        reader.consume(n);
        if ends && n == len {
            break;
        }
    }
    Ok(read_any)
}

/// The most bytes a read of `kind` holds: its bound and one more, to tell "exactly the
/// bound" from "over it".
fn hold(kind: Kind) -> usize {
    usize::try_from(kind.limit().saturating_add(1)).unwrap_or(usize::MAX)
}

/// Everything `reader` gives (stdin, a pipe), at most `kind`'s bound; `name` says what it
/// is in an error (`stdin`).
pub fn read_stream(reader: impl Read, kind: Kind, name: &str) -> Result<Vec<u8>, FileError> {
    let limit = kind.limit();
    let mut out = Vec::new();
    fill(&mut BufReader::new(reader), &mut out, hold(kind), None).map_err(|source| {
        FileError::Io {
            path: PathBuf::from(name),
            source,
        }
    })?;
    if out.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: PathBuf::from(name),
            limit,
            kind,
        });
    }
    Ok(out)
}

/// One line read by [`read_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line (with its line break, when it had one) is in the buffer.
    Read,
    /// The input ended: nothing was read.
    End,
}

/// Reads the next line of `reader` into `buf` (cleared first), at most `kind`'s bound:
/// a longer line is refused without being held whole. `name` says where in an error.
pub fn read_line(
    reader: &mut (impl BufRead + ?Sized),
    buf: &mut Vec<u8>,
    kind: Kind,
    name: &str,
) -> Result<Line, FileError> {
    let limit = kind.limit();
    buf.clear();
    let read_any = fill(reader, buf, hold(kind), Some(b'\n')).map_err(|source| FileError::Io {
        path: PathBuf::from(name),
        source,
    })?;
    let content = buf.strip_suffix(b"\n").unwrap_or(buf);
    if content.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: PathBuf::from(name),
            limit,
            kind,
        });
    }
    Ok(if read_any { Line::Read } else { Line::End })
}

/// The text of the regular file at `path`, at most `kind`'s bound, checked to be UTF-8.
pub fn read_text(path: &Path, kind: Kind) -> Result<String, FileError> {
    String::from_utf8(read(path, kind)?).map_err(|_| FileError::NotText {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_its_bound_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        assert_eq!(read(&p, Kind::Secret).unwrap(), b"abc\n");
        assert_eq!(read_text(&p, Kind::Secret).unwrap(), "abc\n");
        std::fs::write(&p, vec![b'k'; 4096]).unwrap();
        assert_eq!(
            read(&p, Kind::Key).unwrap().len(),
            4096,
            "exactly the bound"
        );
    }

    #[test]
    fn a_file_over_its_bound_is_refused_naming_the_path_and_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.key");
        std::fs::write(&p, vec![b'k'; 4097]).unwrap();
        let e = read(&p, Kind::Key).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "{} is larger than 4 KiB, the most a key file may hold",
                p.display()
            )
        );
    }

    #[test]
    fn a_file_that_grows_past_its_bound_while_read_is_refused() {
        // fstat said small; the bytes read say otherwise (a /proc file reports 0 bytes).
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("grows");
        std::fs::write(&p, vec![b'x'; 100]).unwrap();
        let e = read_limited(&p, Kind::Secret, 100).map(|v| v.len());
        assert_eq!(e.unwrap(), 100);
        assert!(matches!(
            read_limited(&p, Kind::Secret, 99),
            Err(FileError::TooLarge { limit: 99, .. })
        ));
        let status = read(Path::new("/proc/self/status"), Kind::Config).unwrap();
        assert!(
            !status.is_empty(),
            "a /proc file of size 0 is read to its end"
        );
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking_or_reading() {
        let dir = tempfile::tempdir().unwrap();
        for (path, kind) in [
            ("/dev/zero", "a character device"),
            ("/dev/null", "a character device"),
        ] {
            let e = read(Path::new(path), Kind::Config).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("{path} is {kind}, not a regular file")
            );
        }
        let e = read(dir.path(), Kind::Secret).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a directory, not a regular file"),
            "{e}"
        );
        // A FIFO nobody writes to: a blocking open would wait for a writer forever.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let e = read(&fifo, Kind::Secret).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_file_and_non_text_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(&dir.path().join("none"), Kind::Secret).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");
        let p = dir.path().join("bin");
        std::fs::write(&p, b"\xff\xfe").unwrap();
        assert_eq!(
            read_text(&p, Kind::Secret).unwrap_err().to_string(),
            format!("{} is not UTF-8 text", p.display())
        );
    }

    #[test]
    fn a_stream_is_read_to_its_bound_and_no_further() {
        let small = read_stream(&b"abc"[..], Kind::Key, "stdin").unwrap();
        assert_eq!(small, b"abc");
        // An endless stream: the bound ends it, having held at most the bound and a byte.
        let e = read_stream(std::io::repeat(b'0'), Kind::Key, "stdin").unwrap_err();
        assert_eq!(
            e.to_string(),
            "stdin is larger than 4 KiB, the most a key file may hold"
        );
    }

    #[test]
    fn lines_are_read_one_at_a_time_and_a_line_over_the_bound_is_refused() {
        let mut input = std::io::Cursor::new(b"{\"a\":1}\nlast".to_vec());
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut input, &mut buf, Kind::Key, "in").unwrap(),
            Line::Read
        );
        assert_eq!(buf, b"{\"a\":1}\n");
        assert_eq!(
            read_line(&mut input, &mut buf, Kind::Key, "in").unwrap(),
            Line::Read
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line(&mut input, &mut buf, Kind::Key, "in").unwrap(),
            Line::End
        );
        // Exactly the bound, with its line break, is a line; one byte more is not.
        let mut exact = vec![b'k'; 4096];
        exact.push(b'\n');
        let mut input = std::io::Cursor::new(exact);
        assert_eq!(
            read_line(&mut input, &mut buf, Kind::Key, "in").unwrap(),
            Line::Read
        );
        let mut endless = std::io::BufReader::new(std::io::repeat(b'0'));
        let e = read_line(&mut endless, &mut buf, Kind::Key, "in").unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
        assert!(buf.len() <= 4097, "held {} bytes", buf.len());
    }

    #[test]
    fn a_read_never_holds_more_than_its_bound_and_a_byte() {
        let mut buf = Vec::new();
        let mut endless = std::io::BufReader::new(std::io::repeat(b'0'));
        let _ = read_line(&mut endless, &mut buf, Kind::Key, "in");
        assert!(buf.capacity() <= 4097, "capacity {}", buf.capacity());
        let mut two = std::io::Cursor::new(b"ab\ncd\n".to_vec());
        read_line(&mut two, &mut buf, Kind::Key, "in").unwrap();
        assert_eq!(buf, b"ab\n", "only the first line is taken");
        read_line(&mut two, &mut buf, Kind::Key, "in").unwrap();
        assert_eq!(buf, b"cd\n");
    }

    #[test]
    fn open_regular_refuses_what_read_refuses_but_not_size() {
        assert!(matches!(
            open_regular(Path::new("/dev/zero"), Kind::Records),
            Err(FileError::NotRegular { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'x'; 5000]).unwrap();
        assert!(open_regular(&p, Kind::Key).is_ok());
        assert_eq!(Size(1 << 30).to_string(), "1 GiB");
    }
}
