//! The per-sink loop, and the only code in jetsink that ACKs.
//!
//! fetch a bounded batch → normalize → `write_batch` → ACK each message → flush.
//!
//! Every message of a batch ends in exactly one outcome:
//! - **committed**: the destination said `Ok`, so the message is ACKed;
//! - **held**: the destination failed transiently, so the batch is kept and retried with
//!   capped, jittered backoff while no new batch is fetched (deliveries are not burnt);
//!   a batch held longer than half of AckWait gets `+WPI` (progress) so the server does
//!   not redeliver it meanwhile;
//! - **rejected**: the destination refused it permanently; the batch is split until the
//!   culprits stand alone, the rest commits and is ACKed, and each culprit is NAKed with
//!   a delay (no dead-letter queue yet), so it is redelivered and counted, never lost;
//! - **abandoned**: shutdown came and the batch could not commit within
//!   `shutdown_timeout_ms`; it is NAKed so another instance gets it at once.
//!
//! A message whose outcome code never runs (a panic, a killed process) is simply never
//! ACKed: JetStream redelivers it after AckWait.

use std::ops::Range;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::{self, AckKind};
use rand::rngs::StdRng;
use rand::SeedableRng;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::time::Instant;

use super::retry::backoff;
use crate::config::SinkSpec;
use crate::envelope::{self, Envelope};
use crate::health::SinkHealth;
use crate::metrics::SinkMetrics;
use crate::nats::{bind, fetch_batch, FetchLimits};
use crate::sinks::{Sink, SinkError};

/// Consecutive failed pulls after which the runner re-binds its consumer (it may have been
/// lost with a memory-storage server restart).
const REBIND_AFTER: u32 = 3;

/// Everything one sink's loop needs.
pub struct Runner {
    spec: SinkSpec,
    js: jetstream::Context,
    consumer: PullConsumer,
    sink: Box<dyn Sink>,
    metrics: SinkMetrics,
    acks: Acks,
    health: SinkHealth,
    shutdown: watch::Receiver<bool>,
    shutdown_deadline: Option<Instant>,
    rng: StdRng,
}

/// How a write attempt loop ended.
enum Written {
    Committed,
    Refused {
        index: Option<usize>,
        message: String,
    },
    Abandoned,
}

impl Runner {
    /// Assembles a runner for a bound consumer and an opened destination.
    pub fn new(
        spec: SinkSpec,
        js: jetstream::Context,
        consumer: PullConsumer,
        sink: Box<dyn Sink>,
        metrics: SinkMetrics,
        health: SinkHealth,
        shutdown: watch::Receiver<bool>,
    ) -> Runner {
        let acks = Acks {
            sink: spec.name.clone(),
            client: js.client(),
            metrics: metrics.clone(),
            reject_delay: Duration::from_millis(spec.delivery.retry.max_backoff_ms),
            flush_timeout: Duration::from_secs(5),
        };
        Runner {
            spec,
            js,
            consumer,
            sink,
            metrics,
            acks,
            health,
            shutdown,
            shutdown_deadline: None,
            rng: StdRng::from_os_rng(),
        }
    }

    fn stopping(&mut self) -> bool {
        if self.shutdown_deadline.is_none() && *self.shutdown.borrow() {
            self.shutdown_deadline = Some(
                Instant::now() + Duration::from_millis(self.spec.delivery.shutdown_timeout_ms),
            );
        }
        self.shutdown_deadline.is_some()
    }

    /// Runs until shutdown is signalled and the batch in hand is settled.
    pub async fn run(mut self) {
        let name = self.spec.name.clone();
        tracing::info!(sink = %name, stream = %self.spec.source.stream, consumer = %self.spec.source.consumer, "sink running");
        let limits = FetchLimits {
            max_messages: self.spec.delivery.batch_size,
            max_bytes: self.spec.delivery.max_batch_bytes,
            wait: Duration::from_millis(self.spec.delivery.batch_timeout_ms),
        };
        let mut failed_pulls: u32 = 0;
        while !self.stopping() {
            self.health.beat();
            let mut shutdown = self.shutdown.clone();
            let fetched = tokio::select! {
                r = fetch_batch(&self.consumer, limits) => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            let messages = match fetched {
                Ok(m) => {
                    failed_pulls = 0;
                    m
                }
                Err(e) => {
                    failed_pulls += 1;
                    self.metrics.fetch_errors.inc();
                    tracing::warn!(sink = %name, error = %e, attempt = failed_pulls, "pull failed");
                    let delay = backoff(&self.spec.delivery.retry, failed_pulls - 1, &mut self.rng);
                    self.pause(delay).await;
                    if failed_pulls >= REBIND_AFTER {
                        self.rebind().await;
                    }
                    continue;
                }
            };
            if messages.is_empty() {
                continue;
            }
            self.metrics.fetched.inc_by(messages.len() as u64);
            let (envelopes, ackers) = self.normalize(messages);
            self.metrics.inflight.set(envelopes.len() as i64);
            self.settle(&envelopes, &ackers).await;
            self.metrics.inflight.set(0);
        }
        tracing::info!(sink = %name, "sink stopped");
    }

    async fn rebind(&mut self) {
        match bind(&self.js, &self.spec.name, &self.spec.source).await {
            Ok(b) => {
                self.consumer = b.consumer;
                self.health.set_bound(true);
            }
            Err(e) => {
                self.health.set_bound(false);
                tracing::warn!(sink = %self.spec.name, error = %e, "re-binding the consumer failed");
            }
        }
    }

    /// Sleeps, waking early for shutdown.
    async fn pause(&mut self, d: Duration) {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    }

    fn normalize(&self, messages: Vec<jetstream::Message>) -> (Vec<Envelope>, Vec<Acker>) {
        let key = self.spec.delivery.idempotency_key;
        let mut envelopes = Vec::with_capacity(messages.len());
        let mut ackers = Vec::with_capacity(messages.len());
        for m in messages {
            let built = {
                let info = match m.info() {
                    Ok(i) => i,
                    Err(e) => {
                        tracing::warn!(sink = %self.spec.name, subject = %m.subject, error = %e, "skipping a message without JetStream metadata");
                        continue;
                    }
                };
                let delivery = envelope::Delivery {
                    stream: info.stream,
                    consumer: info.consumer,
                    stream_sequence: info.stream_sequence,
                    consumer_sequence: info.consumer_sequence,
                    delivered: info.delivered,
                    published: info.published,
                };
                let mut pairs: Vec<(&str, &str)> = Vec::new();
                if let Some(h) = &m.headers {
                    for (name, values) in h.iter() {
                        for v in values {
                            pairs.push((name.as_ref(), v.as_str()));
                        }
                    }
                }
                // HeaderMap has no order; sort by name so stored headers are deterministic.
                pairs.sort_by(|a, b| a.0.cmp(b.0));
                envelope::normalize(m.subject.as_str(), delivery, pairs, m.payload.clone(), key)
            };
            let (_, acker) = m.split();
            envelopes.push(built);
            ackers.push(acker);
        }
        (envelopes, ackers)
    }

    /// Gives every message of the batch its outcome.
    async fn settle(&mut self, envelopes: &[Envelope], ackers: &[Acker]) {
        // Ranges still to write, in order; pushed in reverse so they pop in order.
        let mut todo: Vec<Range<usize>> = Vec::with_capacity(8);
        todo.push(0..envelopes.len());
        let mut isolated = false;
        while let Some(range) = todo.pop() {
            match self.write(envelopes, ackers, range.clone()).await {
                Written::Committed => {
                    self.acks
                        .ack(&envelopes[range.clone()], &ackers[range])
                        .await
                }
                Written::Abandoned => {
                    // Release this range and everything not yet written.
                    let rest = todo.iter().cloned();
                    for r in std::iter::once(range).chain(rest) {
                        self.acks.release(&ackers[r], AckKind::Nak(None)).await;
                    }
                    self.metrics.batches_abandoned.inc();
                    tracing::info!(sink = %self.spec.name, "batch abandoned at shutdown; left for redelivery");
                    return;
                }
                Written::Refused { index, message } => {
                    isolated = true;
                    if range.len() == 1 {
                        self.acks
                            .reject(&envelopes[range.start], &ackers[range.start], &message)
                            .await;
                        continue;
                    }
                    for part in split(range, index).into_iter().rev() {
                        todo.push(part);
                    }
                }
            }
        }
        if isolated {
            self.metrics.batches_isolated.inc();
        } else {
            self.metrics.batches_committed.inc();
        }
    }

    /// Writes `range` until it commits, is refused, or shutdown abandons it.
    async fn write(
        &mut self,
        envelopes: &[Envelope],
        ackers: &[Acker],
        range: Range<usize>,
    ) -> Written {
        let part = &envelopes[range.clone()];
        let ack_wait = Duration::from_millis(self.spec.source.ack_wait_ms);
        let mut last_progress = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let started = Instant::now();
            let result = self.sink.write_batch(part).await;
            self.metrics
                .write_seconds
                .observe(started.elapsed().as_secs_f64());
            let err = match result {
                Ok(()) => {
                    if attempt > 0 {
                        tracing::info!(sink = %self.spec.name, attempts = attempt + 1, "destination recovered");
                    }
                    self.health.destination_ok();
                    return Written::Committed;
                }
                Err(e) => e,
            };
            self.metrics.sink_error(&err);
            match err {
                SinkError::Permanent { index, message } => {
                    // Map a part-relative index back to the batch.
                    let index = index.filter(|i| *i < part.len()).map(|i| range.start + i);
                    tracing::warn!(sink = %self.spec.name, messages = part.len(), error = %message, "destination refused part of a batch; isolating");
                    return Written::Refused { index, message };
                }
                SinkError::Transient { message } | SinkError::Misconfigured { message } => {
                    self.metrics.batches_retried.inc();
                    self.health.destination_failed(&message);
                    let delay = backoff(&self.spec.delivery.retry, attempt, &mut self.rng);
                    tracing::warn!(sink = %self.spec.name, error = %message, attempt = attempt + 1, retry_in_ms = delay.as_millis() as u64, "destination failed; holding the batch");
                    attempt = attempt.saturating_add(1);
                    let wake = Instant::now() + delay;
                    loop {
                        self.health.beat();
                        if self.stopping() {
                            if let Some(deadline) = self.shutdown_deadline {
                                if Instant::now() >= deadline {
                                    return Written::Abandoned;
                                }
                            }
                        }
                        if last_progress.elapsed() >= ack_wait / 2 {
                            self.acks
                                .release(&ackers[range.clone()], AckKind::Progress)
                                .await;
                            last_progress = Instant::now();
                        }
                        let now = Instant::now();
                        if now >= wake {
                            break;
                        }
                        let mut until = wake.min(last_progress + ack_wait / 2);
                        if let Some(deadline) = self.shutdown_deadline {
                            until = until.min(deadline);
                        }
                        let mut shutdown = self.shutdown.clone();
                        tokio::select! {
                            _ = tokio::time::sleep_until(until.max(now + Duration::from_millis(1))) => {}
                            _ = shutdown.wait_for(|s| *s), if self.shutdown_deadline.is_none() => {}
                        }
                    }
                }
            }
        }
    }
}

/// Sends acknowledgements. Kept apart from [`Runner`] so that the runner's destination,
/// which need not be `Sync`, is not borrowed across the awaits of an ACK.
struct Acks {
    sink: String,
    client: async_nats::Client,
    metrics: SinkMetrics,
    reject_delay: Duration,
    flush_timeout: Duration,
}

impl Acks {
    /// Pushes queued acknowledgements to the socket. Bounded: while NATS is disconnected
    /// a flush would wait for the reconnect, and the loop must stay responsive to shutdown.
    async fn flush(&self) -> Result<(), String> {
        match tokio::time::timeout(self.flush_timeout, self.client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no flush within {:?}", self.flush_timeout)),
        }
    }

    async fn ack(&self, envelopes: &[Envelope], ackers: &[Acker]) {
        let now = OffsetDateTime::now_utc();
        for (e, a) in envelopes.iter().zip(ackers) {
            if let Err(err) = a.ack().await {
                self.metrics.ack_errors.inc();
                tracing::warn!(sink = %self.sink, stream_sequence = e.stream_sequence, error = %err, "ACK not sent; the message will be redelivered and written idempotently");
                continue;
            }
            let lag = (now - e.published_at).as_seconds_f64().max(0.0);
            self.metrics.commit_lag.observe(lag);
        }
        self.metrics.acked.inc_by(envelopes.len() as u64);
        if let Err(err) = self.flush().await {
            tracing::warn!(sink = %self.sink, error = %err, "flushing ACKs failed; unsent ACKs lead to idempotent redelivery");
        }
    }

    /// Sends a non-ACK acknowledgement (progress or NAK) for each message, then flushes.
    async fn release(&self, ackers: &[Acker], kind: AckKind) {
        for a in ackers {
            if let Err(err) = a.ack_with(kind).await {
                self.metrics.ack_errors.inc();
                tracing::debug!(sink = %self.sink, error = %err, "could not send {kind:?}");
            }
        }
        if let Err(err) = self.flush().await {
            tracing::debug!(sink = %self.sink, error = %err, "flush failed");
        }
    }

    async fn reject(&self, envelope: &Envelope, acker: &Acker, why: &str) {
        self.metrics.rejected.inc();
        let delay = self.reject_delay;
        tracing::error!(
            sink = %self.sink,
            subject = %envelope.subject,
            stream = %envelope.stream,
            stream_sequence = envelope.stream_sequence,
            delivered = envelope.delivered,
            error = %why,
            "destination refused a message; left unacked for redelivery in {}s (no dead-letter queue configured)",
            delay.as_secs()
        );
        self.release(std::slice::from_ref(acker), AckKind::Nak(Some(delay)))
            .await;
    }
}

/// Splits a refused range: around the offending index when the destination named one,
/// otherwise in halves.
pub fn split(range: Range<usize>, index: Option<usize>) -> Vec<Range<usize>> {
    match index {
        Some(i) if range.contains(&i) => [range.start..i, i..i + 1, i + 1..range.end]
            .into_iter()
            .filter(|r| !r.is_empty())
            .collect(),
        _ => {
            let mid = range.start + range.len() / 2;
            vec![range.start..mid, mid..range.end]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_isolates_a_named_culprit() {
        assert_eq!(split(0..10, Some(3)), vec![0..3, 3..4, 4..10]);
        assert_eq!(split(0..10, Some(0)), vec![0..1, 1..10]);
        assert_eq!(split(5..10, Some(9)), vec![5..9, 9..10]);
    }

    #[test]
    fn split_halves_without_a_culprit_or_with_a_bogus_one() {
        assert_eq!(split(0..10, None), vec![0..5, 5..10]);
        assert_eq!(split(0..3, Some(7)), vec![0..1, 1..3]);
    }
}
