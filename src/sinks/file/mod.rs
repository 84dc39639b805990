//! File destination: each batch is appended to the current `.jsonl` file of a directory
//! with one write and one fdatasync, and only then reported committed — or, with
//! `format: "parquet"`, written as one whole Parquet file renamed into place
//! ([`columnar`]).
//!
//! The module is split so the decisions can be tested without a disk:
//! - [`record`] (pure) encodes one envelope as one line into a reused buffer;
//! - [`naming`] (pure) makes file names that sort in creation order and parses them back;
//! - `tail` (pure) decides which bytes at the end of a file this writer may cut;
//! - `lock` holds the exclusive lock on the directory and prefix;
//! - `directory` creates the directory at the first open and guards its identity after;
//! - [`columnar`] writes Parquet files (temporary name, sync, rename, directory sync);
//! - `sink` holds [`FileSink`], the only part doing I/O, and the rotation decision, a pure
//!   function of size, creation time and an injected clock.
//!
//! # Format
//!
//! One JSON object per line, keys in the order of the SQLite columns
//! ([`record::FIELDS`]): `idempotency_key`, `stream`, `stream_sequence`,
//! `consumer_sequence`, `subject`, `delivered`, `published_at`, `written_at` (RFC 3339 UTC
//! with nanoseconds), `message_id` (string or null), `headers` (name → list of values),
//! `priority`, `lane`, `classification` (string or null), `labels` (list), `trace_id` (the
//! trace id of a valid W3C `traceparent` header, or null), `payload_encoding` and `payload`. A payload that is valid JSON is embedded as a value
//! (`json`; line breaks between its tokens become spaces), other UTF-8 text is a string
//! (`utf8`, also for an empty payload), anything else is standard padded `base64`.
//!
//! # Files
//!
//! `<directory>/<prefix>-<yyyymmddTHHMMSS.nnnnnnnnnZ>-<counter>.jsonl`, so the newest file
//! is the last name. A new file is started when the current one reaches `rotate_bytes` or
//! is `rotate_interval_ms` old (0 disables either); a batch is never split across files.
//! Creating a file syncs the directory when `fsync` is on.
//!
//! # One writer
//!
//! The first open takes an exclusive lock on `<directory>/.<prefix>.lock` and holds it
//! until the sink is dropped or the process dies. While another process holds it, open
//! fails (transient, naming the holder's pid), so a second `jetsink run` on the same
//! directory and prefix exits 69 at start-up before fetching anything, and the service
//! manager starts it again later. Two writers would otherwise cut each other's batches as
//! torn lines.
//!
//! # Recovery
//!
//! `open` creates the directory only the first time; afterwards a missing directory (an
//! unmounted volume), a path that is no longer a directory, or another directory at the
//! same path is a transient error, never a reason to write somewhere new. The first open,
//! under the lock, continues the newest file, first cutting a torn last line a crash left
//! (logged with the number of bytes cut, never their content). Later opens cut only this
//! writer's own failed bytes: a newest file that is not the one it wrote, or not at a
//! length it left it at, is left alone and a new file started. Before each write the
//! current file must still be the one opened
//! ([`FileIdentity`](crate::sinks::util::file_identity::FileIdentity)) and at the length
//! this writer left it (else the batch goes to a new file); after the fdatasync the path
//! must still name the open file, or the batch fails (transient) and is written again to a
//! new file: a deleted or moved file would swallow it. A failed write or sync cuts the file
//! back to its length before the batch, only if everything past that length can be the
//! batch, and drops the handle, so the next attempt reopens.
//!
//! # Delivery guarantee
//!
//! JSON Lines: at least once. A crash between the fdatasync and the ACK, or a redelivery
//! for any other reason, writes the same message again: a line can appear twice. Readers
//! deduplicate on `idempotency_key`. Parquet: a message delivered again that a file of the
//! directory holds is reported already stored and not written again ([`columnar`]), so
//! each message is in one file. With `fsync` off, a crash of the operating system can lose
//! batches that were already ACKed.

mod append;
pub mod columnar;
pub mod config;
mod count;
mod directory;
mod held;
mod lock;
pub mod naming;
pub mod record;
mod rotation;
mod sink;
mod tail;
mod write;

pub use config::FileConfig;
pub use lock::is_lock_busy;
pub use sink::{Clock, FileSink};

#[cfg(test)]
mod tests;
