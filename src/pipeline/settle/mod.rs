//! Settling a batch: every message ends ACKed once after its commit, handed back (NAK),
//! or dead-lettered — through one loop for every destination.
//!
//! A part of the batch (at first the whole of it) is written; each attempt gives each of
//! its messages a [`verdict`](verdict::Verdict): commit, later, refuse or hold — or, for a
//! part refused as a whole, a split. The loop then settles in that order: the committed
//! messages first (ACKed at once, so a slow refusal never makes the server redeliver
//! them), then those handed back or refused, one by one; what is held is retried with
//! backoff until it commits, is refused, or shutdown abandons it. A batch destination is
//! the case where all messages of a part share one verdict; a per-message destination
//! (the `exec` worker) gives each its own, and one failing job holds none of the others.
//!
//! Every message stays in the keeper's view ([`Keeper`]) until the moment its own
//! acknowledgement is sent, so it gets a `+WPI` at the keeper's cadence through every
//! write, hold, split and dead-letter publish.
//!
//! [`Settler`] is generic over the [`Acknowledger`] and holds the destination as a
//! [`Sink`] trait object, so its unit tests run it with a fake destination and a
//! recording acknowledger on tokio's paused clock.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::Subject;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::watch;
use tokio::time::Instant;

use super::acks::{AckQueue, Acknowledger};
use super::batch::Batch;
use super::disposal::Disposal;
use super::keeper::Keeper;
use super::puller::{Ahead, Puller};
use super::retry::{backoff, HeldBound, Suspects};
use crate::config::RetryConfig;
use crate::envelope::Envelope;
use crate::health::SinkHealth;
use crate::jobs::ResultPublisher;
use crate::pipeline::metrics::SinkMetrics;
use crate::sinks::{CutShort, Sink, SinkError, Written};
use crate::telemetry::{BatchSpans, Outcome, SinkTracer};

mod beside;
mod finish;
mod outcomes;
mod stop;
pub(super) mod verdict;
mod written;

use beside::Beside;
use stop::cut_at;
pub(super) use stop::Stop;
use verdict::Attempt;

/// The log target of the settler's lines (`destination failed; holding the batch`,
/// `destination recovered`, `batch abandoned at shutdown`): the module, as `tracing` names it.
pub(super) const LOG_TARGET: &str = module_path!();

/// How many messages refused as unclassified a settler remembers.
const SUSPECTS: usize = 1024;

/// Positions (in the batch) still to write, and whether they descend from a part that
/// failed unclassified for the whole bound (then an unclassified failure refuses at once).
#[derive(Debug, Clone)]
struct Part {
    positions: Vec<usize>,
    suspect: bool,
}

/// The first write of a batch written ahead: what it came to, and when it began.
pub(crate) struct FirstWrite {
    written: Written,
    began: SystemTime,
}

/// How the attempts of one part ended.
enum PartEnd {
    /// Every message of it is settled; whether one was refused.
    Settled { refused: bool },
    /// It was refused as a whole and split; the pieces are in the to-do list.
    Split,
    /// Shutdown's deadline passed while these positions were held.
    Abandoned(Vec<usize>),
}

/// The batch being settled: its envelopes, reply subjects and, in job-queue mode, job ids.
struct InHand {
    envelopes: Vec<Envelope>,
    replies: Arc<Vec<Subject>>,
    ids: Vec<String>,
    /// With `telemetry.otlp`: each message's span, from its first write to its outcome.
    spans: Option<BatchSpans>,
}

impl InHand {
    /// Ends the spans of the messages at `positions` (when traced).
    fn traced(&self, positions: impl IntoIterator<Item = usize>, outcome: Outcome<'_>) {
        if let Some(s) = &self.spans {
            s.end(positions, outcome);
        }
    }

    /// The envelopes at `positions`, borrowed when they are one run of the batch.
    fn part(&self, positions: &[usize]) -> Cow<'_, [Envelope]> {
        match (positions.first(), positions.last()) {
            (Some(&a), Some(&b)) if b + 1 - a == positions.len() => {
                Cow::Borrowed(&self.envelopes[a..=b])
            }
            _ => Cow::Owned(
                positions
                    .iter()
                    .map(|&p| self.envelopes[p].clone())
                    .collect(),
            ),
        }
    }
}

/// The writing and acknowledging side of one sink.
pub(super) struct Settler<A: Acknowledger> {
    name: Arc<str>,
    /// The destination's writer; with `delivery.batches_in_flight` 2, lent to the batch
    /// pulled ahead while the batch in hand waits for its write ahead, and the writer that
    /// wrote that batch taken instead.
    sink: Option<Box<dyn Sink>>,
    acks: AckQueue<A>,
    /// The sink's one `+WPI` clock, shared with the puller and the buffer stage.
    keeper: Keeper<A>,
    disposal: Disposal,
    metrics: SinkMetrics,
    health: SinkHealth,
    retry: RetryConfig,
    /// Backoff jitter.
    rng: StdRng,
    /// The last write reached the destination; only then is the next batch pulled ahead.
    healthy: bool,
    /// Messages recently refused as unclassified: a part holding one is not held for the
    /// whole bound again when it comes back.
    suspects: Suspects,
    /// Job-queue mode: each job's result is stored before its ACK. `None` keeps the
    /// plain path, which does no job work at all.
    results: Option<ResultPublisher>,
    /// Fired when the shutdown deadline passes during a write ([`CutShort`]).
    cut: watch::Sender<bool>,
    /// With `telemetry.otlp`: the sink's tracer. `None` does no tracing work at all.
    tracer: Option<SinkTracer>,
}

/// What a [`Settler`] is built from besides its destination and acknowledger.
pub(super) struct SettlerParts<A: Acknowledger> {
    pub(super) name: String,
    pub(super) disposal: Disposal,
    pub(super) metrics: SinkMetrics,
    pub(super) health: SinkHealth,
    pub(super) retry: RetryConfig,
    pub(super) keeper: Keeper<A>,
}

impl<A: Acknowledger> Settler<A> {
    /// A settler writing to an opened destination.
    pub(super) fn new(mut sink: Box<dyn Sink>, acks: A, parts: SettlerParts<A>) -> Settler<A> {
        let (cut, rx) = watch::channel(false);
        sink.cut_short_by(CutShort::new(rx));
        Settler {
            name: parts.name.into(),
            sink: Some(sink),
            acks: AckQueue::new(acks),
            keeper: parts.keeper,
            disposal: parts.disposal,
            metrics: parts.metrics,
            health: parts.health,
            retry: parts.retry,
            rng: StdRng::from_os_rng(),
            healthy: true,
            suspects: Suspects::new(SUSPECTS),
            results: None,
            cut,
            tracer: None,
        }
    }

    /// Readies a second writer of the same destination (`delivery.batches_in_flight` 2)
    /// for [`Ahead::lend`]: it is cut short by the same shutdown deadline as the first.
    pub(super) fn second_writer(&self, mut writer: Box<dyn Sink>) -> Box<dyn Sink> {
        writer.cut_short_by(CutShort::new(self.cut.subscribe()));
        writer
    }

    /// Traces every message's write with `tracer` (`telemetry.otlp`).
    pub(super) fn set_tracer(&mut self, tracer: SinkTracer) {
        self.tracer = Some(tracer);
    }

    /// Job-queue mode: publish every job's result, and wait for it to be stored, before
    /// the job is acknowledged.
    pub(super) fn set_results(&mut self, results: ResultPublisher) {
        self.disposal.set_results(results.clone());
        self.results = Some(results);
    }

    /// Tells the destination when its source stream was created, after binding anew
    /// ([`Sink::stream_created`]).
    pub(super) fn stream_created(&mut self, at: SystemTime) {
        if let Some(sink) = self.sink.as_mut() {
            sink.stream_created(at);
        }
    }

    /// Whether the last write reached the destination (a failing one gets no pull ahead).
    pub(super) fn healthy(&self) -> bool {
        self.healthy
    }

    /// The acknowledger, for the randomizer's NAKs and the hand-backs at shutdown.
    pub(super) fn acknowledger(&self) -> &A {
        self.acks.acknowledger()
    }

    /// The keep-alive, shared with the puller and the buffer stage.
    pub(super) fn keeper(&self) -> &Keeper<A> {
        &self.keeper
    }

    /// Gives every message of the batch its outcome. `first` is what its first write came
    /// to when it was written ahead ([`Settler::take_written`]); `None` writes it now.
    pub(super) async fn settle(
        &mut self,
        batch: Batch,
        first: Option<FirstWrite>,
        ahead: &mut Ahead,
        stop: &mut Stop,
    ) {
        self.settle_pulling(batch, first, ahead, None, stop).await;
    }

    /// [`Settler::settle`], pulling on with `puller` while the batch is written and a
    /// second writer waits for the batch after it ([`Beside`]).
    pub(super) async fn settle_pulling(
        &mut self,
        batch: Batch,
        first: Option<FirstWrite>,
        ahead: &mut Ahead,
        puller: Option<&mut Puller>,
        stop: &mut Stop,
    ) {
        let mut beside = Beside { ahead, puller };
        let Batch { envelopes, replies } = batch;
        let replies = Arc::new(replies);
        self.keeper.hold(replies.clone()).await;
        let mut hand = match self.results.clone() {
            None => InHand {
                envelopes,
                replies,
                ids: Vec::new(),
                spans: None,
            },
            // Job-queue mode: a job without a usable id is refused before it is written.
            Some(r) => self.sort_jobs(&r, envelopes, &replies).await,
        };
        if hand.envelopes.is_empty() {
            return;
        }
        hand.spans = self.tracer.as_ref().map(|t| t.batch(hand.envelopes.len()));
        let mut todo = vec![Part {
            positions: (0..hand.envelopes.len()).collect(),
            suspect: false,
        }];
        let mut isolated = false;
        let mut first = first;
        while let Some(part) = todo.pop() {
            match self
                .attempts(&hand, part, first.take(), &mut todo, &mut beside, stop)
                .await
            {
                PartEnd::Settled { refused } => isolated |= refused,
                PartEnd::Split => isolated = true,
                PartEnd::Abandoned(held) => {
                    let rest = todo.drain(..).flat_map(|p| p.positions);
                    let all: Vec<usize> = held.into_iter().chain(rest).collect();
                    self.abandon(&hand, &all).await;
                    self.metrics.batches_abandoned.inc();
                    tracing::info!(sink = %self.name, messages = all.len(), "batch abandoned at shutdown; left for redelivery");
                    return;
                }
            }
        }
        self.metrics
            .batch_messages
            .observe(hand.envelopes.len() as f64);
        if isolated {
            self.metrics.batches_isolated.inc();
        } else {
            self.metrics.batches_committed.inc();
        }
    }

    /// Writes one part until each of its messages is settled, it is split, or shutdown
    /// abandons what is held; `first`, when given, is its first attempt, already written.
    async fn attempts(
        &mut self,
        hand: &InHand,
        part: Part,
        mut first: Option<FirstWrite>,
        todo: &mut Vec<Part>,
        beside: &mut Beside<'_>,
        stop: &mut Stop,
    ) -> PartEnd {
        let Part {
            mut positions,
            suspect,
        } = part;
        let remembered = self.suspects.any_in(&hand.part(&positions));
        let mut bound = HeldBound::new(Duration::from_millis(self.retry.max_held_ms));
        let mut attempt: u32 = 0;
        let mut refused = false;
        loop {
            let written = if let Some(FirstWrite { written, began }) = first.take() {
                if let Some(s) = &hand.spans {
                    s.start(&hand.envelopes, &positions, began);
                    s.wrote(&positions, began, verdict::batch_error(&written).as_deref());
                }
                written
            } else {
                let envelopes = hand.part(&positions);
                let wall = hand.spans.as_ref().map(|s| {
                    let now = SystemTime::now();
                    s.start(&hand.envelopes, &positions, now);
                    (s, now)
                });
                let started = Instant::now();
                let written = self.write(&envelopes, beside, stop).await;
                self.metrics
                    .write_seconds
                    .observe(started.elapsed().as_secs_f64());
                if let Some((s, at)) = wall {
                    s.wrote(&positions, at, verdict::batch_error(&written).as_deref());
                }
                written
            };
            self.count_errors(&written);
            let out = verdict::unclassified(&written)
                && (suspect || remembered || bound.failed_at(Instant::now()));
            let verdicts = match verdict::judge(
                written,
                positions.len(),
                out,
                suspect || !remembered,
            ) {
                Attempt::Split {
                    index,
                    message,
                    class,
                    held_out,
                } => {
                    tracing::warn!(sink = %self.name, messages = positions.len(), error = %message, class = class.as_str(), "destination refused part of a batch; isolating");
                    for r in verdict::split(positions.len(), index).into_iter().rev() {
                        todo.push(Part {
                            positions: positions[r].to_vec(),
                            suspect: suspect || held_out,
                        });
                    }
                    return PartEnd::Split;
                }
                Attempt::Each(v) => v,
            };
            let (held, error) = self
                .settle_verdicts(hand, &positions, verdicts, stop, &mut refused)
                .await;
            let Some(error) = error else {
                self.health.destination_ok();
                if !self.healthy {
                    self.keeper.slot().set_failing(false).await;
                }
                self.healthy = true;
                if attempt > 0 {
                    tracing::info!(sink = %self.name, attempts = attempt + 1, "destination recovered");
                }
                return PartEnd::Settled { refused };
            };
            // The destination could not take some (or all): hold those, retry after backoff.
            self.metrics.batches_retried.inc();
            let message = error.to_string();
            self.health.destination_failed(&message);
            if self.healthy {
                self.keeper.slot().set_failing(true).await;
            }
            self.healthy = false;
            let delay = backoff(&self.retry, attempt, &mut self.rng);
            tracing::warn!(sink = %self.name, error = %message, messages = held.len(), attempt = attempt + 1, retry_in_ms = delay.as_millis() as u64, "destination failed; holding the batch");
            attempt = attempt.saturating_add(1);
            if self.hold(delay, beside.ahead, stop).await {
                return PartEnd::Abandoned(held);
            }
            positions = held;
        }
    }

    /// Writes a part, cutting it short when the shutdown deadline passes meanwhile, beside
    /// the pull ahead ([`Beside`]).
    async fn write(&mut self, part: &[Envelope], beside: &mut Beside<'_>, stop: &Stop) -> Written {
        let Some(sink) = self.sink.as_mut() else {
            // Only while a write ahead is awaited, which never writes through here.
            return Written::Batch(Err(SinkError::transient("no writer is free")));
        };
        let work = cut_at(&self.cut, stop.deadline_passed(), sink.write(part));
        let on = self.healthy && !stop.signalled();
        beside.run(on, stop, work).await
    }

    /// Holds the messages in hand for `delay` before the next attempt, beating the
    /// liveness heartbeat at least at the keeper's cadence (the keeper keeps them alive
    /// meanwhile). True when shutdown's deadline passed and they are to be abandoned.
    async fn hold(&mut self, delay: Duration, ahead: &mut Ahead, stop: &mut Stop) -> bool {
        let wake = Instant::now() + delay;
        let beat = self.keeper.every();
        loop {
            self.health.beat();
            if stop.expired() {
                return true;
            }
            let now = Instant::now();
            if now >= wake {
                return false;
            }
            let until = wake.min(now + beat).max(now + Duration::from_millis(1));
            ahead.alongside(stop.nap_until(until)).await;
        }
    }
}
