//! The per-sink loop, and the only code in jetsink that acknowledges messages.
//!
//! pull a bounded batch → prepare (normalize, metadata, lanes) → `write_batch` → ACK.
//!
//! Every message of a batch ends in exactly one outcome:
//! - **committed**: the destination said `Ok`, so the message is ACKed;
//! - **held**: the destination failed transiently, so the batch is kept and retried with
//!   capped, jittered backoff while no new batch is pulled (deliveries are not burnt);
//!   the sink's keeper sends `+WPI` (progress) for it, and for everything else held, at
//!   half the consumer's shortest redelivery interval, so the server does not redeliver
//!   it meanwhile;
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
//! batch is written. With a buffer stage (the shuffler, an s3 rollover) the next buffer
//! fills the same way while the parts of the flush before it are written. The next pull only starts while the destination is healthy, so a
//! failing destination holds at most the batch in hand and one pulled ahead, both kept
//! alive with progress acknowledgements.
//!
//! A message whose outcome code never runs (a panic, a killed process) is simply never
//! ACKed: JetStream redelivers it after AckWait.
//!
//! The parts: the [puller](super::puller) pulls ahead, the [delay stage](super::delay)
//! applies the randomizer, the [settler](super::settle) writes and settles, the
//! [keeper](super::keeper) keeps whatever is held alive, and the
//! [acknowledger](super::acks) sends every ACK, NAK and `+WPI`. This file wires them
//! into the loop.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::PullConsumer;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::watch;
use tokio::time::Instant;

use std::sync::Arc;

use async_nats::Subject;

use super::acks::{Acknowledger, Acks};
use super::batch::{Batch, Prepared, Stages};
use super::delay::DelayStage;
use super::disposal::{DeadLetterOut, Disposal, Policy};
use super::isolate::Isolator;
use super::keeper::Keeper;
use super::outstanding::Outstanding;
use super::puller::{Ahead, Pulled, Puller};
use super::reconfirm::{self, Recent};
use super::settle::{Settler, SettlerParts, Stop};
use crate::config::randomizer::AdaptiveSource;
use crate::config::SinkSpec;
use crate::dlq::DeadLetters;
use crate::health::SinkHealth;
use crate::nats::Drops;
use crate::pipeline::metrics::SinkMetrics;
use crate::sinks::Sink;

mod buffer;
mod buffer_stage;

use buffer_stage::Shuffle;

/// Everything one sink's loop needs.
pub struct Runner {
    puller: Puller,
    /// The next batch's pull, and a batch pulled ahead and not yet written.
    ahead: Ahead,
    /// The randomizer, when enabled.
    delay: Option<Delay>,
    /// The buffer stage: the shuffler's with `delivery.shuffle`, or a whole-batch one for
    /// a destination that accumulates (s3 `rollover`).
    shuffle: Option<Shuffle>,
    settler: Settler<Acks>,
    /// Finds and settles, after a connection drop, what the client cannot read.
    isolator: Isolator,
    stop: Stop,
    metrics: SinkMetrics,
    health: SinkHealth,
    /// Re-confirms the last committed batches' ACKs after a connection drop.
    reconfirm: tokio::task::JoinHandle<()>,
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.reconfirm.abort();
    }
}

/// The delay stage with the clock and rng the runner gives it.
struct Delay {
    stage: DelayStage,
    /// Origin of the window's millisecond clock.
    origin: Instant,
    rng: StdRng,
    /// The server's outstanding count, which the backlog watcher feeds: read by a stage
    /// fed by the server.
    outstanding: Outstanding,
}

/// The JetStream side of a runner: the context (for ACKs and re-binding), the bound
/// durable consumer, and the drop count of the connection under them.
pub struct Binding {
    /// JetStream context on the sink's connection.
    pub js: jetstream::Context,
    /// The durable pull consumer, or one per random subject bucket.
    pub consumers: Vec<PullConsumer>,
    /// How often that connection dropped: a drop sends the sink looking for a message the
    /// client cannot read.
    pub drops: Drops,
}

/// Where a runner reports what it does.
pub struct Observers {
    /// Its metric handles.
    pub metrics: SinkMetrics,
    /// Its liveness and readiness entry.
    pub health: SinkHealth,
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
        let Binding {
            js,
            consumers,
            drops,
        } = binding;
        // The keep-alive beats twice within the shortest time the server waits before it
        // redelivers: AckWait, or with `backoff_ms` the shortest step.
        let redelivery = spec.source.shortest_redelivery();
        let recent = std::sync::Arc::new(Recent::default());
        let acks = Acks::new(&spec.name, js.client(), metrics.clone(), recent.clone());
        let keeper = Keeper::new(acks.clone(), redelivery / 2, metrics.progress_acks.clone());
        let watched = consumers
            .iter()
            .map(|c| {
                let info = c.cached_info();
                (info.stream_name.clone(), info.name.clone())
            })
            .collect();
        let reconfirm = tokio::spawn(reconfirm::watch(
            spec.name.as_str().into(),
            js.client(),
            drops.clone(),
            watched,
            recent,
            metrics.acks_reconfirmed.clone(),
            redelivery,
        ));
        let policy = Policy::for_sink(&spec, dead_letters.as_ref());
        let isolator = Isolator::new(
            &spec.name,
            js.client(),
            drops.clone(),
            dead_letters.clone(),
            spec.source.max_ack_pending,
            metrics.clone(),
        );
        let dead_letters =
            dead_letters.map(|d| std::sync::Arc::new(d) as std::sync::Arc<dyn DeadLetterOut>);
        let disposal = Disposal::new(&spec.name, policy, metrics.clone(), dead_letters);
        let ahead = Ahead::new(&spec.name, keeper.slot());
        let parts = SettlerParts {
            name: spec.name.clone(),
            disposal,
            metrics: metrics.clone(),
            health: health.clone(),
            retry: spec.delivery.retry.clone(),
            keeper,
        };
        let Stages {
            prepare,
            randomizer,
        } = stages;
        let shuffle = Shuffle::for_sink(&spec, &metrics);
        let puller = Puller::new(
            spec,
            js,
            consumers,
            drops,
            prepare,
            metrics.clone(),
            health.clone(),
        );
        let spec = puller.spec();
        let server_fed = spec.delivery.randomizer.adaptive
            && spec.delivery.randomizer.adaptive_source == AdaptiveSource::Server;
        // The batch being written and those pulled ahead are this instance's.
        let own = spec
            .delivery
            .batch_size
            .saturating_mul(1 + puller.most_ahead());
        let delay = randomizer.map(|r| {
            let stage = DelayStage::new(r, spec.source.effective_ack_wait());
            Delay {
                stage: match server_fed {
                    true => stage.fed_by_server(own),
                    false => stage,
                },
                origin: Instant::now(),
                rng: StdRng::from_os_rng(),
                outstanding: Outstanding::default(),
            }
        });
        Runner {
            reconfirm,
            ahead,
            delay,
            shuffle,
            settler: Settler::new(sink, acks, parts),
            isolator,
            stop: Stop::new(
                shutdown,
                Duration::from_millis(spec.delivery.shutdown_timeout_ms),
            ),
            puller,
            metrics,
            health,
        }
    }

    /// Job-queue mode: each job's result is published, and stored by the results stream,
    /// before the job is acknowledged (committed or dead-lettered).
    pub fn with_results(mut self, results: Option<crate::jobs::ResultPublisher>) -> Runner {
        if let Some(r) = results {
            self.settler.set_results(r);
        }
        self
    }

    /// `delivery.batches_in_flight` 2: a second writer of the destination, opened, so the
    /// batch pulled ahead is written while the one in hand commits.
    pub fn with_second_writer(mut self, writer: Option<Box<dyn Sink>>) -> Runner {
        if let Some(w) = writer {
            let w = self.settler.second_writer(w);
            self.ahead.lend(w);
        }
        self
    }

    /// With `telemetry.otlp`: every message's write is traced with `tracer`.
    pub fn with_tracer(mut self, tracer: Option<crate::telemetry::SinkTracer>) -> Runner {
        if let Some(t) = tracer {
            self.settler.set_tracer(t);
        }
        self
    }

    /// For `jetsink replay`: a consumer that failed pulls is never bound again, since
    /// binding would recreate it from the sink's source settings, not the replay's start.
    pub fn without_rebinding(mut self) -> Runner {
        self.puller.never_rebind();
        self
    }

    /// The sink's pause state (consumer pause in the server), for the backlog watcher to
    /// feed from the consumer info it reads.
    pub fn pause(&self) -> crate::pipeline::pause::Pause {
        self.puller.pause().clone()
    }

    /// The server's outstanding count the randomizer decides by, for the backlog watcher
    /// to feed; `None` unless `adaptive_source` is `"server"`.
    pub fn outstanding(&self) -> Option<Outstanding> {
        self.delay
            .as_ref()
            .filter(|d| d.stage.wants_server_count())
            .map(|d| d.outstanding.clone())
    }

    /// The sink's name, for the supervisor's log when the loop fails.
    pub fn name(&self) -> &str {
        &self.puller.spec().name
    }

    /// Runs until shutdown is signalled and the batch in hand is settled.
    pub async fn run(mut self) {
        let spec = self.puller.spec();
        let name = spec.name.clone();
        tracing::info!(sink = %name, stream = %spec.source.stream, consumer = %spec.source.consumer, "sink running");
        while !self.stop.stopping() {
            self.health.beat();
            let by = self.shuffle.as_ref().and_then(Shuffle::deadline);
            let pulled = self
                .puller
                .next(&mut self.ahead, self.stop.receiver(), by)
                .await;
            // A pull cut short by a connection drop may hide a message the client cannot
            // read; it is found and settled at once, before the server redelivers it.
            self.isolator.after_pull(self.puller.consumers()).await;
            if let Some(created) = self.puller.bound_anew() {
                // The stream may have been deleted and created again meanwhile.
                self.settler.stream_created(created);
            }
            let mut first = None;
            let mut prepared = match pulled {
                Pulled::Batch(p) => p,
                Pulled::Written(writing) => {
                    let taken = self
                        .settler
                        .take_written(writing, &mut self.ahead, Some(&mut self.puller), &self.stop)
                        .await;
                    let Some((p, written)) = taken else {
                        continue;
                    };
                    first = Some(written);
                    p
                }
                Pulled::Failed => continue,
                Pulled::Stopped => break,
            };
            if !prepared.beyond.is_empty() {
                // Past a replay's stop bound: outside the replay, so acknowledged on the
                // replay's own consumer unwritten (the sink's consumer never sees it).
                let beyond = std::mem::take(&mut prepared.beyond);
                self.settler
                    .acknowledger()
                    .send(beyond, async_nats::jetstream::AckKind::Ack)
                    .await;
            }
            if prepared.pulled == 0 {
                // The shuffle buffer's timer may have ended the wait.
                self.shuffle_in(Batch::default()).await;
                continue;
            }
            self.metrics.fetched.inc_by(prepared.pulled as u64);
            if let Some(stats) = &prepared.lanes {
                self.metrics.lanes.record(stats);
            }
            let Prepared { batch, refused, .. } = prepared;
            if !refused.is_empty() {
                // In hand as the puller took it: the batch, then the refused ones.
                let n = batch.replies.len();
                let all: Vec<Subject> = batch
                    .replies
                    .iter()
                    .chain(refused.iter().map(|r| &r.reply))
                    .cloned()
                    .collect();
                for (k, r) in refused.into_iter().enumerate() {
                    self.settler.refuse_early(r, &all, n + k).await;
                }
            }
            let batch = self.randomize(batch).await;
            if self.shuffle.is_some() {
                self.shuffle_in(batch).await;
                continue;
            }
            if batch.envelopes.is_empty() {
                continue;
            }
            self.metrics.inflight.set(batch.envelopes.len() as i64);
            if self.settler.healthy() && !self.stop.stopping() {
                self.puller.pull_ahead(&mut self.ahead).await;
            }
            // Pulling goes on while it is written, for a second writer waiting.
            let puller = Some(&mut self.puller);
            self.settler
                .settle_pulling(batch, first, &mut self.ahead, puller, &mut self.stop)
                .await;
            self.metrics.inflight.set(0);
        }
        if let Some(writing) = self.ahead.take_writing() {
            // Written ahead when shutdown came: settled like any batch in hand, so what
            // committed is ACKed and the rest handed back.
            let taken = self
                .settler
                .take_written(writing, &mut self.ahead, Some(&mut self.puller), &self.stop)
                .await;
            if let Some((p, written)) = taken {
                self.settler
                    .settle(p.batch, Some(written), &mut self.ahead, &mut self.stop)
                    .await;
            }
        }
        // A pull in flight returns at once (no-wait) or within the batch timeout.
        let by = self
            .stop
            .finish_by(self.puller.wait() + Duration::from_secs(1));
        // The buffer is handed back after the pull in flight ended: a NAK while a pull
        // waits in the server would redeliver to that pull, and die with this process.
        self.settler
            .finish(&mut self.ahead, &mut self.stop, by)
            .await;
        self.hand_back_buffer(by).await;
        self.settler.drain_acks(by).await;
        self.puller.release_pin(by).await;
        tracing::info!(sink = %name, "sink stopped");
    }

    /// Applies the delayed-NAK randomizer to a prepared batch: some first deliveries are
    /// NAKed with a random delay and leave the batch; redeliveries always stay.
    async fn randomize(&mut self, batch: Batch) -> Batch {
        let Some(d) = self.delay.as_mut() else {
            return batch;
        };
        let now_ms = d.origin.elapsed().as_millis() as u64;
        let outstanding = d.outstanding.total();
        let (kept, delayed) = d.stage.apply(batch, now_ms, outstanding, &mut d.rng);
        self.metrics.randomizer_redelivered.inc_by(delayed.returned);
        self.metrics
            .randomizer_delayed
            .inc_by(delayed.naks.len() as u64);
        self.metrics.randomizer_window.set(delayed.window as i64);
        if !delayed.naks.is_empty() {
            // Let go of the delayed ones before their NAK: a `+WPI` after a delayed NAK
            // would move the redelivery back to AckWait.
            self.settler
                .keeper()
                .hold(Arc::new(kept.replies.clone()))
                .await;
            self.settler.acknowledger().nak_each(delayed.naks).await;
        }
        kept
    }
}
