//! A batch written ahead (`delivery.batches_in_flight` 2) taken into the settler's hand.

use super::beside::Beside;
use super::stop::cut_at;
use super::{FirstWrite, Settler, Stop};
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::batch::Prepared;
use crate::pipeline::puller::{Ahead, Puller, WriteTask};

impl<A: Acknowledger> Settler<A> {
    /// Waits for the batch written ahead (`writing`), lending this settler's writer to the
    /// next batch pulled meanwhile (and, given the `puller`, pulling on), and keeps the
    /// writer that wrote it. Gives the batch and what its first write came to, for
    /// [`Settler::settle`]. A panic in the write is the runner's, as it would be inline;
    /// `None` only when the runtime cancelled the write (it is shutting down), and the
    /// batch is then redelivered after AckWait.
    pub(crate) async fn take_written(
        &mut self,
        writing: WriteTask,
        ahead: &mut Ahead,
        puller: Option<&mut Puller>,
        stop: &Stop,
    ) -> Option<(Prepared, FirstWrite)> {
        if let Some(mine) = self.sink.take() {
            ahead.lend(mine);
        }
        let wait = cut_at(&self.cut, stop.deadline_passed(), writing);
        let healthy = self.healthy && !stop.signalled();
        let joined = Beside { ahead, puller }.run(healthy, stop, wait).await;
        self.keeper.slot().hand_written().await;
        let done = match joined {
            Ok(done) => done,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                tracing::error!(sink = %self.name, error = %e, "a batch written ahead was cancelled; it is redelivered after AckWait");
                return None;
            }
        };
        self.metrics.write_seconds.observe(done.took.as_secs_f64());
        self.metrics.written_ahead.inc();
        self.sink = Some(done.sink);
        let first = FirstWrite {
            written: done.written,
            began: done.began,
        };
        Some((done.prepared, first))
    }
}
