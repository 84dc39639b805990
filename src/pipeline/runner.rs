//! The per-sink loop, and the only code in jetsink that acknowledges messages.
//!
//! pull a bounded batch → prepare (normalize, metadata, lanes) → `write_batch` → ACK.
//!
//! Every message of a batch ends in exactly one outcome:
//! - **committed**: the destination said `Ok`, so the message is ACKed;
//! - **held**: the destination failed transiently, so the batch is kept and retried with
//!   capped, jittered backoff while no new batch is pulled (deliveries are not burnt);
//!   a batch held longer than half of AckWait gets `+WPI` (progress) so the server does
//!   not redeliver it meanwhile;
//! - **refused**: its metadata broke the rules, or the destination refused it
//!   permanently (the batch is split until the culprits stand alone, the rest commits);
//!   a copy goes to the dead-letter queue and, once stored, the original is ACKed (or
//!   TERMed); without a queue, or if that publish fails, it is NAKed with a delay, so it
//!   comes back and is counted, never lost;
//! - **abandoned**: shutdown came and the batch could not commit within
//!   `shutdown_timeout_ms`; it is NAKed so another instance gets it at once (a message on
//!   its last allowed delivery is dead-lettered instead, as the server would drop it).
//!
//! Throughput: while a batch is written, the next one is pulled and prepared by a
//! background task, and the ACKs of a committed batch are sent by another while the next
//! batch is written. The next pull only starts while the destination is healthy, so a
//! failing destination holds at most the batch in hand and one pulled ahead, both kept
//! alive with progress acknowledgements.
//!
//! A message whose outcome code never runs (a panic, a killed process) is simply never
//! ACKed: JetStream redelivers it after AckWait.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use async_nats::Subject;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::acks::Acks;
use super::batch::{Batch, Prepared, Refused, RefusedBy, Stages};
use super::disposal::Disposal;
use super::lanes;
use super::randomizer::Window;
use super::retry::backoff;
use crate::config::SinkSpec;
use crate::dlq::{DeadLetters, Reason};
use crate::envelope::Envelope;
use crate::health::SinkHealth;
use crate::metrics::SinkMetrics;
use crate::nats::{bind, fetch_any, fetch_batch, FetchLimits};
use crate::sinks::{Sink, SinkError};

/// Consecutive failed pulls after which the runner re-binds its consumer (it may have been
/// lost with a memory-storage server restart).
const REBIND_AFTER: u32 = 3;

/// Background ACK tasks allowed to run at once before the loop waits for the oldest.
const MAX_ACK_TASKS: usize = 2;

type PendingPull = JoinHandle<Result<Prepared, async_nats::Error>>;

/// Everything one sink's loop needs.
pub struct Runner {
    spec: SinkSpec,
    js: jetstream::Context,
    consumers: Vec<PullConsumer>,
    sink: Box<dyn Sink>,
    stages: Arc<Stages>,
    metrics: SinkMetrics,
    acks: Acks,
    health: SinkHealth,
    shutdown: watch::Receiver<bool>,
    shutdown_deadline: Option<Instant>,
    rng: StdRng,
    limits: FetchLimits,
    /// The next batch's pull, running while the current batch is written.
    pull_ahead: Option<PendingPull>,
    /// A batch pulled ahead and not yet written.
    waiting: Option<Prepared>,
    /// The last write committed; only then is the next batch pulled ahead.
    healthy: bool,
    /// ACKs of committed batches still being sent.
    ack_tasks: VecDeque<JoinHandle<()>>,
    /// What happens to messages that cannot be written.
    disposal: Disposal,
    /// Messages the randomizer delayed and that have not come back yet.
    window: Window,
    /// Origin of the window's millisecond clock.
    clock_origin: Instant,
    /// Per-lane consumer mode: the lane of each consumer.
    consumer_lanes: Option<Vec<usize>>,
    /// Lane weights, for taking turns across pulls.
    lane_weights: Vec<u32>,
    /// Position in the weighted cycle of lanes.
    lane_cursor: usize,
}

/// The JetStream side of a runner: the context (for ACKs and re-binding) and the bound
/// durable consumer.
pub struct Binding {
    /// JetStream context on the shared connection.
    pub js: jetstream::Context,
    /// The durable pull consumer, or one per random subject bucket.
    pub consumers: Vec<PullConsumer>,
}

/// Where a runner reports what it does.
pub struct Observers {
    /// Its metric handles.
    pub metrics: SinkMetrics,
    /// Its liveness and readiness entry.
    pub health: SinkHealth,
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
        binding: Binding,
        sink: Box<dyn Sink>,
        stages: Stages,
        dead_letters: Option<DeadLetters>,
        observers: Observers,
        shutdown: watch::Receiver<bool>,
    ) -> Runner {
        let Observers { metrics, health } = observers;
        let Binding { js, consumers } = binding;
        let ack_wait = Duration::from_millis(spec.source.ack_wait_ms);
        let consumer_lanes: Option<Vec<usize>> = spec
            .consumer_bindings()
            .into_iter()
            .map(|(_, lane)| lane)
            .collect();
        let lane_weights = spec
            .delivery
            .priority_lanes
            .lanes
            .iter()
            .map(|l| l.weight)
            .collect();
        let acks = Acks::new(&spec.name, js.client(), metrics.clone());
        let limits = FetchLimits {
            max_messages: spec.delivery.batch_size,
            max_bytes: spec.delivery.max_batch_bytes,
            wait: Duration::from_millis(spec.delivery.batch_timeout_ms),
        };
        Runner {
            disposal: Disposal::new(&spec, acks.clone(), metrics.clone(), dead_letters),
            spec,
            js,
            consumers,
            sink,
            stages: Arc::new(stages),
            metrics,
            acks,
            health,
            shutdown,
            shutdown_deadline: None,
            rng: StdRng::from_os_rng(),
            limits,
            pull_ahead: None,
            waiting: None,
            healthy: true,
            ack_tasks: VecDeque::new(),
            window: Window::new(ack_wait),
            clock_origin: Instant::now(),
            consumer_lanes,
            lane_weights,
            lane_cursor: usize::MAX,
        }
    }

    /// Applies the delayed-NAK randomizer to a prepared batch: some first deliveries are
    /// NAKed with a random delay and leave the batch; redeliveries always stay.
    async fn randomize(&mut self, batch: Batch) -> Batch {
        let Some(randomizer) = self.stages.randomizer.as_ref() else {
            return batch;
        };
        let now_ms = self.clock_origin.elapsed().as_millis() as u64;
        self.window.expire(now_ms);
        for e in &batch.envelopes {
            if self.window.observe(e.stream_sequence, e.delivered) {
                self.metrics.randomizer_redelivered.inc();
            }
        }
        let items: Vec<(Envelope, Subject)> =
            batch.envelopes.into_iter().zip(batch.replies).collect();
        let (kept, delayed) = randomizer.split(
            items,
            |(e, _)| e.delivered,
            self.window.len(),
            &mut self.rng,
        );
        let mut naks = Vec::with_capacity(delayed.len());
        for ((e, reply), delay) in delayed {
            self.window.delayed(e.stream_sequence, now_ms, delay);
            naks.push((reply, AckKind::Nak(Some(delay))));
        }
        self.metrics.randomizer_delayed.inc_by(naks.len() as u64);
        self.metrics.randomizer_window.set(self.window.len() as i64);
        if !naks.is_empty() {
            self.acks.send_each(naks).await;
        }
        let (envelopes, replies) = kept.into_iter().unzip();
        Batch { envelopes, replies }
    }

    fn stopping(&mut self) -> bool {
        if self.shutdown_deadline.is_none() && *self.shutdown.borrow() {
            self.shutdown_deadline = Some(
                Instant::now() + Duration::from_millis(self.spec.delivery.shutdown_timeout_ms),
            );
        }
        self.shutdown_deadline.is_some()
    }

    fn pull(&mut self) -> PendingPull {
        let stages = self.stages.clone();
        let limits = self.limits;
        if self.consumers.len() == 1 {
            let consumer = self.consumers[0].clone();
            return tokio::spawn(async move {
                let messages = fetch_batch(&consumer, limits).await?;
                Ok(stages.prepare(messages))
            });
        }
        let order = match &self.consumer_lanes {
            // Per-lane consumers: lanes take turns by weight across pulls.
            Some(lanes) => {
                self.lane_cursor = self.lane_cursor.wrapping_add(1);
                lanes::pull_order(lanes, &self.lane_weights, self.lane_cursor)
            }
            // Random subject buckets: visit them in a fresh random order each pull.
            None => {
                let mut order: Vec<usize> = (0..self.consumers.len()).collect();
                order.shuffle(&mut self.rng);
                order
            }
        };
        let consumers = self.consumers.clone();
        tokio::spawn(async move {
            let messages = fetch_any(&consumers, &order, limits).await?;
            Ok(stages.prepare(messages))
        })
    }

    /// Runs until shutdown is signalled and the batch in hand is settled.
    pub async fn run(mut self) {
        let name = self.spec.name.clone();
        tracing::info!(sink = %name, stream = %self.spec.source.stream, consumer = %self.spec.source.consumer, "sink running");
        let mut failed_pulls: u32 = 0;
        while !self.stopping() {
            self.health.beat();
            let pending = match self.waiting.take() {
                Some(ready) => Ok(ready),
                None => {
                    let handle = match self.pull_ahead.take() {
                        Some(h) => h,
                        None => self.pull(),
                    };
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        r = handle => r.unwrap_or_else(|e| Err(format!("pull task failed: {e}").into())),
                        _ = shutdown.wait_for(|s| *s) => break,
                    }
                }
            };
            let prepared = match pending {
                Ok(p) => {
                    failed_pulls = 0;
                    p
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
            if prepared.pulled == 0 {
                continue;
            }
            self.metrics.fetched.inc_by(prepared.pulled as u64);
            if let Some(stats) = &prepared.lanes {
                self.metrics.lanes(stats);
            }
            let Prepared { batch, refused, .. } = prepared;
            for r in refused {
                self.refuse_early(r).await;
            }
            let batch = self.randomize(batch).await;
            if batch.envelopes.is_empty() {
                continue;
            }
            self.metrics.inflight.set(batch.envelopes.len() as i64);
            if self.healthy && !self.stopping() {
                self.pull_ahead = Some(self.pull());
            }
            self.settle(batch).await;
            self.metrics.inflight.set(0);
        }
        self.finish().await;
        tracing::info!(sink = %name, "sink stopped");
    }

    /// At shutdown: lets the ACK tasks finish, and hands back what was pulled ahead and
    /// never written, so another instance can take it at once instead of after AckWait.
    async fn finish(&mut self) {
        while let Some(t) = self.ack_tasks.pop_front() {
            let _ = t.await;
        }
        if let Some(pending) = self.pull_ahead.take() {
            // A pull in flight returns at once (no-wait) or within the batch timeout.
            let wait = self.limits.wait + Duration::from_secs(1);
            if let Ok(Ok(Ok(p))) = tokio::time::timeout(wait, pending).await {
                self.waiting = Some(p);
            }
        }
        if let Some(p) = self.waiting.take() {
            self.acks
                .send(p.all_replies().cloned().collect(), AckKind::Nak(None))
                .await;
        }
    }

    async fn rebind(&mut self) {
        let mut consumers = Vec::with_capacity(self.consumers.len());
        for (source, _) in self.spec.consumer_bindings() {
            match bind(&self.js, &self.spec.name, &source).await {
                Ok(b) => consumers.push(b.consumer),
                Err(e) => {
                    self.health.set_bound(false);
                    tracing::warn!(sink = %self.spec.name, consumer = %source.consumer, error = %e, "re-binding the consumer failed");
                    return;
                }
            }
        }
        self.consumers = consumers;
        self.health.set_bound(true);
    }

    /// Sleeps, waking early for shutdown.
    async fn pause(&mut self, d: Duration) {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    }

    /// Gives every message of the batch its outcome.
    async fn settle(&mut self, batch: Batch) {
        let Batch { envelopes, replies } = batch;
        // Ranges still to write, in order; pushed in reverse so they pop in order.
        let mut todo: Vec<Range<usize>> = Vec::with_capacity(8);
        todo.push(0..envelopes.len());
        let mut isolated = false;
        while let Some(range) = todo.pop() {
            match self.write(&envelopes, &replies, range.clone()).await {
                Written::Committed => {
                    self.committed(&envelopes[range.clone()], &replies[range])
                        .await
                }
                Written::Abandoned => {
                    // Hand back this range and everything not yet written.
                    for r in std::iter::once(range).chain(todo.drain(..)) {
                        self.disposal
                            .abandoned(&envelopes[r.clone()], &replies[r])
                            .await;
                    }
                    self.metrics.batches_abandoned.inc();
                    tracing::info!(sink = %self.spec.name, "batch abandoned at shutdown; left for redelivery");
                    return;
                }
                Written::Refused { index, message } => {
                    isolated = true;
                    if range.len() == 1 {
                        let i = range.start;
                        self.disposal
                            .refused(&envelopes[i], &replies[i], Reason::Destination, &message)
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

    /// Records commit latency and hands the ACKs to a background task.
    async fn committed(&mut self, envelopes: &[Envelope], replies: &[Subject]) {
        let now = OffsetDateTime::now_utc();
        for e in envelopes {
            self.metrics
                .commit_lag
                .observe((now - e.published_at).as_seconds_f64().max(0.0));
        }
        while self.ack_tasks.len() >= MAX_ACK_TASKS {
            if let Some(t) = self.ack_tasks.pop_front() {
                let _ = t.await;
            }
        }
        let acks = self.acks.clone();
        let replies = replies.to_vec();
        self.ack_tasks
            .push_back(tokio::spawn(async move { acks.committed(replies).await }));
    }

    /// Writes `range` until it commits, is refused, or shutdown abandons it.
    async fn write(
        &mut self,
        envelopes: &[Envelope],
        replies: &[Subject],
        range: Range<usize>,
    ) -> Written {
        let part = &envelopes[range.clone()];
        let ack_wait = Duration::from_millis(self.spec.source.ack_wait_ms);
        let mut last_progress = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let started = Instant::now();
            // A write that runs longer than half of AckWait (a slow database) keeps its
            // messages, and a batch pulled ahead meanwhile, alive with +WPI.
            let keep = KeepAlive {
                acks: &self.acks,
                held: &replies[range.clone()],
                every: ack_wait / 2,
            };
            let result = alongside(
                self.sink.write_batch(part),
                &mut self.pull_ahead,
                &mut self.waiting,
                &self.spec.name,
                Some(keep),
            )
            .await;
            self.metrics
                .write_seconds
                .observe(started.elapsed().as_secs_f64());
            let err = match result {
                Ok(()) => {
                    if attempt > 0 {
                        tracing::info!(sink = %self.spec.name, attempts = attempt + 1, "destination recovered");
                    }
                    self.health.destination_ok();
                    self.healthy = true;
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
                    self.healthy = false;
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
                            let mut held: Vec<Subject> = replies[range.clone()].to_vec();
                            if let Some(w) = &self.waiting {
                                held.extend(w.all_replies().cloned());
                            }
                            self.acks.send(held, AckKind::Progress).await;
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
                        let watch_shutdown = self.shutdown_deadline.is_none();
                        let nap = async {
                            tokio::select! {
                                _ = tokio::time::sleep_until(until.max(now + Duration::from_millis(1))) => {}
                                _ = shutdown.wait_for(|s| *s), if watch_shutdown => {}
                            }
                        };
                        alongside(
                            nap,
                            &mut self.pull_ahead,
                            &mut self.waiting,
                            &self.spec.name,
                            None,
                        )
                        .await;
                    }
                }
            }
        }
    }

    /// A message refused before the write (metadata or lane rules).
    async fn refuse_early(&mut self, r: Refused) {
        let reason = match r.by {
            RefusedBy::Metadata => Reason::Metadata,
            RefusedBy::Lane => {
                self.metrics.lane_rejected.inc();
                Reason::Lane
            }
        };
        self.disposal
            .refused(&r.envelope, &r.reply, reason, &r.reason)
            .await;
    }
}

/// Progress acknowledgements sent while a write runs.
struct KeepAlive<'a> {
    acks: &'a Acks,
    /// The messages being written.
    held: &'a [Subject],
    every: Duration,
}

/// Polls `work` to completion while also collecting a background pull that finishes
/// meanwhile (so its messages can be kept alive during a long hold) and, with `keep`,
/// sending `+WPI` for the messages in hand every `keep.every`.
async fn alongside<F: Future>(
    work: F,
    pull_ahead: &mut Option<PendingPull>,
    waiting: &mut Option<Prepared>,
    sink: &str,
    keep: Option<KeepAlive<'_>>,
) -> F::Output {
    tokio::pin!(work);
    let mut next_tick = keep.as_ref().map(|k| Instant::now() + k.every);
    loop {
        let tick = async {
            match next_tick {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending::<()>().await,
            }
        };
        let pull = async {
            match pull_ahead.as_mut() {
                Some(p) => p.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            out = &mut work => return out,
            pulled = pull => {
                *pull_ahead = None;
                match pulled {
                    Ok(Ok(p)) => *waiting = Some(p),
                    Ok(Err(e)) => tracing::debug!(sink, error = %e, "pull ahead failed; pulling again later"),
                    Err(e) => tracing::error!(sink, error = %e, "pull-ahead task failed"),
                }
            }
            () = tick => {
                if let Some(k) = &keep {
                    let mut replies = k.held.to_vec();
                    if let Some(w) = waiting.as_ref() {
                        replies.extend(w.all_replies().cloned());
                    }
                    k.acks.send(replies, AckKind::Progress).await;
                    next_tick = Some(Instant::now() + k.every);
                }
            }
        }
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
