//! What happens to a message that cannot be written: a dead-letter copy then ACK (or
//! TERM), or, without a dead-letter queue, a delayed NAK so it stays in the stream.
//!
//! The original is acknowledged only after the dead-letter stream acknowledged the copy.
//! If that publish fails, the message is handed back exactly as without a queue: it comes
//! back later, and a metric and a log line say why. Nothing is lost either way.
//!
//! Disposal decides and publishes copies (and, in job-queue mode, results); it does not
//! acknowledge. Each call answers with the acknowledgement to send, and the settler sends
//! it after the keep-alive let go of the message, so a message stays kept alive while its
//! copy is published, however long that takes.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_trait::async_trait;

use crate::config::SinkSpec;
use crate::dlq::{DeadLetters, PublishFailed, Reason};
use crate::envelope::Envelope;
use crate::jobs::ResultPublisher;
use crate::pipeline::metrics::SinkMetrics;

/// Where dead-letter copies go: the sink's [`DeadLetters`], or a fake in the runner's
/// tests. Called once per refused message, off the hot path.
#[async_trait]
pub(super) trait DeadLetterOut: Send + Sync {
    /// Publishes the copy of `e` and waits for the stream to store it.
    async fn publish(
        &self,
        e: &Envelope,
        class: &str,
        why: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed>;
}

#[async_trait]
impl DeadLetterOut for DeadLetters {
    async fn publish(
        &self,
        e: &Envelope,
        class: &str,
        why: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed> {
        DeadLetters::publish(self, e, class, why, reason).await
    }
}

/// When a message handed back (NAKed) comes again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Redelivery {
    /// When the consumer would redeliver it had it stayed unacknowledged: its backoff step
    /// for this delivery, else its AckWait — the lane document's "remains unacked and
    /// eligible for redelivery according to JetStream policy". The default.
    Consumer {
        /// `source.backoff_ms`.
        backoff: Vec<Duration>,
        /// `source.ack_wait_ms`.
        ack_wait: Duration,
    },
    /// A fixed delay, `delivery.retry.refused_delay_ms` (opt-in).
    Fixed(Duration),
}

impl Redelivery {
    /// The delay for a message refused on its `delivered`-th delivery. The server uses the
    /// backoff step of the delivery that was made (the last step for any later one).
    pub(super) fn after(&self, delivered: u64) -> Duration {
        match self {
            Redelivery::Fixed(d) => *d,
            Redelivery::Consumer { backoff, ack_wait } => {
                let step = usize::try_from(delivered.saturating_sub(1)).unwrap_or(usize::MAX);
                backoff
                    .get(step)
                    .or(backoff.last())
                    .copied()
                    .unwrap_or(*ack_wait)
            }
        }
    }
}

/// The numbers that decide a refused message's fate.
#[derive(Debug, Clone)]
pub(super) struct Policy {
    /// When a message handed back comes again.
    pub(super) redelivery: Redelivery,
    /// Deliveries a refused message gets before it is dead-lettered.
    pub(super) attempts: u64,
    /// The consumer's MaxDeliver (-1 = unlimited).
    pub(super) max_deliver: i64,
    /// TERM instead of ACK after the copy is stored.
    pub(super) term: bool,
}

impl Policy {
    /// The policy a sink's config describes.
    pub(super) fn for_sink(spec: &SinkSpec, dead_letters: Option<&DeadLetters>) -> Policy {
        let (attempts, term) = match dead_letters {
            Some(dl) => (
                dead_letter_from(dl.config().max_attempts, spec.source.max_deliver()),
                dl.config().ack_term_after_publish,
            ),
            None => (u64::MAX, false),
        };
        let redelivery = match spec.delivery.retry.refused_delay_ms {
            Some(ms) => Redelivery::Fixed(Duration::from_millis(ms)),
            None => Redelivery::Consumer {
                backoff: spec
                    .source
                    .backoff_ms
                    .iter()
                    .map(|ms| Duration::from_millis(*ms))
                    .collect(),
                ack_wait: Duration::from_millis(spec.source.ack_wait_ms()),
            },
        };
        Policy {
            redelivery,
            attempts,
            max_deliver: spec.source.max_deliver(),
            term,
        }
    }
}

/// The disposal policy of one sink.
#[derive(Clone)]
pub(super) struct Disposal {
    sink: Arc<str>,
    metrics: SinkMetrics,
    dead_letters: Option<Arc<dyn DeadLetterOut>>,
    policy: Policy,
    /// Job-queue mode: a dead-lettered job's result is stored before its ACK.
    results: Option<ResultPublisher>,
}

/// The delivery from which a refused message is dead-lettered: the configured attempts,
/// but never later than the consumer's last allowed delivery. Pure.
pub(super) fn dead_letter_from(max_attempts: u32, max_deliver: i64) -> u64 {
    let attempts = u64::from(max_attempts.max(1));
    if max_deliver > 0 {
        attempts.min(max_deliver as u64)
    } else {
        attempts
    }
}

impl Disposal {
    /// Disposal by `policy`.
    pub(super) fn new(
        sink: &str,
        policy: Policy,
        metrics: SinkMetrics,
        dead_letters: Option<Arc<dyn DeadLetterOut>>,
    ) -> Disposal {
        Disposal {
            sink: sink.into(),
            metrics,
            dead_letters,
            policy,
            results: None,
        }
    }

    /// Job-queue mode: publish a `dead_lettered` result before acknowledging a
    /// dead-lettered job.
    pub(super) fn set_results(&mut self, results: ResultPublisher) {
        self.results = Some(results);
    }

    /// A committed job whose result the results stream did not store: handed back (NAKed
    /// with the delay a refused message gets), so it comes again, is written again
    /// idempotently, and its result is published again. Never ACKed without a result.
    pub(super) fn result_failed(&self, e: &Envelope) -> AckKind {
        AckKind::Nak(Some(self.policy.redelivery.after(e.delivered)))
    }

    /// Whether `e` is on its last allowed delivery (the consumer's MaxDeliver): the server
    /// does not deliver it again, whether it is NAKed or left to AckWait, so it must not be
    /// handed back.
    pub(super) fn last_delivery(&self, e: &Envelope) -> bool {
        self.policy.max_deliver > 0 && e.delivered >= self.policy.max_deliver as u64
    }

    /// A message refused for good (by metadata, lane rules or the destination), with the
    /// error class its dead-letter copy carries (`permanent`, or `unclassified` for one
    /// whose unrecognised error outlasted `delivery.retry.max_held_ms`).
    pub(super) async fn refused(
        &self,
        e: &Envelope,
        reason: Reason,
        class: &str,
        why: &str,
    ) -> AckKind {
        if reason == Reason::Destination {
            self.metrics.poison_isolated.inc();
        }
        if self.dead_letters.is_some() && e.delivered >= self.policy.attempts {
            self.dead_letter(e, class, reason, why).await
        } else {
            self.hand_back(e, reason.as_str(), why)
        }
    }

    /// A job that asked to run again later (a per-message `Later` outcome): handed back
    /// with the sink's redelivery delay, or, on its last allowed delivery, dead-lettered
    /// (with a queue) since the server would not deliver it again.
    pub(super) async fn later(&self, e: &Envelope, why: &str) -> AckKind {
        if self.dead_letters.is_some() && self.last_delivery(e) {
            return self
                .dead_letter(e, "transient", Reason::LastDelivery, why)
                .await;
        }
        let delay = self.policy.redelivery.after(e.delivered);
        tracing::info!(
            sink = %self.sink,
            subject = %e.subject,
            stream = %e.stream,
            stream_sequence = e.stream_sequence,
            delivered = e.delivered,
            error = %why,
            "job handed back to run again in {}",
            format_delay(delay)
        );
        AckKind::Nak(Some(delay))
    }

    /// A message given up at shutdown: on its last allowed delivery it is dead-lettered
    /// (the server would drop it), otherwise NAKed at once for another instance.
    pub(super) async fn abandoned(&self, e: &Envelope) -> AckKind {
        if self.dead_letters.is_some() && self.last_delivery(e) {
            return self
                .dead_letter(
                    e,
                    "transient",
                    Reason::LastDelivery,
                    "not written before shutdown on its last allowed delivery",
                )
                .await;
        }
        AckKind::Nak(None)
    }

    async fn dead_letter(&self, e: &Envelope, class: &str, reason: Reason, why: &str) -> AckKind {
        let Some(dl) = &self.dead_letters else {
            return self.hand_back(e, reason.as_str(), why);
        };
        let delay = self.policy.redelivery.after(e.delivered);
        match dl.publish(e, class, why, reason).await {
            Ok(()) => {
                self.metrics.dlq.published(reason).inc();
                if let Some(results) = &self.results {
                    if !results.dead_lettered(e, why).await {
                        // The copy is stored (a second one is dropped by its id); the job
                        // comes back and its result is published then.
                        return AckKind::Nak(Some(delay));
                    }
                }
                tracing::warn!(
                    sink = %self.sink,
                    subject = %e.subject,
                    stream = %e.stream,
                    stream_sequence = e.stream_sequence,
                    delivered = e.delivered,
                    reason = reason.as_str(),
                    error = %why,
                    "message dead-lettered"
                );
                if self.policy.term {
                    self.metrics.dlq.terminated.inc();
                    AckKind::Term
                } else {
                    AckKind::Ack
                }
            }
            Err(err) => {
                self.metrics.dlq.failures.inc();
                tracing::error!(
                    sink = %self.sink,
                    stream_sequence = e.stream_sequence,
                    error = %err,
                    "dead-letter publish failed; the message stays unacked and will be redelivered"
                );
                AckKind::Nak(Some(delay))
            }
        }
    }

    /// No dead-letter queue (or attempts left): NAK with a delay, count, and log.
    fn hand_back(&self, e: &Envelope, stage: &str, why: &str) -> AckKind {
        self.metrics.rejected.inc();
        let last = self.last_delivery(e);
        let delay = self.policy.redelivery.after(e.delivered);
        tracing::error!(
            sink = %self.sink,
            subject = %e.subject,
            stream = %e.stream,
            stream_sequence = e.stream_sequence,
            delivered = e.delivered,
            stage,
            error = %why,
            last_delivery = last,
            "message refused; left unacked for redelivery in {}{}",
            format_delay(delay),
            if last {
                " (this was its last allowed delivery: without a dead-letter queue the server stops redelivering it)"
            } else {
                ""
            }
        );
        AckKind::Nak(Some(delay))
    }
}

/// `2s`, or `250ms` for a delay under a second.
fn format_delay(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1_000) {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_delivery_is_capped_by_max_deliver() {
        assert_eq!(dead_letter_from(1, -1), 1);
        assert_eq!(dead_letter_from(5, -1), 5);
        assert_eq!(dead_letter_from(10, 3), 3);
        assert_eq!(dead_letter_from(2, 3), 2);
        assert_eq!(dead_letter_from(0, 3), 1);
    }

    #[test]
    fn a_handed_back_message_comes_again_when_the_consumer_would_redeliver_it() {
        let secs = Duration::from_secs;
        let acks_only = Redelivery::Consumer {
            backoff: vec![],
            ack_wait: secs(30),
        };
        assert_eq!(acks_only.after(1), secs(30));
        assert_eq!(acks_only.after(7), secs(30));
        let stepped = Redelivery::Consumer {
            backoff: vec![secs(1), secs(5), secs(60)],
            ack_wait: secs(30),
        };
        assert_eq!(stepped.after(1), secs(1));
        assert_eq!(stepped.after(2), secs(5));
        assert_eq!(stepped.after(3), secs(60));
        assert_eq!(stepped.after(50), secs(60), "the last step repeats");
        assert_eq!(stepped.after(0), secs(1));
        assert_eq!(Redelivery::Fixed(secs(2)).after(9), secs(2));
        assert_eq!(format_delay(secs(2)), "2s");
        assert_eq!(format_delay(Duration::from_millis(250)), "250ms");
    }
}
