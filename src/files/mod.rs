//! The one way jetsink reads a file or a response, and the one way it writes a file it
//! owns. Every read has a stated bound; every write goes through a temporary file that
//! jetsink created itself and that no link can redirect.
//!
//! - [`read`](mod@read): a file an operator names (the config, keys, tokens, TLS material,
//!   a payload, a snapshot, `decrypt`'s input), or a stream (stdin), each with the bound
//!   of its [`Kind`]; only a regular file is opened at all.
//! - [`body`]: an HTTP response's body, read up to a bound and then refused or cut.
//! - [`write`](mod@write): a file jetsink owns (the metrics snapshot, a Parquet file, a
//!   key from `keygen`): created new (`O_CREAT|O_EXCL|O_NOFOLLOW`) at a temporary name in
//!   the target's directory, synced, renamed over the target (or linked to a name that
//!   must not exist yet), the directory synced. A link planted at the temporary name is
//!   removed, never followed; a device, FIFO, socket or directory at the target is never
//!   replaced. The two files that must be written in place (a lock file, a child's log)
//!   are opened by [`open_in_place`], never through a link, only if regular.
//!
//! A leaf: nothing else of the crate is imported, so every module may use it.

pub mod body;
pub mod read;
pub mod write;

pub use read::{
    open_regular, read, read_line, read_stream, read_text, what, FileError, Kind, Line, Size,
};
pub use write::{create_new, open_in_place, replace, Staged, WriteError};
