//! The puller: pulls the next batch in a background task while the current one is
//! written, over one consumer, random subject buckets or per-lane consumers, and binds its
//! consumers again after repeated failed pulls.
//!
//! It never acknowledges: what it pulled is prepared ([`Prepare`]) and handed to the runner,
//! or, at shutdown, handed back by the runner. [`Ahead`] holds the pull in flight and a
//! batch pulled ahead and not yet written. The pull task itself puts its batch into the
//! keeper's [`Slot`], so a batch that arrives while the runner's task is blocked in a
//! write is kept alive from that moment without the runner's help.
//!
//! A consumer paused in the server (`jetsink pause`) is not pulled; while all of them
//! are, the puller waits for the pause to end instead (`paused.rs`).

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;

use super::batch::{Prepare, Prepared};
use super::keeper::Slot;
use super::retry::backoff;
use super::room::Room;
use crate::config::SinkSpec;
use crate::health::SinkHealth;
use crate::nats::{fetch_any, fetch_each, fetch_strict, Drops, FetchLimits, Pin, Pulls};
use crate::pipeline::metrics::SinkMetrics;
use crate::pipeline::pause::Pause;

/// Consecutive failed pulls after which the runner re-binds its consumer (it may have been
/// lost with a memory-storage server restart).
pub(super) const REBIND_AFTER: u32 = 3;

mod ahead;
mod chain;
mod depth;
mod interleave;
mod order;
mod paused;
mod pinned;
mod rebind;

use ahead::PendingPull;
pub(super) use ahead::{Ahead, WriteTask};
use chain::{first_lane_batches, leave, leave_all, pull_next, visiting_order};
use depth::pull_depth;
pub(super) use depth::{PULL_DEPTH, SCHEDULED_DEPTH};
use interleave::interleave;
use order::Order;

/// What [`Puller::next`] got.
pub(super) enum Pulled {
    /// A prepared pull (possibly empty).
    Batch(Prepared),
    /// A pull being written ahead (`delivery.batches_in_flight` 2): it is the next batch,
    /// settled once its write ends.
    Written(WriteTask),
    /// The pull failed; it was counted, waited for and, if repeated, the consumers bound
    /// again.
    Failed,
    /// Shutdown came while waiting for the pull.
    Stopped,
}

/// The pulling side of one sink.
pub(super) struct Puller {
    spec: SinkSpec,
    js: jetstream::Context,
    consumers: Vec<PullConsumer>,
    prepare: Arc<Prepare>,
    limits: FetchLimits,
    /// The drop count of the connection, which ends a pull its connection dropped under.
    drops: Drops,
    /// The visiting order of the consumers and its rng, shared with the pull task, which
    /// draws the next order itself for each batch it pulls ahead.
    order: Arc<StdMutex<(Order, StdRng)>>,
    /// What the pulls of a single consumer carry from one to the next ([`Pulls`]: how the
    /// last came back, their reply inbox). Shared with the pull tasks, each pulling after
    /// the one before.
    pulls: Arc<StdMutex<Pulls>>,
    /// One consumer.
    single: bool,
    /// Buckets pulled all at once.
    concurrent: bool,
    /// Strict lane priority ([`fetch_strict`]).
    strict: bool,
    /// Consecutive failed pulls.
    failed: u32,
    /// A re-binding failed, so `/readyz` reports the consumer not bound until a pull
    /// succeeds again.
    unbound: bool,
    /// Bucket order and the backoff jitter after a failed pull.
    rng: StdRng,
    metrics: SinkMetrics,
    health: SinkHealth,
    /// With `source.pinned`: the pin this instance holds or waits for, whether it held it
    /// at the last pull, and the `jetsink_pinned` gauge.
    pinned: Option<Pinned>,
    /// Whether repeated failed pulls bind the consumers again (not for a replay's).
    rebinds: bool,
    /// After binding anew: when the stream was created, for [`Puller::bound_anew`].
    bound_anew: Option<SystemTime>,
    /// Which consumers are paused in the server.
    pause: Pause,
    /// What the slot takes before the pull task stops pulling ahead ([`pull_depth`]).
    room: Room,
}

/// This sink's side of an active/standby priority group.
struct Pinned {
    pin: Arc<Pin>,
    was_held: bool,
    gauge: prometheus::IntGauge,
}

impl Puller {
    /// A puller over bound consumers.
    pub(super) fn new(
        spec: SinkSpec,
        js: jetstream::Context,
        consumers: Vec<PullConsumer>,
        drops: Drops,
        prepare: Prepare,
        metrics: SinkMetrics,
        health: SinkHealth,
    ) -> Puller {
        let order = Order::for_sink(&spec, consumers.len());
        let (single, concurrent, strict) =
            (order.is_single(), order.concurrent(), order.is_strict());
        let limits = FetchLimits {
            max_messages: spec.delivery.batch_size,
            max_bytes: spec.delivery.max_batch_bytes,
            wait: Duration::from_millis(spec.delivery.batch_timeout_ms),
            linger: crate::pipeline::linger::for_sink(&spec, single),
        };
        let pinned = spec.source.pinned.as_ref().map(|p| {
            let gauge = metrics.pinned();
            gauge.set(0);
            tracing::info!(sink = %spec.name, group = %p.group, "active/standby: standing by until the server pins this instance");
            Pinned {
                pin: Arc::new(Pin::new(&p.group)),
                was_held: false,
                gauge,
            }
        });
        let names = consumers
            .iter()
            .map(|c| c.cached_info().name.clone())
            .collect();
        let pause = Pause::new(&spec.name, names, metrics.paused.clone(), health.clone());
        // MaxAckPending as the server has it: an existing consumer keeps its own.
        let max_ack_pending = consumers.first().map_or(spec.source.max_ack_pending, |c| {
            c.cached_info().config.max_ack_pending
        });
        let room = pull_depth(&spec, consumers.len(), max_ack_pending);
        Puller {
            spec,
            js,
            consumers,
            prepare: Arc::new(prepare),
            limits,
            drops,
            order: Arc::new(StdMutex::new((order, StdRng::from_os_rng()))),
            pulls: Arc::default(),
            single,
            concurrent,
            strict,
            failed: 0,
            unbound: false,
            rng: StdRng::from_os_rng(),
            metrics,
            health,
            pinned,
            rebinds: true,
            bound_anew: None,
            pause,
            room,
        }
    }

    /// The sink's pause state, which the backlog watcher also feeds.
    pub(super) fn pause(&self) -> &Pause {
        &self.pause
    }

    /// Failed pulls are retried on the same consumers, never followed by a new binding.
    pub(super) fn never_rebind(&mut self) {
        self.rebinds = false;
    }

    /// The most batches pulled ahead this sink can hold: the depth ([`pull_depth`]), and with strict lanes
    /// pulling two ahead one more, the next lane's batch pulled beside the probe that found
    /// the first lane's backlog beginning ([`fetch_strict`]).
    pub(super) fn most_ahead(&self) -> usize {
        self.room.batches + usize::from(self.strict && self.room.batches > 1)
    }

    /// The sink's config.
    pub(super) fn spec(&self) -> &SinkSpec {
        &self.spec
    }

    /// The bound consumers (they change when the puller binds again).
    pub(super) fn consumers(&self) -> &[PullConsumer] {
        &self.consumers
    }

    /// The batch timeout: a pull in flight returns within it.
    pub(super) fn wait(&self) -> Duration {
        self.limits.wait
    }

    /// Starts the next pull in the background, unless one is running or enough batches
    /// wait.
    pub(super) async fn pull_ahead(&mut self, ahead: &mut Ahead) {
        if self.pause.sink_paused().is_some() {
            return;
        }
        ahead.reap().await;
        if ahead.slot.may_pull(self.room).await {
            // A task that decided to pull no more is ending: it is left to end.
            ahead.pending = Some(self.spawn(ahead.slot.clone()).await);
        }
    }

    /// Runs `work` — a write, or the wait for a batch written ahead — while the batch pulled
    /// ahead is written ahead as soon as it is there and the next pull starts as soon as the
    /// slot is free (until `stopped`: a pull during shutdown would only be handed back):
    /// two writes and a pull in flight, so no write waits for a pull.
    pub(super) async fn alongside_writing<F: Future>(
        &mut self,
        ahead: &mut Ahead,
        stopped: impl Fn() -> bool,
        work: F,
    ) -> F::Output {
        tokio::pin!(work);
        loop {
            ahead.write_ahead().await;
            if !stopped() {
                self.pull_ahead(ahead).await;
            }
            let slot = ahead.slot.clone();
            tokio::select! {
                biased;
                out = &mut work => return out,
                () = ahead.collect() => {}
                // The pull task may go on to pull another batch after this one.
                () = slot.arrival() => {}
            }
        }
    }

    /// Starts a pull whose prepared batch goes into `into`.
    async fn spawn(&mut self, into: Slot) -> PendingPull {
        into.set_pulling(true).await;
        let prepare = self.prepare.clone();
        let limits = self.limits;
        let drops = self.drops.clone();
        let room = self.room;
        if self.single {
            let consumer = self.consumers[0].clone();
            let js = self.js.clone();
            let pin = self.pinned.as_ref().map(|p| p.pin.clone());
            let pulls = self.pulls.clone();
            let name = self.spec.name.clone();
            // Pulls batch after batch while the slot has room: the runner takes each as it
            // arrives, and the server goes on delivering the next meanwhile.
            return tokio::spawn(async move {
                loop {
                    let pin = pin.as_deref();
                    let pulled = pull_next(&js, &consumer, limits, &drops, pin, &pulls, &name);
                    if !leave(&into, &prepare, limits, room, pulled.await).await? {
                        return Ok(());
                    }
                }
            });
        }
        let consumers = self.consumers.clone();
        let js = self.js.clone();
        let order = visiting_order(&self.order, &consumers, &self.pause);
        if self.concurrent {
            let mut rng = StdRng::seed_from_u64(self.rng.random());
            return tokio::spawn(async move {
                let groups = match fetch_each(&js, &consumers, &order, limits, &drops).await {
                    Ok(g) => g,
                    Err(e) => {
                        into.set_pulling(false).await;
                        return Err(e);
                    }
                };
                into.put(
                    prepare.prepare(interleave(groups, &mut rng)),
                    Room::batches(1),
                    false,
                )
                .await;
                Ok(())
            });
        }
        let shared = self.order.clone();
        let pause = self.pause.clone();
        // Strict lanes ask the first lane together with the next while it answers empty,
        // when a batch more than the depth fits (see `pull_depth`).
        let strict = self.strict && room.batches > 1;
        tokio::spawn(async move {
            let mut order = order;
            let mut together = false;
            loop {
                let more = if strict {
                    let mut first_lane = 0;
                    let pulled = fetch_strict(&js, &consumers, &order, limits, &drops, together)
                        .await
                        .map(|p| {
                            together = p.first_empty;
                            first_lane = first_lane_batches(&order, p.first_empty);
                            p.batches
                        });
                    leave_all(&into, &prepare, limits, room, pulled, first_lane).await?
                } else {
                    let pulled = fetch_any(&js, &consumers, &order, limits, &drops).await;
                    leave(&into, &prepare, limits, room, pulled).await?
                };
                if !more {
                    return Ok(());
                }
                // Drawn now, as the runner would have drawn it: strict lanes still ask the
                // first lane first, and weighted turns and bucket orders go on turning.
                order = visiting_order(&shared, &consumers, &pause);
            }
        })
    }

    /// The next batch: one pulled ahead, the pull in flight, or a new pull. A failed pull
    /// is counted, logged and followed by the retry backoff; after [`REBIND_AFTER`] in a
    /// row the consumers are bound again.
    ///
    /// With `by` (the shuffle buffer's flush timer), it gives up waiting then: the pull
    /// stays in flight in `ahead`, and an empty batch is returned; at shutdown, too, the
    /// pull stays in `ahead`, for [`Ahead::finish`] to wait for.
    pub(super) async fn next(
        &mut self,
        ahead: &mut Ahead,
        shutdown: &mut watch::Receiver<bool>,
        by: Option<Instant>,
    ) -> Pulled {
        if let Some(writing) = ahead.take_writing() {
            // Taken from the slot before anything pulled since.
            if let Some(p) = self.pinned.as_mut() {
                p.note(&self.spec.name);
            }
            return Pulled::Written(writing);
        }
        let pulled = match ahead.slot.take().await {
            Some(ready) => {
                // The pull task may still be pulling a further batch ahead; it runs on.
                ahead.reap().await;
                Ok(ready)
            }
            None => {
                let pulling = ahead.slot.pulling().await;
                let mut handle = match ahead.pending.take() {
                    Some(h) if pulling => h,
                    _ if self.pause.sink_paused().is_some() => {
                        return self.while_paused(shutdown, by).await;
                    }
                    _ => self.spawn(ahead.slot.clone()).await,
                };
                loop {
                    let timer = async {
                        match by {
                            Some(by) => tokio::time::sleep_until(by).await,
                            None => std::future::pending().await,
                        }
                    };
                    let ended = tokio::select! {
                        r = &mut handle => Some(r.unwrap_or_else(|e| Err(format!("pull task failed: {e}").into()))),
                        () = ahead.slot.arrival() => None,
                        _ = shutdown.wait_for(|s| *s) => {
                            // Kept: the wind-down waits for it and hands back what it
                            // received, instead of leaving that to wait out AckWait (and a
                            // NAK of a held buffer must not reach a pull still waiting).
                            ahead.pending = Some(handle);
                            return Pulled::Stopped;
                        }
                        () = timer => {
                            ahead.pending = Some(handle);
                            return Pulled::Batch(Prepared::default());
                        }
                    };
                    let taken = ahead.slot.take().await;
                    match (ended, taken) {
                        // A batch arrived and the task pulls the next one ahead.
                        (None, Some(p)) => {
                            ahead.pending = Some(handle);
                            break Ok(p);
                        }
                        // Woken by a batch taken already: wait on.
                        (None, None) => {}
                        (Some(Ok(())), p) => break Ok(p.unwrap_or_default()),
                        // A pull after the first failed: the batch before it is good.
                        (Some(Err(e)), Some(p)) => {
                            tracing::debug!(sink = %self.spec.name, error = %e, "pull ahead failed; pulling again later");
                            break Ok(p);
                        }
                        (Some(Err(e)), None) => break Err(e),
                    }
                }
            }
        };
        if let Some(p) = self.pinned.as_mut() {
            p.note(&self.spec.name);
        }
        match pulled {
            Ok(p) => {
                self.failed = 0;
                if self.unbound {
                    // The consumer answered a pull: it is bound again, typically after
                    // the connection came back with the stream and consumer intact.
                    self.unbound = false;
                    self.health.set_bound(true);
                    tracing::info!(sink = %self.spec.name, "pulls succeed again; consumer bound");
                }
                Pulled::Batch(p)
            }
            Err(e) => {
                self.failed += 1;
                self.metrics.fetch_errors.inc();
                tracing::warn!(sink = %self.spec.name, error = %e, attempt = self.failed, "pull failed");
                let delay = backoff(&self.spec.delivery.retry, self.failed - 1, &mut self.rng);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.wait_for(|s| *s) => {}
                }
                if self.rebinds && self.failed >= REBIND_AFTER {
                    self.rebind().await;
                }
                Pulled::Failed
            }
        }
    }
}
