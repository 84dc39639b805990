//! Sends acknowledgements for the runner: ACK after commit, `+WPI` while a batch is held,
//! NAK when a batch is handed back. This module is private to the pipeline and only the
//! runner builds an [`Acks`], so only the runner acknowledges.
//!
//! An acknowledgement is a publish to the message's `$JS.ACK` reply subject, queued in the
//! client and pushed to the socket by one flush per batch. A lost ACK only means a
//! redelivery, which the destination absorbs idempotently; the last few committed batches
//! are remembered so that after a connection drop or a consumer leader change their ACKs
//! are confirmed again (`reconfirm.rs`), and such redeliveries stay rare.
//!
//! [`Acknowledger`] is the seam the runner's unit tests use: every call covers a batch of
//! reply subjects, and the runner is generic over it, so the hot path makes no dynamic call.
//! [`KeepAlive`] is the one `+WPI` clock, kept running across a long write and the hold
//! that follows a failed one. It ticks in a keeper task of its own, so it fires on time
//! even while a write blocks the runner's thread (file and SQLite, in `block_in_place`):
//! for the part being written and the parts of a split batch still waiting behind it, and
//! for a batch pulled ahead, which the pull task leaves where the keeper can see it.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use bytes::Bytes;
use prometheus::IntCounter;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::puller::Waiting;
use super::reconfirm::Recent;
use crate::metrics::SinkMetrics;

/// Background ACK tasks allowed to run at once before the loop waits for the oldest.
const MAX_ACK_TASKS: usize = 2;

/// Sends acknowledgements for whole batches of reply subjects. Implemented by [`Acks`] over
/// NATS, and by a recording fake in the runner's tests.
pub(super) trait Acknowledger: Clone + Send + Sync + 'static {
    /// ACKs committed messages and counts them in `jetsink_messages_acked_total`.
    fn committed(&self, replies: Vec<Subject>) -> impl Future<Output = ()> + Send;

    /// Sends one `kind` (a NAK, `+WPI`, TERM, or the ACK after a dead-letter copy) for
    /// every reply subject.
    fn send(&self, replies: Vec<Subject>, kind: AckKind) -> impl Future<Output = ()> + Send;

    /// NAKs each message with its own delay (the randomizer's delays differ).
    fn nak_each(&self, items: Vec<(Subject, Duration)>) -> impl Future<Output = ()> + Send;
}

/// Acknowledgement sender of one sink over NATS; cheap to clone into a background task.
#[derive(Clone)]
pub(super) struct Acks {
    sink: Arc<str>,
    client: async_nats::Client,
    metrics: SinkMetrics,
    flush_timeout: Duration,
    /// The last committed batches, confirmed again after a connection drop.
    recent: Arc<Recent>,
}

impl Acks {
    /// An acknowledgement sender on `client`.
    pub(super) fn new(
        sink: &str,
        client: async_nats::Client,
        metrics: SinkMetrics,
        recent: Arc<Recent>,
    ) -> Acks {
        Acks {
            sink: sink.into(),
            client,
            metrics,
            flush_timeout: Duration::from_secs(5),
            recent,
        }
    }

    /// Publishes one acknowledgement; a failure is counted and logged at debug level.
    async fn publish(&self, reply: Subject, kind: AckKind) {
        if let Err(err) = self.client.publish(reply, Bytes::from(kind)).await {
            self.metrics.ack_errors.inc();
            tracing::debug!(sink = %self.sink, error = %err, "could not send {kind:?}");
        }
    }

    /// Flushes after a batch of non-ACK acknowledgements, where a failure only delays a
    /// redelivery.
    async fn flush_quietly(&self) {
        if let Err(err) = self.flush().await {
            tracing::debug!(sink = %self.sink, error = %err, "flush failed");
        }
    }

    /// Pushes queued acknowledgements to the socket. Bounded: while NATS is disconnected
    /// a flush would wait for the reconnect, and the loop must stay responsive to shutdown.
    async fn flush(&self) -> Result<(), String> {
        match tokio::time::timeout(self.flush_timeout, self.client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no flush within {:?}", self.flush_timeout)),
        }
    }
}

impl Acknowledger for Acks {
    async fn committed(&self, replies: Vec<Subject>) {
        // Remembered before sending, so a drop while they are on the wire is covered.
        self.recent.remember(&replies);
        let body = Bytes::from(AckKind::Ack);
        let mut sent = 0u64;
        for reply in replies {
            match self.client.publish(reply, body.clone()).await {
                Ok(()) => sent += 1,
                Err(err) => {
                    self.metrics.ack_errors.inc();
                    tracing::warn!(sink = %self.sink, error = %err, "ACK not sent; the message will be redelivered and written idempotently");
                }
            }
        }
        if let Err(err) = self.flush().await {
            tracing::warn!(sink = %self.sink, error = %err, "flushing ACKs failed; unsent ACKs lead to idempotent redelivery");
        }
        self.metrics.acked.inc_by(sent);
    }

    async fn send(&self, replies: Vec<Subject>, kind: AckKind) {
        for reply in replies {
            self.publish(reply, kind).await;
        }
        self.flush_quietly().await;
    }

    async fn nak_each(&self, items: Vec<(Subject, Duration)>) {
        for (reply, delay) in items {
            self.publish(reply, AckKind::Nak(Some(delay))).await;
        }
        self.flush_quietly().await;
    }
}

/// The ACKs of committed batches, sent by background tasks while the next batch is
/// written; at most [`MAX_ACK_TASKS`] run at once.
pub(super) struct AckQueue<A: Acknowledger> {
    acks: A,
    tasks: VecDeque<JoinHandle<()>>,
}

impl<A: Acknowledger> AckQueue<A> {
    /// An empty queue sending through `acks`.
    pub(super) fn new(acks: A) -> AckQueue<A> {
        AckQueue {
            acks,
            tasks: VecDeque::new(),
        }
    }

    /// The acknowledger, for the NAKs and `+WPI` the runner sends in line.
    pub(super) fn acknowledger(&self) -> &A {
        &self.acks
    }

    /// Hands the ACKs of a committed range to a background task, first waiting for the
    /// oldest task when [`MAX_ACK_TASKS`] are running.
    pub(super) async fn committed(&mut self, replies: Vec<Subject>) {
        while self.tasks.len() >= MAX_ACK_TASKS {
            if let Some(t) = self.tasks.pop_front() {
                let _ = t.await;
            }
        }
        let acks = self.acks.clone();
        self.tasks
            .push_back(tokio::spawn(async move { acks.committed(replies).await }));
    }

    /// Waits for every ACK task to finish (at shutdown).
    pub(super) async fn drain(&mut self) {
        while let Some(t) = self.tasks.pop_front() {
            let _ = t.await;
        }
    }
}

/// What the keeper keeps alive while armed: a range of the batch in hand, and whatever
/// waits in the pull-ahead slot when a `+WPI` falls due.
struct Held {
    /// The reply subjects of the whole batch, shared with the settler without a copy.
    replies: Arc<Vec<Subject>>,
    /// The part being written.
    range: Range<usize>,
    /// The batch pulled ahead, filled by the pull task whenever it arrives.
    ahead: Waiting,
    /// When the next `+WPI` is due.
    due: Instant,
}

/// The one `+WPI` clock of a sink: a progress acknowledgement every half AckWait for the
/// messages in hand and a batch pulled ahead, from the moment a part's write starts until
/// it commits, is refused or is abandoned, across every attempt and every hold between
/// them, so the server never redelivers a batch jetsink still holds.
///
/// The clock runs in a keeper task of its own, not in the runner's: a write that blocks
/// its thread (file and SQLite, in `block_in_place`) cannot stop it. The runner arms it
/// before a part's first attempt and disarms it before acknowledging that part; per part
/// that is two uncontended locks and nothing per message. The keeper holds the lock while
/// it sends, so once [`KeepAlive::disarm`] returns no `+WPI` for that part can follow.
pub(super) struct KeepAlive<A: Acknowledger> {
    acks: A,
    every: Duration,
    /// Counts each `+WPI` round, so a slow destination shows on `/metrics`.
    sent: IntCounter,
    held: Arc<tokio::sync::Mutex<Option<Held>>>,
    /// The keeper, started by the first arming (that is where a runtime surely exists).
    keeper: Option<JoinHandle<()>>,
}

impl<A: Acknowledger> KeepAlive<A> {
    /// A clock sending through `acks` every `every` (half of AckWait).
    pub(super) fn new(acks: A, every: Duration, sent: IntCounter) -> KeepAlive<A> {
        KeepAlive {
            acks,
            every: every.max(Duration::from_millis(1)),
            sent,
            held: Arc::default(),
            keeper: None,
        }
    }

    /// Starts the clock for `replies[range]`: the first `+WPI` falls due `every` from now.
    pub(super) async fn arm(
        &mut self,
        replies: &Arc<Vec<Subject>>,
        range: Range<usize>,
        ahead: &Waiting,
    ) {
        *self.held.lock().await = Some(Held {
            replies: replies.clone(),
            range,
            ahead: ahead.clone(),
            due: Instant::now() + self.every,
        });
        if self.keeper.is_none() {
            let keeper = keep(
                self.acks.clone(),
                self.every,
                self.held.clone(),
                self.sent.clone(),
            );
            self.keeper = Some(tokio::spawn(keeper));
        }
    }

    /// Narrows what the clock keeps alive to `replies` (all of them) without moving the
    /// next `+WPI`: the messages of a per-message write still held after the others
    /// settled. An empty list disarms it. Waits for a `+WPI` being sent, like
    /// [`KeepAlive::disarm`].
    pub(super) async fn narrow(&self, replies: Vec<Subject>) {
        let mut held = self.held.lock().await;
        if replies.is_empty() {
            held.take();
        } else if let Some(h) = held.as_mut() {
            h.range = 0..replies.len();
            h.replies = Arc::new(replies);
        }
    }

    /// Stops the clock; waits for a `+WPI` being sent, so none follows the acknowledgement
    /// the caller sends next.
    pub(super) async fn disarm(&self) {
        self.held.lock().await.take();
    }
}

impl<A: Acknowledger> Drop for KeepAlive<A> {
    fn drop(&mut self) {
        if let Some(k) = &self.keeper {
            k.abort();
        }
    }
}

/// The keeper's loop. Unarmed, it looks every `every`, so an arming is noticed no later
/// than its first `+WPI` falls due; armed, it sleeps until that moment. No message from
/// the runner is needed to wake it.
async fn keep<A: Acknowledger>(
    acks: A,
    every: Duration,
    held: Arc<tokio::sync::Mutex<Option<Held>>>,
    sent: IntCounter,
) {
    loop {
        // Taken before looking, so an arming just after the look is still due no sooner.
        let now = Instant::now();
        let due = held.lock().await.as_ref().map(|h| h.due);
        match due {
            None => tokio::time::sleep_until(now + every).await,
            Some(due) if now < due => tokio::time::sleep_until(due).await,
            Some(_) => {
                let mut guard = held.lock().await;
                // Disarmed or re-armed while the lock was free: look again.
                let Some(h) = guard.as_mut().filter(|h| h.due <= Instant::now()) else {
                    continue;
                };
                let mut replies = h.replies[h.range.clone()].to_vec();
                h.ahead.replies_into(&mut replies);
                acks.send(replies, AckKind::Progress).await;
                sent.inc();
                h.due = Instant::now() + every;
            }
        }
    }
}
