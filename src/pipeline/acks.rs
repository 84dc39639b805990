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
//! The `+WPI` keep-alive that uses it lives in `keeper.rs`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::client::FlushError;
use async_nats::jetstream::AckKind;
use async_nats::Subject;
use bytes::Bytes;
use tokio::task::JoinHandle;

use super::reconfirm::Recent;
use crate::pipeline::metrics::SinkMetrics;

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

/// Why queued acknowledgements were not pushed to the socket; logged with the sink's name.
#[derive(Debug, thiserror::Error)]
enum AckFlushError {
    /// The client refused the flush (the connection is closed).
    #[error("{0}")]
    Failed(FlushError),
    /// No flush within the bound, as while NATS is disconnected.
    #[error("no flush within {0:?}")]
    TimedOut(Duration),
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
    async fn flush(&self) -> Result<(), AckFlushError> {
        match tokio::time::timeout(self.flush_timeout, self.client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(AckFlushError::Failed(e)),
            Err(_) => Err(AckFlushError::TimedOut(self.flush_timeout)),
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
