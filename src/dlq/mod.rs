//! The dead-letter queue: copies of refused messages, published to NATS with their error
//! context before the original is ACKed; and the listener for the server's max-deliveries
//! advisories. `jetsink dlq replay` lives with the other commands, in
//! [`crate::cmd::dlq_replay`].

pub mod advisory;
pub mod copy;
pub mod malformed;
pub mod metrics;

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use prometheus::IntCounter;
use time::OffsetDateTime;

use crate::config::dead_letter::DeadLetterConfig;
use crate::envelope::Envelope;
use crate::nats::own_stream::{self, CreateStreamFailed, OwnStream};

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
    /// `jetsink_dead_letter_payload_omitted_total` of the sink, once the runner set it.
    omitted: Option<IntCounter>,
}

/// Why one publish attempt of a copy failed.
enum SendFailed {
    /// The copy is too large for the server's `max_payload` or the stream's size limit.
    TooLarge(String),
    /// Anything else (no stream, no acknowledgement in time, a lost connection).
    Other(String),
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
            omitted: None,
        }
    }

    /// Counts copies published without their payload in `counter` (the sink's
    /// `jetsink_dead_letter_payload_omitted_total`).
    pub fn with_omitted_counter(mut self, counter: IntCounter) -> DeadLetters {
        self.omitted = Some(counter);
        self
    }

    /// The settings.
    pub fn config(&self) -> &DeadLetterConfig {
        &self.cfg
    }

    /// Creates the dead-letter stream when the config asks for it; `setting` is the JSON
    /// path of its `create_stream` section, for the error.
    pub async fn ensure_stream(&self, setting: String) -> Result<(), CreateStreamFailed> {
        let Some(cs) = &self.cfg.create_stream else {
            return Ok(());
        };
        let own = OwnStream {
            name: cs.name.clone(),
            subject: self.cfg.capture(&self.sink),
            storage: cs.storage,
            max_age: Duration::from_millis(cs.max_age_ms),
            replicas: cs.replicas,
            duplicate_window: Duration::from_millis(cs.duplicate_window_ms),
        };
        own_stream::ensure(&self.js, &own, &self.sink, "dead-letter", setting).await
    }

    /// Publishes the copy of `envelope` and waits for the stream to store it. A copy too
    /// large to publish whole — over the server's `max_payload` before it is sent, or
    /// refused by the server or the stream for its size — is published once more without
    /// its payload (header `Jetsink-Payload-Omitted`), and, should even that be too large,
    /// without the original's headers too: the copy is stored instead of the original
    /// being handed back forever.
    pub async fn publish(
        &self,
        envelope: &Envelope,
        class: &str,
        error: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed> {
        let at = OffsetDateTime::now_utc();
        self.publish_copy(
            |cfg| copy::build(cfg, &self.sink, envelope, class, error, reason.as_str(), at),
            envelope.clear_payload().len(),
            &envelope.stream,
            envelope.stream_sequence,
        )
        .await
    }

    /// Publishes the copy `build` makes from the sink's settings, falling back to one
    /// without its payload (`payload_len` bytes), then also without the original's
    /// headers, when it is too large to publish whole.
    async fn publish_copy(
        &self,
        build: impl Fn(&DeadLetterConfig) -> copy::Copy,
        payload_len: usize,
        stream: &str,
        sequence: u64,
    ) -> Result<(), PublishFailed> {
        let whole = build(&self.cfg);
        let max_payload = self.js.client().server_info().max_payload;
        let first = if whole.payload.is_empty() || copy::wire_size(&whole) <= max_payload {
            self.send(&whole).await
        } else {
            Err(SendFailed::TooLarge(format!(
                "the copy is {} bytes, over the server's max_payload of {max_payload}",
                copy::wire_size(&whole)
            )))
        };
        let why = match first {
            Ok(()) => return Ok(()),
            Err(SendFailed::Other(message)) => {
                return Err(PublishFailed {
                    subject: whole.subject,
                    message,
                })
            }
            Err(SendFailed::TooLarge(why)) => why,
        };
        let mut bare = copy::without_payload(whole, payload_len);
        if copy::wire_size(&bare) > max_payload {
            let mut cfg = self.cfg.clone();
            cfg.include_headers = false;
            bare = copy::without_payload(build(&cfg), payload_len);
        }
        tracing::warn!(sink = %self.sink, stream = %stream, stream_sequence = sequence, payload_bytes = payload_len, error = %why, "dead-letter copy too large; publishing it without its payload (Jetsink-Payload-Omitted)");
        match self.send(&bare).await {
            Ok(()) => {
                if let Some(c) = &self.omitted {
                    c.inc();
                }
                Ok(())
            }
            Err(SendFailed::TooLarge(m) | SendFailed::Other(m)) => Err(PublishFailed {
                subject: bare.subject,
                message: m,
            }),
        }
    }

    /// One publish of `c`, waiting for the stream's acknowledgement.
    async fn send(&self, c: &copy::Copy) -> Result<(), SendFailed> {
        let ack = match self
            .js
            .publish_with_headers(c.subject.clone(), c.headers.clone(), c.payload.clone())
            .await
        {
            Ok(ack) => ack,
            Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                return Err(SendFailed::TooLarge(e.to_string()))
            }
            Err(e) => return Err(SendFailed::Other(e.to_string())),
        };
        match tokio::time::timeout(Duration::from_millis(self.cfg.publish_timeout_ms), ack).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if refused_for_size(&e) => Err(SendFailed::TooLarge(e.to_string())),
            Ok(Err(e)) => Err(SendFailed::Other(e.to_string())),
            Err(_) => Err(SendFailed::Other(format!(
                "no acknowledgement within {} ms",
                self.cfg.publish_timeout_ms
            ))),
        }
    }
}

/// Whether the server or the stream refused a publish for its size: the core
/// "maximum payload" violation, or JetStream's "message size exceeds maximum allowed"
/// (error code 10054, a stream's `max_msg_size`).
fn refused_for_size(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if size_text(&err.to_string()) {
            return true;
        }
        next = err.source();
    }
    false
}

/// Whether an error text says a message was too large.
fn size_text(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("exceeds maximum") || t.contains("maximum payload") || t.contains("10054")
}

#[cfg(test)]
mod tests {
    use super::size_text;

    #[test]
    fn size_refusals_are_recognised_by_their_text() {
        for t in [
            "nats: message size exceeds maximum allowed (10054)",
            "Maximum Payload Violation",
            "jetstream error: message size exceeds maximum allowed",
        ] {
            assert!(size_text(t), "{t}");
        }
        for t in ["no responders", "timed out", "stream not found"] {
            assert!(!size_text(t), "{t}");
        }
    }
}
