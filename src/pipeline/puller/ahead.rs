//! The pull-ahead slot of a runner: the pull in flight in the background and the batch it
//! left in the keeper's [`Slot`], waited for alongside a write and, at shutdown, for a
//! bounded time so what it received can be handed back.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::pipeline::batch::Prepared;
use crate::pipeline::keeper::Slot;
use crate::sinks::{Sink, Written};

/// A pull task; its batch goes into the keeper's [`Slot`], the result only says whether
/// it failed.
pub(super) type PendingPull = JoinHandle<Result<(), async_nats::Error>>;

/// A batch written ahead, and the writer that wrote it.
pub(crate) struct WrittenAhead {
    /// The writer, free again.
    pub(crate) sink: Box<dyn Sink>,
    /// The batch as pulled and prepared.
    pub(crate) prepared: Prepared,
    /// What its first write came to.
    pub(crate) written: Written,
    /// When that write began, for its trace span.
    pub(crate) began: SystemTime,
    /// How long it took.
    pub(crate) took: Duration,
}

/// A write ahead in flight, in its own task.
pub(crate) type WriteTask = JoinHandle<WrittenAhead>;

/// A pull in flight and a batch pulled ahead, not yet written — or, with a second writer
/// (`delivery.batches_in_flight` 2), being written while the batch in hand settles.
pub(crate) struct Ahead {
    /// Sink name, for logs.
    sink: Arc<str>,
    pub(super) pending: Option<PendingPull>,
    /// Where the pull task leaves its batch: the keeper's, which keeps it alive there.
    pub(super) slot: Slot,
    /// The writer a batch pulled ahead is written with, while no write ahead runs.
    spare: Option<Box<dyn Sink>>,
    /// The write ahead in flight; the runner takes its batch before any pulled later.
    writing: Option<WriteTask>,
}

impl Ahead {
    /// Nothing pulled ahead yet; pulls go into `slot`.
    pub(crate) fn new(sink: &str, slot: &Slot) -> Ahead {
        Ahead {
            sink: sink.into(),
            pending: None,
            slot: slot.clone(),
            spare: None,
            writing: None,
        }
    }

    /// Gives a batch pulled ahead `writer` to be written with while the batch in hand
    /// settles ([`Ahead::alongside_writing`]).
    pub(crate) fn lend(&mut self, writer: Box<dyn Sink>) {
        self.spare = Some(writer);
    }

    /// Whether a second writer waits here for a batch pulled ahead (none while it writes).
    pub(crate) fn lent(&self) -> bool {
        self.spare.is_some()
    }

    /// Runs `work` to completion while noting a background pull that ends meanwhile, so a
    /// failed pull ahead is logged and the next batch pulls again at once.
    pub(crate) async fn alongside<F: Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                out = &mut work => return out,
                () = self.collect() => {}
            }
        }
    }

    /// [`Ahead::alongside`], and with a writer lent, the batch pulled ahead is written
    /// meanwhile, as soon as it is there: two batches in flight, each to be settled (and
    /// ACKed) after its own write, in the order they were pulled.
    pub(crate) async fn alongside_writing<F: Future>(&mut self, work: F) -> F::Output {
        self.write_ahead().await;
        tokio::pin!(work);
        loop {
            let arrival = self.slot.clone();
            tokio::select! {
                biased;
                out = &mut work => return out,
                () = self.collect() => self.write_ahead().await,
                // The pull task may go on to pull another batch after this one.
                () = arrival.arrival() => self.write_ahead().await,
            }
        }
    }

    /// The write ahead in flight, taken to be settled.
    pub(crate) fn take_writing(&mut self) -> Option<WriteTask> {
        self.writing.take()
    }

    /// Starts writing the batch pulled ahead with the lent writer, if both are there.
    pub(super) async fn write_ahead(&mut self) {
        if self.spare.is_none() || self.writing.is_some() {
            return;
        }
        let Some(prepared) = self.slot.take_to_write().await else {
            return;
        };
        let Some(mut sink) = self.spare.take() else {
            return;
        };
        self.writing = Some(tokio::spawn(async move {
            let began = SystemTime::now();
            let started = Instant::now();
            let written = sink.write(&prepared.batch.envelopes).await;
            WrittenAhead {
                sink,
                prepared,
                written,
                began,
                took: started.elapsed(),
            }
        }));
    }

    /// Waits for the pull in flight (its batch is in the slot already); pending forever
    /// without one, so it can stand in a `select!` beside the work it runs alongside.
    pub(super) async fn collect(&mut self) {
        let Some(pending) = self.pending.as_mut() else {
            return std::future::pending().await;
        };
        let pulled = pending.await;
        self.pending = None;
        if pulled.is_err() {
            // The task died (a panic) before it could say it stopped pulling.
            self.slot.set_pulling(false).await;
        }
        self.note(pulled);
    }

    /// Forgets the pull task if it has ended (noting how), so the next pull can start; a
    /// task still pulling a further batch ahead is left to run.
    pub(super) async fn reap(&mut self) {
        if self.pending.as_ref().is_some_and(JoinHandle::is_finished) {
            self.collect().await;
        }
    }

    fn note(&self, pulled: Result<Result<(), async_nats::Error>, tokio::task::JoinError>) {
        match pulled {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(sink = %self.sink, error = %e, "pull ahead failed; pulling again later")
            }
            Err(e) => tracing::error!(sink = %self.sink, error = %e, "pull-ahead task failed"),
        }
    }

    /// At shutdown: every batch pulled ahead, taken into hand (to be handed back, or
    /// written when on its last allowed delivery), waiting until `by` at most for a pull in flight (it returns at once,
    /// no-wait, or within the batch timeout; the slot is closed first, so it pulls no
    /// further batch), so what it received is handed back too instead of waiting out
    /// AckWait.
    pub(crate) async fn finish(&mut self, by: Instant) -> Vec<Prepared> {
        self.slot.close().await;
        if let Some(pending) = self.pending.take() {
            let _ = tokio::time::timeout_at(by, pending).await;
        }
        self.slot.take_all().await
    }

    /// A pull in flight that never returns, as one lost in a disconnect.
    #[cfg(test)]
    pub(crate) fn with_stuck_pull(sink: &str, slot: &Slot) -> Ahead {
        let mut ahead = Ahead::new(sink, slot);
        ahead.pending = Some(tokio::spawn(std::future::pending()));
        ahead
    }

    /// A batch already pulled ahead.
    #[cfg(test)]
    pub(crate) async fn with_waiting(sink: &str, slot: &Slot, p: Prepared) -> Ahead {
        slot.put(p, crate::pipeline::room::Room::batches(1), false)
            .await;
        Ahead::new(sink, slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pull_task_that_died_leaves_the_slot_to_the_next_pull() {
        let slot = Slot::default();
        slot.set_pulling(true).await;
        let mut ahead = Ahead::new("t", &slot);
        let died: PendingPull = tokio::spawn(async {
            if std::hint::black_box(true) {
                panic!("the pull task dies");
            }
            Ok(())
        });
        ahead.pending = Some(died);
        ahead.collect().await;
        assert!(ahead.pending.is_none());
        assert!(!slot.pulling().await, "a new pull may start");
    }
}
