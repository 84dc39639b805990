//! The wind-down of a settler at shutdown: what was pulled ahead is handed back at once
//! (so another instance takes it without waiting for AckWait), except messages on their
//! last allowed delivery, which are written instead — handed back, or left to AckWait, the
//! server would never deliver them again — and the ACK tasks are let finish.

use async_nats::jetstream::AckKind;
use tokio::time::Instant;

use super::{Settler, Stop};
use crate::envelope::Envelope;
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::batch::Batch;
use crate::pipeline::puller::Ahead;

impl<A: Acknowledger> Settler<A> {
    /// At shutdown: hands back what was pulled ahead and never written (waiting for a pull
    /// in flight to end, so what it receives is handed back too), so another instance can
    /// take it at once instead of after AckWait. A message on its last allowed delivery is
    /// written instead ([`Settler::write_last`]): handed back, the server would never
    /// deliver it again. What is still unsent by `by` is redelivered after AckWait.
    pub(in crate::pipeline) async fn finish(
        &mut self,
        ahead: &mut Ahead,
        stop: &mut Stop,
        by: Instant,
    ) {
        let pulled = ahead.finish(by).await;
        // The keeper holds every reply of `pulled` in hand, batch after batch, each as
        // `all_replies` orders it.
        let mut naks = Vec::new();
        let mut handed = Vec::new();
        let mut last = Batch::default();
        let mut position = 0;
        for p in pulled {
            for (e, reply) in p.batch.envelopes.into_iter().zip(p.batch.replies) {
                if self.disposal.last_delivery(&e) {
                    last.envelopes.push(e);
                    last.replies.push(reply);
                } else {
                    naks.push(reply);
                    handed.push(position);
                }
                position += 1;
            }
            for r in p.refused {
                naks.push(r.reply);
                handed.push(position);
                position += 1;
            }
        }
        if !naks.is_empty() {
            // Let go of them before the NAK: no `+WPI` follows it.
            self.keeper.settle(handed).await;
            let nak = self.acks.acknowledger().send(naks, AckKind::Nak(None));
            if tokio::time::timeout_at(by, nak).await.is_err() {
                tracing::warn!(sink = %self.name, "no time left to hand back the batch pulled ahead; it is redelivered after AckWait");
            }
        }
        self.write_last(last, ahead, stop).await;
    }

    /// At shutdown, last: lets the ACK tasks finish by `by`.
    pub(in crate::pipeline) async fn drain_acks(&mut self, by: Instant) {
        if tokio::time::timeout_at(by, self.acks.drain())
            .await
            .is_err()
        {
            tracing::warn!(sink = %self.name, "ACKs still unsent at the shutdown deadline; those messages will be redelivered (idempotently)");
        }
    }

    /// At shutdown: writes messages on their last allowed delivery that were pulled ahead
    /// or buffered, rather than hand them back and have the server give up on them. They
    /// are settled like any batch: ACKed once committed, or — should the destination fail
    /// past the shutdown deadline — abandoned, which dead-letters a message on its last
    /// delivery when the sink has a dead-letter queue.
    pub(in crate::pipeline) async fn write_last(
        &mut self,
        last: Batch,
        ahead: &mut Ahead,
        stop: &mut Stop,
    ) {
        if last.envelopes.is_empty() {
            return;
        }
        tracing::info!(sink = %self.name, messages = last.envelopes.len(), "writing messages on their last allowed delivery instead of handing them back");
        self.settle(last, None, ahead, stop).await;
    }

    /// Whether `e` is on its last allowed delivery, so it must not be handed back.
    pub(in crate::pipeline) fn on_last_delivery(&self, e: &Envelope) -> bool {
        self.disposal.last_delivery(e)
    }
}
