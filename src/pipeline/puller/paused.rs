//! The puller while its sink is paused in the server: it sends no pull, and waits for the
//! pause to end (the deadline the server stated, or a consumer info answer saying it is
//! over) for at most the batch timeout, so the loop keeps turning (its heartbeat feeds
//! `/healthz` and the systemd watchdog) and a shuffle buffer's flush timer still fires.

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Pulled, Puller};
use crate::pipeline::batch::Prepared;

impl Puller {
    /// Waits, without pulling, until the pause ends, the batch timeout or `by` (the
    /// buffer's flush timer) passes, or shutdown; an empty batch, or `Stopped`.
    pub(super) async fn while_paused(
        &self,
        shutdown: &mut watch::Receiver<bool>,
        by: Option<Instant>,
    ) -> Pulled {
        let turn = Instant::now() + self.limits.wait;
        let up_to = by.map_or(turn, |b| b.min(turn));
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => Pulled::Stopped,
            () = self.pause.wait(up_to) => Pulled::Batch(Prepared::default()),
        }
    }
}
