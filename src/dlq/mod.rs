//! The dead-letter queue: copies of refused messages, published to NATS with their error
//! context before the original is ACKed; and the listener for the server's max-deliveries
//! advisories. `jetsink dlq replay` lives with the other commands, in
//! [`crate::cmd::dlq_replay`].

pub mod advisory;
pub mod copy;
pub mod malformed;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use time::OffsetDateTime;

use crate::config::dead_letter::DeadLetterConfig;
use crate::config::StorageKind;
use crate::envelope::Envelope;

/// Why a message was dead-lettered; the `reason` label of `jetsink_dlq_published_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its metadata broke the rules.
    Metadata,
    /// Its priority broke the lane policy.
    Lane,
    /// The destination refused it permanently.
    Destination,
    /// It was on its last allowed delivery when the batch had to be given up.
    LastDelivery,
    /// The server gave up on it (MAX_DELIVERIES advisory).
    MaxDeliveries,
    /// Its header block cannot be read by the NATS client.
    Malformed,
}

impl Reason {
    /// The label and header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Metadata => "metadata",
            Reason::Lane => "lane",
            Reason::Destination => "destination",
            Reason::LastDelivery => "last_delivery",
            Reason::MaxDeliveries => "max_deliveries",
            Reason::Malformed => "malformed",
        }
    }
}

/// Publishes dead-letter copies for one sink.
#[derive(Clone)]
pub struct DeadLetters {
    sink: String,
    cfg: DeadLetterConfig,
    js: jetstream::Context,
}

/// A failed dead-letter publish; the original stays unacked.
#[derive(Debug, thiserror::Error)]
#[error("dead-letter publish to {subject} failed: {message}")]
pub struct PublishFailed {
    /// The dead-letter subject.
    pub subject: String,
    /// Why.
    pub message: String,
}

impl DeadLetters {
    /// A publisher for `sink`'s dead letters.
    pub fn new(sink: &str, cfg: DeadLetterConfig, js: jetstream::Context) -> DeadLetters {
        DeadLetters {
            sink: sink.to_string(),
            cfg,
            js,
        }
    }

    /// The settings.
    pub fn config(&self) -> &DeadLetterConfig {
        &self.cfg
    }

    /// Creates the dead-letter stream when the config asks for it.
    pub async fn ensure_stream(&self) -> Result<(), String> {
        let Some(cs) = &self.cfg.create_stream else {
            return Ok(());
        };
        let cfg = stream::Config {
            name: cs.name.clone(),
            subjects: vec![self.cfg.capture(&self.sink)],
            storage: match cs.storage {
                StorageKind::File => stream::StorageType::File,
                StorageKind::Memory => stream::StorageType::Memory,
            },
            max_age: Duration::from_millis(cs.max_age_ms),
            num_replicas: cs.replicas,
            duplicate_window: Duration::from_millis(cs.duplicate_window_ms),
            ..Default::default()
        };
        self.js
            .get_or_create_stream(cfg)
            .await
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "sink {}: creating dead-letter stream {}: {e}",
                    self.sink, cs.name
                )
            })
    }

    /// Publishes the copy of `envelope` and waits for the stream to store it.
    pub async fn publish(
        &self,
        envelope: &Envelope,
        class: &str,
        error: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed> {
        let c = copy::build(
            &self.cfg,
            &self.sink,
            envelope,
            class,
            error,
            reason.as_str(),
            OffsetDateTime::now_utc(),
        );
        let fail = |message: String| PublishFailed {
            subject: c.subject.clone(),
            message,
        };
        let ack = self
            .js
            .publish_with_headers(c.subject.clone(), c.headers.clone(), c.payload.clone())
            .await
            .map_err(|e| fail(e.to_string()))?;
        match tokio::time::timeout(Duration::from_millis(self.cfg.publish_timeout_ms), ack).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(_) => Err(fail(format!(
                "no acknowledgement within {} ms",
                self.cfg.publish_timeout_ms
            ))),
        }
    }
}
