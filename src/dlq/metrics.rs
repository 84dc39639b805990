//! The dead-letter queue's metrics, per sink: copies stored by reason, publishes that
//! failed, copies without their payload, originals TERMed, and the server's advisories.

use prometheus::IntCounter;

use super::Reason;
use crate::metrics::Metrics;

/// One sink's dead-letter counters.
#[derive(Clone)]
pub struct DlqMetrics {
    metrics: Metrics,
    sink: String,
    /// Dead-letter publishes that failed (`jetsink_dlq_publish_failures_total`).
    pub failures: IntCounter,
    /// Copies published without their payload (`jetsink_dead_letter_payload_omitted_total`).
    pub payload_omitted: IntCounter,
    /// Originals TERMed after their copy was stored (`jetsink_messages_terminated_total`).
    pub terminated: IntCounter,
    /// MAX_DELIVERIES advisories (`jetsink_max_deliveries_total`).
    pub max_deliveries: IntCounter,
    /// MSG_TERMINATED advisories (`jetsink_terminated_advisories_total`).
    pub terminated_advisories: IntCounter,
}

impl DlqMetrics {
    /// The counters of `sink`.
    pub fn new(metrics: &Metrics, sink: &str) -> DlqMetrics {
        let s = [("sink", sink)];
        DlqMetrics {
            failures: metrics.counter(
                "jetsink_dlq_publish_failures_total",
                "Dead-letter publishes that failed; the original stays unacked and is redelivered.",
                &s,
            ),
            payload_omitted: metrics.counter(
                "jetsink_dead_letter_payload_omitted_total",
                "Dead-letter copies published without their payload because the copy would exceed the server's max_payload or the stream's size limit (header Jetsink-Payload-Omitted).",
                &s,
            ),
            terminated: metrics.counter(
                "jetsink_messages_terminated_total",
                "Originals TERMed after their dead-letter copy was stored (ack_term_after_publish).",
                &s,
            ),
            max_deliveries: metrics.counter(
                "jetsink_max_deliveries_total",
                "MAX_DELIVERIES advisories: the server stopped redelivering a message.",
                &s,
            ),
            terminated_advisories: metrics.counter(
                "jetsink_terminated_advisories_total",
                "MSG_TERMINATED advisories for the sink's consumer.",
                &s,
            ),
            metrics: metrics.clone(),
            sink: sink.to_string(),
        }
    }

    /// The counter of copies stored for `reason` (`jetsink_dlq_published_total`), created
    /// the first time a copy is stored for it.
    pub fn published(&self, reason: Reason) -> IntCounter {
        self.metrics.counter(
            "jetsink_dlq_published_total",
            "Dead-letter copies stored, by reason: metadata, lane, destination, last_delivery, max_deliveries.",
            &[("sink", self.sink.as_str()), ("reason", reason.as_str())],
        )
    }
}
