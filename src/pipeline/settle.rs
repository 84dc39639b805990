//! Settling a batch: write → commit → ACK; a permanent refusal splits the batch until the
//! culprits stand alone and disposes of them; a transient failure holds the batch and
//! retries it with backoff, kept alive with `+WPI`, until it commits or shutdown abandons
//! it. An unclassified failure is held the same way, but only for
//! `delivery.retry.max_held_ms`: then the part is split like a permanent refusal, its
//! parts are refused at their first unclassified failure (the whole part already failed
//! that way for the bound), and a message that still fails alone is disposed of as
//! `unclassified`.
//!
//! [`Settler`] is generic over the [`Acknowledger`] and holds the destination as the
//! existing [`Sink`] trait object, so its unit tests run it with a fake destination and a
//! recording acknowledger, on tokio's paused clock.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use rand::rngs::StdRng;
use rand::SeedableRng;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::time::Instant;

use super::acks::{AckQueue, Acknowledger, KeepAlive};
use super::batch::{Batch, Refused, RefusedBy};
use super::disposal::Disposal;
use super::puller::Ahead;
use super::retry::{backoff, HeldBound, Suspects};
use crate::config::RetryConfig;
use crate::dlq::Reason;
use crate::envelope::Envelope;
use crate::health::SinkHealth;
use crate::jobs::{ResultPublisher, INVALID_JOB_ID};
use crate::metrics::SinkMetrics;
use crate::sinks::{Output, Sink, SinkError};

mod each;

/// The shutdown signal of one runner, and the deadline it sets for the batch in hand.
pub(super) struct Stop {
    rx: watch::Receiver<bool>,
    deadline: Option<Instant>,
    /// `delivery.shutdown_timeout_ms`.
    timeout: Duration,
}

impl Stop {
    /// Watches `rx`; a batch still held `timeout` after the signal is abandoned.
    pub(super) fn new(rx: watch::Receiver<bool>, timeout: Duration) -> Stop {
        Stop {
            rx,
            deadline: None,
            timeout,
        }
    }

    /// Whether shutdown was signalled; the first time it is seen, the deadline starts.
    pub(super) fn stopping(&mut self) -> bool {
        if self.deadline.is_none() && *self.rx.borrow() {
            self.deadline = Some(Instant::now() + self.timeout);
        }
        self.deadline.is_some()
    }

    /// Whether the deadline for the batch in hand has passed.
    fn expired(&mut self) -> bool {
        self.stopping() && self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// When the wind-down after the loop must end: `wait` from now, but never later than
    /// [`FINISH_GRACE`] past the shutdown deadline, so the last ACKs and the NAK of the
    /// batch pulled ahead fit inside the process's own deadline (the largest
    /// `shutdown_timeout_ms` plus 5 s) instead of outliving it.
    pub(super) fn finish_by(&mut self, wait: Duration) -> Instant {
        let by = Instant::now() + wait;
        match self.deadline {
            Some(d) => by.min(d + FINISH_GRACE),
            None => by,
        }
    }

    /// The signal, for waits that end early at shutdown.
    pub(super) fn receiver(&mut self) -> &mut watch::Receiver<bool> {
        &mut self.rx
    }

    /// Sleeps until `until`, the deadline, or the signal, whichever comes first.
    fn nap_until(&self, until: Instant) -> impl Future<Output = ()> {
        let until = self.deadline.map_or(until, |d| until.min(d));
        let mut rx = self.rx.clone();
        let watch_signal = self.deadline.is_none();
        async move {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = rx.wait_for(|s| *s), if watch_signal => {}
            }
        }
    }
}

/// How long past its shutdown deadline a sink may still send the ACKs of committed
/// batches and hand back what it pulled ahead; well inside the 5 s the process adds to the
/// largest `shutdown_timeout_ms` before it gives up on its sinks.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// How a write attempt loop ended.
enum Written {
    Committed,
    Refused {
        index: Option<usize>,
        message: String,
        /// `permanent`, or `unclassified` when the bound on holding it passed.
        class: &'static str,
        /// The part failed unclassified for the whole bound: its parts are refused at
        /// their first unclassified failure.
        held_out: bool,
    },
    Abandoned,
}

/// A range still to write, and whether it is part of one that failed unclassified for the
/// whole bound (then an unclassified failure refuses it at once).
type Part = (Range<usize>, bool);

/// How many messages refused as unclassified a settler remembers.
const SUSPECTS: usize = 1024;

/// The writing and acknowledging side of one sink.
pub(super) struct Settler<A: Acknowledger> {
    name: Arc<str>,
    sink: Box<dyn Sink>,
    acks: AckQueue<A>,
    /// The `+WPI` clock of the part being written and the batch pulled ahead.
    keep: KeepAlive<A>,
    disposal: Disposal<A>,
    metrics: SinkMetrics,
    health: SinkHealth,
    retry: RetryConfig,
    /// Half of AckWait: how often a hold wakes to beat the liveness heartbeat.
    keep_every: Duration,
    /// Backoff jitter.
    rng: StdRng,
    /// The last write committed; only then is the next batch pulled ahead.
    healthy: bool,
    /// Messages recently refused as unclassified: a part holding one is not held for the
    /// whole bound again when it comes back.
    suspects: Suspects,
    /// Job-queue mode: each job's result is stored before its ACK. `None` keeps the
    /// plain path, which does no job work at all.
    results: Option<ResultPublisher>,
}

/// What a [`Settler`] is built from besides its destination and acknowledger.
pub(super) struct SettlerParts<A: Acknowledger> {
    pub(super) name: String,
    pub(super) disposal: Disposal<A>,
    pub(super) metrics: SinkMetrics,
    pub(super) health: SinkHealth,
    pub(super) retry: RetryConfig,
    pub(super) ack_wait: Duration,
}

impl<A: Acknowledger> Settler<A> {
    /// A settler writing to an opened destination.
    pub(super) fn new(sink: Box<dyn Sink>, acks: A, parts: SettlerParts<A>) -> Settler<A> {
        Settler {
            name: parts.name.into(),
            sink,
            keep: KeepAlive::new(
                acks.clone(),
                parts.ack_wait / 2,
                parts.metrics.progress_acks.clone(),
            ),
            acks: AckQueue::new(acks),
            disposal: parts.disposal,
            metrics: parts.metrics,
            health: parts.health,
            retry: parts.retry,
            keep_every: parts.ack_wait / 2,
            rng: StdRng::from_os_rng(),
            healthy: true,
            suspects: Suspects::new(SUSPECTS),
            results: None,
        }
    }

    /// Job-queue mode: publish every job's result, and wait for it to be stored, before
    /// the job is acknowledged.
    pub(super) fn set_results(&mut self, results: ResultPublisher) {
        self.disposal.set_results(results.clone());
        self.results = Some(results);
    }

    /// Whether the last write committed (a failing destination gets no pull ahead).
    pub(super) fn healthy(&self) -> bool {
        self.healthy
    }

    /// The acknowledger, for the randomizer's NAKs.
    pub(super) fn acknowledger(&self) -> &A {
        self.acks.acknowledger()
    }

    /// Gives every message of the batch its outcome.
    pub(super) async fn settle(&mut self, batch: Batch, ahead: &mut Ahead, stop: &mut Stop) {
        let Batch { envelopes, replies } = batch;
        // Job-queue mode: a job without a usable id is refused before it is written.
        let (envelopes, replies, ids) = match self.results.clone() {
            None => (envelopes, replies, Vec::new()),
            Some(r) => self.sort_jobs(&r, envelopes, replies).await,
        };
        if envelopes.is_empty() {
            return;
        }
        if self.sink.per_message() {
            return self.settle_each(envelopes, replies, ids, ahead, stop).await;
        }
        // Shared with the keep-alive's task for as long as a part is written.
        let replies = Arc::new(replies);
        // Ranges still to write, in order; pushed in reverse so they pop in order.
        let mut todo: Vec<Part> = Vec::with_capacity(8);
        todo.push((0..envelopes.len(), false));
        let mut isolated = false;
        while let Some((range, suspect)) = todo.pop() {
            let written = self
                .write(&envelopes, &replies, (range.clone(), suspect), ahead, stop)
                .await;
            match written {
                Written::Committed => {
                    let ids = ids.get(range.clone()).unwrap_or_default();
                    self.committed(&envelopes[range.clone()], &replies[range], ids, &[])
                        .await
                }
                Written::Abandoned => {
                    // Hand back this range and everything not yet written.
                    let rest = todo.drain(..).map(|(r, _)| r);
                    for r in std::iter::once(range).chain(rest) {
                        self.disposal
                            .abandoned(&envelopes[r.clone()], &replies[r])
                            .await;
                    }
                    self.metrics.batches_abandoned.inc();
                    tracing::info!(sink = %self.name, "batch abandoned at shutdown; left for redelivery");
                    return;
                }
                Written::Refused {
                    index,
                    message,
                    class,
                    held_out,
                } => {
                    isolated = true;
                    let suspect = suspect || held_out;
                    if range.len() == 1 {
                        let i = range.start;
                        if class == UNCLASSIFIED {
                            self.suspects.remember(&envelopes[i]);
                        }
                        self.disposal
                            .refused_as(
                                &envelopes[i],
                                &replies[i],
                                Reason::Destination,
                                class,
                                &message,
                            )
                            .await;
                        continue;
                    }
                    for part in split(range, index).into_iter().rev() {
                        todo.push((part, suspect));
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

    /// Records commit latency and hands the ACKs to a background task; in job-queue mode
    /// only once the results stream stored each job's result (`ids` are the job ids,
    /// `outputs` what a worker destination produced for each, or empty).
    async fn committed(
        &mut self,
        envelopes: &[Envelope],
        replies: &[Subject],
        ids: &[String],
        outputs: &[Option<Output>],
    ) {
        let now = OffsetDateTime::now_utc();
        for e in envelopes {
            self.metrics
                .commit_lag
                .observe((now - e.published_at).as_seconds_f64().max(0.0));
        }
        let Some(results) = &self.results else {
            return self.acks.committed(replies.to_vec()).await;
        };
        let jobs: Vec<(&Envelope, &str)> = envelopes
            .iter()
            .zip(ids)
            .map(|(e, id)| (e, id.as_str()))
            .collect();
        let stored = results.publish_committed(&jobs, outputs).await;
        if stored.iter().all(|s| *s) {
            return self.acks.committed(replies.to_vec()).await;
        }
        let mut ack = Vec::with_capacity(replies.len());
        let mut back = Vec::new();
        for ((e, r), ok) in envelopes.iter().zip(replies).zip(stored) {
            if ok {
                ack.push(r.clone());
            } else {
                back.push((e, r));
            }
        }
        self.disposal.result_failed(&back).await;
        self.acks.committed(ack).await;
    }

    /// Splits a batch into jobs with a usable id (kept, with their ids) and jobs without,
    /// which are refused with error class `invalid_job_id`.
    async fn sort_jobs(
        &mut self,
        results: &ResultPublisher,
        envelopes: Vec<Envelope>,
        replies: Vec<Subject>,
    ) -> (Vec<Envelope>, Vec<Subject>, Vec<String>) {
        let mut kept = (
            Vec::with_capacity(envelopes.len()),
            Vec::with_capacity(replies.len()),
            Vec::with_capacity(envelopes.len()),
        );
        for (e, r) in envelopes.into_iter().zip(replies) {
            match results.job_id(&e) {
                Ok(id) => {
                    kept.0.push(e);
                    kept.1.push(r);
                    kept.2.push(id);
                }
                Err(why) => {
                    self.disposal
                        .refused_as(&e, &r, Reason::Metadata, INVALID_JOB_ID, &why.to_string())
                        .await
                }
            }
        }
        kept
    }

    /// Writes `range` until it commits, is refused, or shutdown abandons it. Kept alive
    /// throughout: the range, the parts of a split batch still waiting behind it (they
    /// always lie after it), and a batch pulled ahead meanwhile — and no longer: the
    /// keep-alive stops before the caller acknowledges the range.
    async fn write(
        &mut self,
        envelopes: &[Envelope],
        replies: &Arc<Vec<Subject>>,
        (range, suspect): Part,
        ahead: &mut Ahead,
        stop: &mut Stop,
    ) -> Written {
        let unsettled = range.start..envelopes.len();
        self.keep.arm(replies, unsettled, ahead.waiting()).await;
        let part = &envelopes[range.clone()];
        let remembered = self.suspects.any_in(part);
        let written = self
            .attempts(part, (range, suspect), remembered, ahead, stop)
            .await;
        self.keep.disarm().await;
        written
    }

    /// The attempts of [`Settler::write`], and the holds between them.
    async fn attempts(
        &mut self,
        part: &[Envelope],
        (range, suspect): Part,
        remembered: bool,
        ahead: &mut Ahead,
        stop: &mut Stop,
    ) -> Written {
        let mut attempt: u32 = 0;
        let mut bound = HeldBound::new(Duration::from_millis(self.retry.max_held_ms));
        loop {
            let started = Instant::now();
            let result = ahead.alongside(self.sink.write_batch(part)).await;
            self.metrics
                .write_seconds
                .observe(started.elapsed().as_secs_f64());
            let err = match result {
                Ok(()) => {
                    if attempt > 0 {
                        tracing::info!(sink = %self.name, attempts = attempt + 1, "destination recovered");
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
                    tracing::warn!(sink = %self.name, messages = part.len(), error = %message, "destination refused part of a batch; isolating");
                    return Written::Refused {
                        index,
                        message,
                        class: "permanent",
                        held_out: false,
                    };
                }
                // A part of one held for the whole bound, or holding a message refused that
                // way before, is refused at once; any other part when the bound passes.
                SinkError::Unclassified { message }
                    if suspect || remembered || bound.failed_at(Instant::now()) =>
                {
                    tracing::warn!(sink = %self.name, messages = part.len(), error = %message, max_held_ms = self.retry.max_held_ms, "destination keeps failing with an error nobody recognised; isolating");
                    return Written::Refused {
                        index: None,
                        message,
                        class: UNCLASSIFIED,
                        held_out: suspect || !remembered,
                    };
                }
                SinkError::Transient { message }
                | SinkError::Unclassified { message }
                | SinkError::Misconfigured { message } => {
                    self.metrics.batches_retried.inc();
                    self.health.destination_failed(&message);
                    self.healthy = false;
                    let delay = backoff(&self.retry, attempt, &mut self.rng);
                    tracing::warn!(sink = %self.name, error = %message, attempt = attempt + 1, retry_in_ms = delay.as_millis() as u64, "destination failed; holding the batch");
                    attempt = attempt.saturating_add(1);
                    if self.hold(delay, ahead, stop).await {
                        return Written::Abandoned;
                    }
                }
            }
        }
    }

    /// Holds the messages in hand for `delay` before the next attempt, beating the
    /// liveness heartbeat at least every half AckWait (the keep-alive, armed by
    /// [`Settler::write`], goes on meanwhile). True when shutdown's deadline passed and
    /// the batch is to be abandoned.
    async fn hold(&mut self, delay: Duration, ahead: &mut Ahead, stop: &mut Stop) -> bool {
        let wake = Instant::now() + delay;
        loop {
            self.health.beat();
            if stop.expired() {
                return true;
            }
            let now = Instant::now();
            if now >= wake {
                return false;
            }
            let until = wake
                .min(now + self.keep_every)
                .max(now + Duration::from_millis(1));
            ahead.alongside(stop.nap_until(until)).await;
        }
    }

    /// A message refused before the write (metadata or lane rules).
    pub(super) async fn refuse_early(&mut self, r: Refused) {
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

    /// At shutdown: lets the ACK tasks finish, and hands back what was pulled ahead and
    /// never written, so another instance can take it at once instead of after AckWait.
    /// All of it ends by `by`; what is still unsent then is redelivered after AckWait.
    pub(super) async fn finish(&mut self, ahead: &mut Ahead, by: Instant) {
        if tokio::time::timeout_at(by, self.acks.drain())
            .await
            .is_err()
        {
            tracing::warn!(sink = %self.name, "ACKs still unsent at the shutdown deadline; those messages will be redelivered (idempotently)");
        }
        if let Some(p) = ahead.finish(by).await {
            let nak = self
                .acks
                .acknowledger()
                .send(p.all_replies().cloned().collect(), AckKind::Nak(None));
            if tokio::time::timeout_at(by, nak).await.is_err() {
                tracing::warn!(sink = %self.name, "no time left to hand back the batch pulled ahead; it is redelivered after AckWait");
            }
        }
    }
}

/// The error class of a message refused because its unclassified failure outlasted
/// `delivery.retry.max_held_ms`.
const UNCLASSIFIED: &str = "unclassified";

/// Splits a refused range: around the offending index when the destination named one,
/// otherwise in halves.
pub(super) fn split(range: Range<usize>, index: Option<usize>) -> Vec<Range<usize>> {
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
