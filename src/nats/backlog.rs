//! The backlog of every bound consumer as gauges: how many messages wait in the stream,
//! how many are delivered and unacknowledged, how many are being redelivered, and how many
//! pulls wait in the server — read from consumer info at a bounded rate. The same answers
//! tell the sink whether its consumers are paused in the server.
//!
//! The randomizer document's practical advice is to monitor pending counts; with these
//! gauges that needs nothing outside jetsink: a backlog that keeps growing is an alert rule
//! (`deploy/prometheus-rules.yml`), not a second tool polling the server.

use std::time::Duration;

use async_nats::jetstream::consumer::{Info, PullConsumer};
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use tokio::sync::watch;

/// How often each consumer's info is read: often enough for a backlog alert measured in
/// minutes, rare enough that 64 sinks with many bucket consumers stay a trickle of API
/// requests.
pub const REFRESH: Duration = Duration::from_secs(5);
/// How often with a randomizer fed by the server's outstanding count
/// (`adaptive_source: "server"`): the count moves with every batch, and a second-old answer
/// is what the delay decisions can follow.
pub const SERVER_FED_REFRESH: Duration = Duration::from_secs(1);

/// The four gauge families, labelled by sink and consumer.
#[derive(Clone)]
pub struct BacklogGauges {
    pending: IntGaugeVec,
    ack_pending: IntGaugeVec,
    redelivered: IntGaugeVec,
    waiting: IntGaugeVec,
}

/// One consumer's four gauges.
#[derive(Clone)]
pub struct ConsumerGauges {
    pending: IntGauge,
    ack_pending: IntGauge,
    redelivered: IntGauge,
    waiting: IntGauge,
}

/// Why the gauges could not be registered (a name clash: a programming error).
#[derive(Debug, thiserror::Error)]
#[error("cannot register the consumer backlog gauges: {0}")]
pub struct RegisterError(#[from] prometheus::Error);

impl BacklogGauges {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<BacklogGauges, RegisterError> {
        let family = |name: &str, help: &str| -> Result<IntGaugeVec, RegisterError> {
            let g = IntGaugeVec::new(Opts::new(name, help), &["sink", "consumer"])?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        Ok(BacklogGauges {
            pending: family(
                "jetsink_consumer_pending_messages",
                "Messages in the stream matching the consumer and not yet delivered (consumer info num_pending).",
            )?,
            ack_pending: family(
                "jetsink_consumer_ack_pending_messages",
                "Messages delivered and not yet acknowledged (num_ack_pending).",
            )?,
            redelivered: family(
                "jetsink_consumer_redelivered_messages",
                "Unacknowledged messages delivered more than once (num_redelivered).",
            )?,
            waiting: family(
                "jetsink_consumer_waiting_pulls",
                "Pull requests waiting in the server (num_waiting).",
            )?,
        })
    }

    /// The gauges of one consumer of `sink`.
    pub fn consumer(&self, sink: &str, consumer: &str) -> ConsumerGauges {
        let labels = [sink, consumer];
        ConsumerGauges {
            pending: self.pending.with_label_values(&labels),
            ack_pending: self.ack_pending.with_label_values(&labels),
            redelivered: self.redelivered.with_label_values(&labels),
            waiting: self.waiting.with_label_values(&labels),
        }
    }
}

impl BacklogGauges {
    /// Removes every series of `sink` (a sink a reload removed), so its last values do
    /// not stay exported, and alert, as if it still had a backlog.
    pub fn forget(&self, sink: &str) {
        use prometheus::core::Collector;
        for family in [
            &self.pending,
            &self.ack_pending,
            &self.redelivered,
            &self.waiting,
        ] {
            let consumers: Vec<String> = family
                .collect()
                .iter()
                .flat_map(|f| f.get_metric().iter())
                .filter_map(|m| {
                    let label = |n: &str| {
                        m.get_label()
                            .iter()
                            .find(|l| l.name() == n)
                            .map(|l| l.value().to_string())
                    };
                    (label("sink").as_deref() == Some(sink))
                        .then(|| label("consumer"))
                        .flatten()
                })
                .collect();
            for consumer in consumers {
                let _ = family.remove_label_values(&[sink, &consumer]);
            }
        }
    }
}

impl ConsumerGauges {
    /// Sets the gauges from one consumer info answer.
    pub fn record(&self, info: &Info) {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.pending.set(clamp(info.num_pending));
        self.ack_pending.set(clamp(info.num_ack_pending as u64));
        self.redelivered.set(clamp(info.num_redelivered as u64));
        self.waiting.set(clamp(info.num_waiting as u64));
    }
}

/// Reads each consumer's info every `every` and records it, until `shutdown` turns true;
/// `also` is handed every answer (the sink's pause state reads it). A failed read keeps
/// the last values and is logged at debug level: the fetch path already reports an
/// unreachable server.
pub async fn watch(
    sink: String,
    mut consumers: Vec<(PullConsumer, ConsumerGauges)>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
    also: impl Fn(&Info) + Send,
) {
    loop {
        for (consumer, gauges) in &mut consumers {
            match consumer.info().await {
                Ok(info) => {
                    gauges.record(info);
                    also(info);
                }
                Err(e) => {
                    tracing::debug!(sink = %sink, error = %e, "consumer info for the backlog gauges failed")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn gauges_carry_the_four_counts_of_a_consumer_info_answer() {
        let registry = Registry::new();
        let gauges = BacklogGauges::register(&registry).unwrap();
        let info: Info = serde_json::from_value(serde_json::json!({
            "stream_name": "ORDERS", "name": "to-db", "created": "2026-01-01T00:00:00Z",
            "config": {"durable_name": "to-db", "ack_policy": "explicit", "deliver_policy": "all", "replay_policy": "instant"},
            "delivered": {"consumer_seq": 10, "stream_seq": 12},
            "ack_floor": {"consumer_seq": 4, "stream_seq": 5},
            "num_ack_pending": 6, "num_redelivered": 2, "num_waiting": 1, "num_pending": 40
        }))
        .unwrap();
        gauges.consumer("db", "to-db").record(&info);
        let text = {
            let mut buf = Vec::new();
            prometheus::TextEncoder::new()
                .encode(&registry.gather(), &mut buf)
                .unwrap();
            String::from_utf8(buf).unwrap()
        };
        for line in [
            "jetsink_consumer_pending_messages{consumer=\"to-db\",sink=\"db\"} 40",
            "jetsink_consumer_ack_pending_messages{consumer=\"to-db\",sink=\"db\"} 6",
            "jetsink_consumer_redelivered_messages{consumer=\"to-db\",sink=\"db\"} 2",
            "jetsink_consumer_waiting_pulls{consumer=\"to-db\",sink=\"db\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn registering_twice_is_an_error_not_a_panic() {
        let registry = Registry::new();
        BacklogGauges::register(&registry).unwrap();
        assert!(BacklogGauges::register(&registry).is_err());
    }

    #[test]
    fn a_forgotten_sink_exports_no_backlog_series_and_the_others_keep_theirs() {
        let registry = Registry::new();
        let gauges = BacklogGauges::register(&registry).unwrap();
        gauges.consumer("gone", "c1");
        gauges.consumer("gone", "c2");
        gauges.consumer("kept", "c1");
        gauges.forget("gone");
        let sinks: Vec<String> = registry
            .gather()
            .iter()
            .flat_map(|f| f.get_metric().iter())
            .flat_map(|m| m.get_label().iter())
            .filter(|l| l.name() == "sink")
            .map(|l| l.value().to_string())
            .collect();
        assert_eq!(
            sinks.len(),
            4,
            "one series per family for the kept sink: {sinks:?}"
        );
        assert!(sinks.iter().all(|s| s == "kept"), "{sinks:?}");
    }
}
