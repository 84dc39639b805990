//! Sends acknowledgements for the runner: ACK after commit, `+WPI` while a batch is held,
//! NAK when a batch is handed back. Only the runner holds an [`Acks`], so only the runner
//! acknowledges.
//!
//! An acknowledgement is a publish to the message's `$JS.ACK` reply subject, queued in the
//! client and pushed to the socket by one flush per batch. A lost ACK only means a
//! redelivery, which the destination absorbs idempotently.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use bytes::Bytes;

use crate::metrics::SinkMetrics;

/// Acknowledgement sender of one sink; cheap to clone into a background task.
#[derive(Clone)]
pub struct Acks {
    sink: Arc<str>,
    client: async_nats::Client,
    metrics: SinkMetrics,
    flush_timeout: Duration,
}

impl Acks {
    /// An acknowledgement sender on `client`.
    pub fn new(sink: &str, client: async_nats::Client, metrics: SinkMetrics) -> Acks {
        Acks {
            sink: sink.into(),
            client,
            metrics,
            flush_timeout: Duration::from_secs(5),
        }
    }

    /// Sends `kind` for every reply subject and flushes once.
    pub async fn send(&self, replies: Vec<Subject>, kind: AckKind) {
        let body = Bytes::from(kind);
        for reply in replies {
            if let Err(err) = self.client.publish(reply, body.clone()).await {
                self.metrics.ack_errors.inc();
                tracing::debug!(sink = %self.sink, error = %err, "could not send {kind:?}");
            }
        }
        if let Err(err) = self.flush().await {
            tracing::debug!(sink = %self.sink, error = %err, "flush failed");
        }
    }

    /// Sends each message its own acknowledgement (e.g. NAKs with different delays) and
    /// flushes once.
    pub async fn send_each(&self, items: Vec<(Subject, AckKind)>) {
        for (reply, kind) in items {
            if let Err(err) = self.client.publish(reply, Bytes::from(kind)).await {
                self.metrics.ack_errors.inc();
                tracing::debug!(sink = %self.sink, error = %err, "could not send {kind:?}");
            }
        }
        if let Err(err) = self.flush().await {
            tracing::debug!(sink = %self.sink, error = %err, "flush failed");
        }
    }

    /// ACKs committed messages and counts them.
    pub async fn committed(&self, replies: Vec<Subject>) {
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
