//! The contract every destination implements: the [`Sink`] trait, what a write comes to
//! ([`Written`], [`Outcome`]), the error classes that decide what redelivery means
//! ([`SinkError`], [`ErrorClass`]), and what the runner tells a destination ([`Feed`],
//! [`CutShort`]). Destinations import it from here, never from the registry that lists
//! them, so no destination leads back to the list.

use async_trait::async_trait;

use crate::envelope::Envelope;

/// Why a write or open failed, classified so the runner knows what redelivery means.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The destination is unavailable or busy (I/O error, lock, disk full, timeout, 5xx).
    /// Nothing of the batch is committed; the runner keeps the batch, backs off and
    /// retries it, and stops fetching meanwhile.
    #[error("transient: {message}")]
    Transient {
        /// What failed, without payload contents or secrets.
        message: String,
    },
    /// The destination refuses specific content (constraint violation, a value it cannot
    /// store). Nothing of the batch is committed. `index`, when known, is the position in
    /// the batch of a message that caused it; the runner isolates the culprits by retrying
    /// smaller parts of the batch.
    #[error("permanent: {message}")]
    Permanent {
        /// Position of an offending message in the batch, if the destination can tell.
        index: Option<usize>,
        /// What was refused, without payload contents or secrets.
        message: String,
    },
    /// The destination failed with an error nobody recognised (an unknown SQLSTATE or
    /// server error number): it may be an outage or this batch's content. The runner holds
    /// and retries it like a transient error, but only for `delivery.retry.max_held_ms`,
    /// because an unbounded hold lets one bad message stall the sink forever; after that
    /// it splits the batch and dead-letters a message that still fails alone. Known
    /// outages stay [`SinkError::Transient`], which is never bounded.
    #[error("unclassified: {message}")]
    Unclassified {
        /// What failed (the error code; never the server's text, which may quote data).
        message: String,
    },
    /// The destination is set up in a way retrying cannot fix (a table with an
    /// incompatible schema, a path that is not a directory). Fails start-up with exit 78.
    #[error("misconfigured: {message}")]
    Misconfigured {
        /// What is wrong and where.
        message: String,
    },
}

impl SinkError {
    /// A transient error with a message.
    pub fn transient(message: impl Into<String>) -> SinkError {
        SinkError::Transient {
            message: message.into(),
        }
    }

    /// An unclassified error with a message.
    pub fn unclassified(message: impl Into<String>) -> SinkError {
        SinkError::Unclassified {
            message: message.into(),
        }
    }

    /// Prefixes the message with where the error happened (a table, a file, a server),
    /// keeping its class and index: the runner decides on the class, the operator reads
    /// the place.
    pub fn with_context(self, context: &str) -> SinkError {
        match self {
            SinkError::Transient { message } => SinkError::Transient {
                message: format!("{context}: {message}"),
            },
            SinkError::Permanent { index, message } => SinkError::Permanent {
                index,
                message: format!("{context}: {message}"),
            },
            SinkError::Unclassified { message } => SinkError::Unclassified {
                message: format!("{context}: {message}"),
            },
            SinkError::Misconfigured { message } => SinkError::Misconfigured {
                message: format!("{context}: {message}"),
            },
        }
    }

    /// This error's class.
    pub fn kind(&self) -> ErrorClass {
        match self {
            SinkError::Transient { .. } => ErrorClass::Transient,
            SinkError::Permanent { .. } => ErrorClass::Permanent,
            SinkError::Unclassified { .. } => ErrorClass::Unclassified,
            SinkError::Misconfigured { .. } => ErrorClass::Misconfigured,
        }
    }

    /// The metric label of this error's class.
    pub fn class(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// The class of a destination's failure, as counted in `jetsink_sink_errors_total{class}`:
/// what redelivery means for the messages it concerns (see [`SinkError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Unavailable or busy: held and retried.
    Transient,
    /// This content is refused.
    Permanent,
    /// Nobody recognised the error: held for a bound, then refused.
    Unclassified,
    /// Set up wrong: held (and exit 78 at start-up).
    Misconfigured,
}

impl ErrorClass {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Unclassified => "unclassified",
            ErrorClass::Misconfigured => "misconfigured",
        }
    }
}

/// Who feeds a destination, for the destinations whose checks or output depend on it
/// (the republish destination refuses a target its own source stream would read back,
/// and may name the sink in its subjects). Empty fields when a tool drives the sink
/// outside `jetsink run`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feed {
    /// The sink's configured name.
    pub sink: String,
    /// The stream the sink reads.
    pub stream: String,
}

/// What a worker produced for a committed message (`exec`: its standard output).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The text, already cut to the destination's own bound (lossy UTF-8).
    pub text: String,
    /// Whether the destination cut it.
    pub truncated: bool,
}

/// What a write came to: one result for the whole batch, which is what most destinations
/// give (a transaction, a file sync, one request), or one [`Outcome`] per message, from a
/// destination that works message by message (the `exec` worker) or that found some of
/// the batch already stored ([`Written::committed`]). The runner settles both in one
/// loop: a batch result is every message's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The whole batch committed, or none of it may be considered written.
    Batch(Result<(), SinkError>),
    /// One outcome per message of the batch, in order.
    Each(Vec<Outcome>),
}

impl Written {
    /// A batch of `len` messages committed whole, the positions in `already` being
    /// messages the destination held before this write and did not write again
    /// ([`Outcome::AlreadyStored`]). With none, the plain [`Written::Batch`] answer.
    pub fn committed(len: usize, already: &[usize]) -> Written {
        if already.is_empty() {
            return Written::Batch(Ok(()));
        }
        let mut outcomes = vec![Outcome::Committed { output: None }; len];
        for &i in already {
            if let Some(o) = outcomes.get_mut(i) {
                *o = Outcome::AlreadyStored;
            }
        }
        Written::Each(outcomes)
    }
}

/// The runner's word that the shutdown deadline passed while a write still runs. A
/// destination that can stop work in progress (the `exec` worker stops its jobs) does, and
/// reports each stopped message as [`Outcome::Later`]; the runner hands those back at
/// once, for another instance or the next start. Others ignore it: their writes are
/// bounded by their own timeouts.
#[derive(Debug, Clone)]
pub struct CutShort(tokio::sync::watch::Receiver<bool>);

impl CutShort {
    /// A signal that fires when `rx` turns true.
    pub fn new(rx: tokio::sync::watch::Receiver<bool>) -> CutShort {
        CutShort(rx)
    }

    /// A signal that never fires (a destination driven outside `jetsink run`).
    pub fn never() -> CutShort {
        let (tx, rx) = tokio::sync::watch::channel(false);
        // Kept alive for the life of the process: the receiver then never sees a close.
        std::mem::forget(tx);
        CutShort(rx)
    }

    /// Whether it fired.
    pub fn fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once it fired; never while it has not.
    pub async fn wait(&mut self) {
        if self.0.wait_for(|cut| *cut).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Default for CutShort {
    fn default() -> CutShort {
        CutShort::never()
    }
}

/// The outcome of one message, for destinations that work message by message
/// ([`Written::Each`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durable: the runner may ACK it (in job-queue mode after its result, which carries
    /// `output`, is stored).
    Committed {
        /// What the worker produced, if anything.
        output: Option<Output>,
    },
    /// Durable before this write: a message delivered again (its ACK was lost with a crash)
    /// that the destination already holds — an archive file or object written for an
    /// earlier delivery — and did not write a second time. The runner ACKs it like a
    /// committed one and counts it in `jetsink_sink_already_stored_total`.
    AlreadyStored,
    /// The job itself asked to be run again later (`exec`: a transient exit code). The
    /// runner hands it back with the sink's redelivery delay, so it comes back as a
    /// redelivery, to this or another instance; on its last allowed delivery it is
    /// dead-lettered instead (with a dead-letter queue).
    Later {
        /// Why, without payload contents.
        message: String,
    },
    /// The message failed: `Permanent` / `Unclassified` follow the refusal path (dead
    /// letter on the delivery the policy says, else handed back); `Transient` /
    /// `Misconfigured` mean the destination itself is unavailable (the program cannot be
    /// started), so the runner holds the message and retries it with backoff, like a
    /// failed batch, without holding the messages that did commit.
    Failed(SinkError),
}

impl Outcome {
    /// Whether the message is durable, so the runner may ACK it.
    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed { .. } | Outcome::AlreadyStored)
    }
}

/// A durable destination.
///
/// Calls happen from one task, one at a time. Destinations whose I/O blocks (files, an
/// embedded database) implement [`blocking::BlockingSink`] instead, which runs their calls
/// inside [`tokio::task::block_in_place`] (the daemon runs a multi-threaded runtime).
#[async_trait]
pub trait Sink: Send {
    /// Tells the destination who feeds it, before `open`. Most destinations ignore it.
    fn attach(&mut self, _feed: &Feed) {}

    /// Connects or creates what the destination needs (directory, table). Called once at
    /// start-up, where an error stops the daemon (exit 69 for `Transient`, 78 for
    /// `Misconfigured`). After a transient failure the runner simply calls `write_batch`
    /// again: a destination reopens whatever it dropped there.
    async fn open(&mut self) -> Result<(), SinkError>;

    /// Writes and commits the whole batch. `Ok` means every envelope is durable (fsync'd,
    /// committed) and the runner may ACK them all. An error means none of the batch may be
    /// considered written, although some rows may be: writing the same envelope again must
    /// leave the destination as if it was written once (idempotency on
    /// [`Envelope::idempotency_key`]).
    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError>;

    /// What the runner calls: writes the batch and says what became of it. The default is
    /// [`Sink::write_batch`]'s result for the whole batch; a destination that works message
    /// by message answers [`Written::Each`] instead, so one message that fails holds none
    /// of the others.
    async fn write(&mut self, batch: &[Envelope]) -> Written {
        Written::Batch(self.write_batch(batch).await)
    }

    /// Hands the destination the runner's [`CutShort`] signal, before `open`. Most
    /// destinations ignore it.
    fn cut_short_by(&mut self, _signal: CutShort) {}

    /// Says when the source stream was created, as its info reports it: the daemon says
    /// it after binding, before `open`, and again after binding anew. The archive
    /// destinations check every message against what they store
    /// ([`crate::sinks::util::holdings`]), and a unit stored before this time cannot hold
    /// a message of this stream: it holds one of a stream of the same name deleted since,
    /// whose sequences started again at 1. Most destinations ignore it: their writes are
    /// idempotent by key.
    fn stream_created(&mut self, _at: std::time::SystemTime) {}

    /// Whether two batches may commit in either order and leave the destination holding
    /// the same: each message is a row of its own (the table is keyed by the message), so
    /// batches written at once (`delivery.batches_in_flight` 2) never overwrite each
    /// other. Known once open; `false` for a destination that keeps order.
    fn commits_in_any_order(&self) -> bool {
        false
    }

    /// Cheap check that the destination is still usable. The runner reports readiness from
    /// write outcomes; this is for tools and tests that want to probe without writing.
    async fn health(&mut self) -> Result<(), SinkError>;

    /// Checks, creating and writing nothing, whether [`Sink::open`] could succeed now: the
    /// server answers, the table or directory exists and fits (or would be created), the
    /// process may write there. `jetsink validate --online` calls it instead of `open`.
    /// The default says the destination has no such check.
    async fn probe(&mut self) -> Result<Probe, SinkError> {
        Ok(Probe::Ready(
            "not checked: this destination has no read-only check".into(),
        ))
    }

    /// Distinct idempotency keys of `stream` the destination holds, so `jetsink bench` can
    /// prove that a pass lost nothing. `None` when the destination cannot tell (a custom
    /// column mapping without the key or the stream).
    async fn stored_keys(&mut self, _stream: &str) -> Result<Option<u64>, SinkError> {
        Ok(None)
    }

    /// Drops the table the destination writes, for `jetsink bench`, which points a
    /// destination at a scratch table of its own (see
    /// [`crate::sinks::DestinationConfig::with_scratch_table`]) and removes it after the
    /// pass, so every pass starts from an empty table. Never called on a configured
    /// table. The default has no table to drop.
    async fn drop_table(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// Whether the destination holds one message of `stream`, and where, for `jetsink
    /// trace`. Reads only: it creates, locks and writes nothing, so it may run beside a
    /// live `jetsink run`. The default says the destination cannot be asked.
    async fn locate(&mut self, _stream: &str, _wanted: Wanted<'_>) -> Result<Located, SinkError> {
        Ok(Located::CannotAsk(CANNOT_ASK.into()))
    }
}

/// Why a destination without [`Sink::locate`] cannot say whether it holds a message.
pub const CANNOT_ASK: &str = "this destination keeps no per-message record jetsink can read back (it hands messages on: an endpoint, a subject, a worker)";

/// The message [`Sink::locate`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted<'a> {
    /// The one whose idempotency key is this (`<stream>:<sequence>` or the message id).
    Key(&'a str),
    /// The latest stored with this `Nats-Msg-Id`, which gives its stream sequence.
    MessageId(&'a str),
}

/// What a destination says about one message ([`Sink::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// It is stored.
    Stored {
        /// Where: the table and key column, the file, the object.
        place: String,
        /// Its stream sequence, as stored.
        sequence: Option<u64>,
        /// The delivery that wrote it, as stored.
        delivered: Option<u64>,
    },
    /// It is not stored; where the destination looked.
    Absent(String),
    /// The destination cannot tell; why.
    CannotAsk(String),
}

/// What a read-only check of a destination found ([`Sink::probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Usable as it is; what was checked.
    Ready(String),
    /// Usable once `open` creates what is missing; what it would create.
    WouldCreate(String),
}

#[cfg(test)]
mod tests {
    use super::SinkError;

    #[test]
    fn a_commit_with_messages_already_stored_names_each_of_them() {
        use super::{Outcome, Written};
        assert_eq!(Written::committed(3, &[]), Written::Batch(Ok(())));
        let ok = Outcome::Committed { output: None };
        assert_eq!(
            Written::committed(3, &[2, 0]),
            Written::Each(vec![
                Outcome::AlreadyStored,
                ok.clone(),
                Outcome::AlreadyStored
            ])
        );
        assert!(ok.is_committed() && Outcome::AlreadyStored.is_committed());
        assert!(!Outcome::Later {
            message: "x".into()
        }
        .is_committed());
    }

    #[test]
    fn context_keeps_the_class_and_index() {
        let e = SinkError::Permanent {
            index: Some(4),
            message: "no".into(),
        }
        .with_context("table t");
        assert_eq!(
            e,
            SinkError::Permanent {
                index: Some(4),
                message: "table t: no".into()
            }
        );
        let e = SinkError::transient("gone").with_context("file f");
        assert_eq!(e, SinkError::transient("file f: gone"));
        let e = SinkError::unclassified("error 9999").with_context("table t");
        assert_eq!(e, SinkError::unclassified("table t: error 9999"));
        assert_eq!(e.class(), "unclassified");
    }
}
