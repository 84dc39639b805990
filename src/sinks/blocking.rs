//! The adapter for destinations whose I/O blocks the thread (files, SQLite).
//!
//! Such a destination implements [`BlockingSink`] with plain synchronous methods, and this
//! module's one `impl Sink` runs each call inside [`tokio::task::block_in_place`]: the
//! runner's task keeps its worker thread while the write and its fsync run, and the
//! runtime moves the other tasks (ACK senders, pulls, the HTTP endpoint) to other workers,
//! so a slow disk never stalls an ACK. That needs the multi-threaded runtime the daemon
//! runs on. The call is made in place, on the caller's `&mut self` and borrowed batch, so
//! the adapter adds no allocation, copy or thread hop per batch or per message.

use async_trait::async_trait;

use super::contract::{Feed, Located, Probe, Sink, SinkError, Wanted, Written, CANNOT_ASK};
use crate::envelope::Envelope;

/// A destination whose calls block: the synchronous form of [`Sink`], with the same
/// meaning for every method and every error class. Implementing it makes the type a
/// [`Sink`].
///
/// A destination drops its handle after a failure that could leave it unusable; the
/// adapter then reopens it before the next write or health check, so `write_blocking` and
/// `health_blocking` only ever run on an open destination, and `write_blocking` never sees
/// an empty batch.
pub trait BlockingSink: Send {
    /// The sink's name and source stream, before `open`; see [`Sink::attach`]. Most
    /// destinations ignore it.
    fn attach_blocking(&mut self, _feed: &Feed) {}

    /// When the source stream was created; see [`Sink::stream_created`]. Most
    /// destinations ignore it.
    fn stream_created_blocking(&mut self, _at: std::time::SystemTime) {}

    /// Whether the destination holds an open handle (file, connection).
    fn is_open(&self) -> bool;

    /// Creates or checks what the destination needs and opens it; see [`Sink::open`].
    fn open_blocking(&mut self) -> Result<(), SinkError>;

    /// Writes and commits the whole batch, durably, before returning `Ok`; see
    /// [`Sink::write_batch`].
    fn write_blocking(&mut self, batch: &[Envelope]) -> Result<(), SinkError>;

    /// Writes and commits the whole batch as `write_blocking` does, and says what became of
    /// each message; see [`Sink::write`]. The default is `write_blocking`'s result for the
    /// whole batch; a destination that finds some of a batch already stored names them
    /// ([`Written::committed`]).
    fn write_outcomes_blocking(&mut self, batch: &[Envelope]) -> Written {
        Written::Batch(self.write_blocking(batch))
    }

    /// Cheap check that the open destination is still usable; see [`Sink::health`].
    fn health_blocking(&mut self) -> Result<(), SinkError>;

    /// Checks, creating and writing nothing, whether `open_blocking` could succeed; see
    /// [`Sink::probe`].
    fn probe_blocking(&mut self) -> Result<Probe, SinkError>;

    /// Distinct idempotency keys of `stream` the destination holds; see
    /// [`Sink::stored_keys`]. The default cannot tell.
    fn stored_keys_blocking(&mut self, _stream: &str) -> Result<Option<u64>, SinkError> {
        Ok(None)
    }

    /// Drops the (scratch) table the destination writes; see [`Sink::drop_table`]. The
    /// default has none.
    fn drop_table_blocking(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// Whether the destination holds one message, and where; see [`Sink::locate`]. The
    /// default cannot tell.
    fn locate_blocking(
        &mut self,
        _stream: &str,
        _wanted: Wanted<'_>,
    ) -> Result<Located, SinkError> {
        Ok(Located::CannotAsk(CANNOT_ASK.into()))
    }
}

#[async_trait]
impl<T: BlockingSink> Sink for T {
    fn attach(&mut self, feed: &Feed) {
        self.attach_blocking(feed);
    }

    fn stream_created(&mut self, at: std::time::SystemTime) {
        self.stream_created_blocking(at);
    }

    async fn open(&mut self) -> Result<(), SinkError> {
        tokio::task::block_in_place(|| self.open_blocking())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        tokio::task::block_in_place(|| {
            if !self.is_open() {
                self.open_blocking()?;
            }
            self.write_blocking(batch)
        })
    }

    async fn write(&mut self, batch: &[Envelope]) -> Written {
        if batch.is_empty() {
            return Written::Batch(Ok(()));
        }
        tokio::task::block_in_place(|| {
            if !self.is_open() {
                if let Err(e) = self.open_blocking() {
                    return Written::Batch(Err(e));
                }
            }
            self.write_outcomes_blocking(batch)
        })
    }

    async fn probe(&mut self) -> Result<Probe, SinkError> {
        tokio::task::block_in_place(|| self.probe_blocking())
    }

    async fn stored_keys(&mut self, stream: &str) -> Result<Option<u64>, SinkError> {
        tokio::task::block_in_place(|| self.stored_keys_blocking(stream))
    }

    async fn locate(&mut self, stream: &str, wanted: Wanted<'_>) -> Result<Located, SinkError> {
        tokio::task::block_in_place(|| self.locate_blocking(stream, wanted))
    }

    async fn drop_table(&mut self) -> Result<(), SinkError> {
        tokio::task::block_in_place(|| self.drop_table_blocking())
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        tokio::task::block_in_place(|| {
            if self.is_open() {
                self.health_blocking()
            } else {
                self.open_blocking()
            }
        })
    }
}
