//! The buffer stage of the runner: the shuffler's buffer (`delivery.shuffle`) or the s3
//! rollover's (a destination that accumulates), filled pull by pull and flushed into the
//! settler when full or on its timer, handed back at shutdown. What it holds is kept alive
//! by the sink's keeper, which sees the buffer.

use std::sync::Arc;

use async_nats::jetstream::AckKind;
use tokio::time::Instant;

use super::Runner;
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::batch::Batch;
use crate::pipeline::shuffle::FlushReason;

impl Runner {
    /// Adds a prepared batch to the shuffle buffer, starts a flush when the buffer is full
    /// or its oldest message waited `flush_ms` (and no flush is being written), then writes
    /// the flush's next part. So the next buffer fills, a pull at a time, while the one
    /// before is written, a part at a time: pulling and writing overlap as they do without
    /// a buffer. Only while the filling buffer could not take another pull does the flush
    /// go on without pulling.
    pub(super) async fn shuffle_in(&mut self, batch: Batch) {
        let Some(sh) = self.shuffle.as_mut() else {
            return;
        };
        let now = sh.now_ms();
        if !batch.envelopes.is_empty() {
            // Into the keeper's buffer first: from hand to buffer in one step.
            self.settler
                .keeper()
                .buffer(Arc::new(batch.replies.clone()))
                .await;
            sh.buffer.push(batch, now);
            sh.show_buffered();
        }
        loop {
            let Some(sh) = self.shuffle.as_mut() else {
                return;
            };
            if sh.parts.is_empty() {
                match sh.buffer.due(sh.now_ms()) {
                    Some(reason) => self.start_flush(reason).await,
                    None => return,
                }
            }
            if !self.write_part().await {
                return;
            }
            if self.shuffle.as_ref().is_some_and(|sh| sh.buffer.has_room()) {
                return;
            }
        }
    }

    /// Takes the buffer (shuffled into batches, or whole as one batch) as the parts of a
    /// flush; the keeper sees them move from the buffer to the flush in one step.
    async fn start_flush(&mut self, reason: FlushReason) {
        let Some(sh) = self.shuffle.as_mut() else {
            return;
        };
        match reason {
            FlushReason::Full => sh.metrics.flushed_full.inc(),
            FlushReason::Timer => sh.metrics.flushed_timer.inc(),
        }
        tracing::debug!(sink = %self.puller.spec().name, messages = sh.buffer.len(), reason = reason.as_str(), "{} buffer flushed", sh.what);
        let mut parts = sh.buffer.take(&mut sh.rng);
        sh.waiting = parts.iter().map(|b| Arc::new(b.replies.clone())).collect();
        parts.reverse();
        sh.parts = parts;
        let waiting = sh.waiting.iter().cloned().collect();
        self.settler.keeper().start_flush(waiting).await;
    }

    /// Writes the next part of the flush, ACKed by the settler after it committed, with the
    /// next pull in flight meanwhile when the filling buffer has room for it. Once shutdown
    /// begins nothing more is written: the parts left are handed back with the buffer.
    /// Returns whether a part was written.
    async fn write_part(&mut self) -> bool {
        if self.stop.stopping() {
            return false;
        }
        let Some(sh) = self.shuffle.as_mut() else {
            return false;
        };
        let (Some(part), Some(mine)) = (sh.parts.pop(), sh.waiting.pop_front()) else {
            return false;
        };
        let room = sh.buffer.has_room();
        sh.show_buffered();
        let rest = sh.waiting.iter().cloned().collect();
        self.settler.keeper().hand_over(mine, rest).await;
        if room && self.settler.healthy() {
            self.puller.pull_ahead(&mut self.ahead).await;
        }
        self.metrics.inflight.set(part.envelopes.len() as i64);
        self.settler
            .settle(part, None, &mut self.ahead, &mut self.stop)
            .await;
        self.metrics.inflight.set(0);
        true
    }

    /// At shutdown: hands the unwritten buffer back (NAK without delay), so another
    /// instance, or the next start, gets it at once. Never ACKed unwritten. A message on
    /// its last allowed delivery is written instead: handed back, the server would never
    /// deliver it again.
    pub(super) async fn hand_back_buffer(&mut self, by: Instant) {
        let Some(sh) = self.shuffle.as_mut() else {
            return;
        };
        self.settler.keeper().clear_buffer().await;
        let mut unwritten = Batch::default();
        for part in sh.parts.drain(..).rev() {
            unwritten.extend(part);
        }
        sh.waiting.clear();
        unwritten.extend(sh.buffer.take_unwritten());
        sh.metrics.buffered.set(0);
        let settler = &self.settler;
        let last = unwritten.split_off(|e| settler.on_last_delivery(e));
        let replies = unwritten.replies;
        if !replies.is_empty() {
            tracing::info!(sink = %self.puller.spec().name, messages = replies.len(), "handing back the {} buffer", sh.what);
            let nak = self
                .settler
                .acknowledger()
                .send(replies, AckKind::Nak(None));
            if tokio::time::timeout_at(by, nak).await.is_err() {
                tracing::warn!(sink = %self.puller.spec().name, "no time left to hand back the buffer; it is redelivered after AckWait");
            }
        }
        self.settler
            .write_last(last, &mut self.ahead, &mut self.stop)
            .await;
    }
}
