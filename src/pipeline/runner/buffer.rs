//! The buffer stage of the runner: the shuffler's buffer (`delivery.shuffle`) or the s3
//! rollover's (a destination that accumulates), filled pull by pull and flushed into the
//! settler when full or on its timer, handed back at shutdown. What it holds is kept alive
//! by the sink's keeper, which sees the buffer.

use std::collections::VecDeque;
use std::sync::Arc;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use tokio::time::Instant;

use super::Runner;
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::batch::Batch;
use crate::pipeline::shuffle::FlushReason;

impl Runner {
    /// Adds a prepared batch to the shuffle buffer, and flushes the buffer when it is full
    /// or its oldest message waited `flush_ms`.
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
            sh.metrics.buffered.set(sh.buffer.len() as i64);
        }
        if let Some(reason) = sh.buffer.due(now) {
            self.flush(reason).await;
        }
    }

    /// Takes the buffer (shuffled into batches, or whole as one batch) and settles it
    /// batch by batch: each batch is ACKed by the settler after it committed. The batches
    /// still waiting stay in the keeper's buffer; once shutdown begins they are handed
    /// back (NAK) instead of written.
    async fn flush(&mut self, reason: FlushReason) {
        let Some(sh) = self.shuffle.as_mut() else {
            return;
        };
        match reason {
            FlushReason::Full => sh.metrics.flushed_full.inc(),
            FlushReason::Timer => sh.metrics.flushed_timer.inc(),
        }
        tracing::debug!(sink = %self.puller.spec().name, messages = sh.buffer.len(), reason = reason.as_str(), "{} buffer flushed", sh.what);
        let mut parts = sh.buffer.take(&mut sh.rng);
        let mut waiting: VecDeque<Arc<Vec<Subject>>> =
            parts.iter().map(|b| Arc::new(b.replies.clone())).collect();
        parts.reverse();
        let metrics = sh.metrics.clone();
        while let Some(part) = parts.pop() {
            if self.stop.stopping() {
                parts.push(part);
                break;
            }
            let Some(mine) = waiting.pop_front() else {
                break;
            };
            metrics
                .buffered
                .set(waiting.iter().map(|w| w.len()).sum::<usize>() as i64);
            self.settler
                .keeper()
                .hand_over(mine, waiting.iter().cloned().collect())
                .await;
            self.metrics.inflight.set(part.envelopes.len() as i64);
            self.settler
                .settle(part, &mut self.ahead, &mut self.stop)
                .await;
            self.metrics.inflight.set(0);
        }
        self.settler.keeper().clear_buffer().await;
        let rest: Vec<Subject> = parts.into_iter().flat_map(|b| b.replies).collect();
        metrics.buffered.set(0);
        if !rest.is_empty() {
            self.settler
                .acknowledger()
                .send(rest, AckKind::Nak(None))
                .await;
        }
    }

    /// At shutdown: hands the unwritten buffer back (NAK without delay), so
    /// another instance, or the next start, gets it at once. Never ACKed unwritten.
    pub(super) async fn hand_back_buffer(&mut self, by: Instant) {
        let Some(sh) = self.shuffle.as_mut() else {
            return;
        };
        self.settler.keeper().clear_buffer().await;
        let replies = sh.buffer.take_replies();
        sh.metrics.buffered.set(0);
        if replies.is_empty() {
            return;
        }
        tracing::info!(sink = %self.puller.spec().name, messages = replies.len(), "handing back the {} buffer", sh.what);
        let nak = self
            .settler
            .acknowledger()
            .send(replies, AckKind::Nak(None));
        if tokio::time::timeout_at(by, nak).await.is_err() {
            tracing::warn!(sink = %self.puller.spec().name, "no time left to hand back the buffer; it is redelivered after AckWait");
        }
    }
}
