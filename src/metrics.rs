//! Every metric jetsink exports, in one registry, with one function per event.
//!
//! Names follow Prometheus conventions with the `jetsink_` prefix. The only labels are the
//! configured sink name, the configured connection name (a `connection_group` or a sink
//! name) and small fixed enums (`outcome`, `class`); never a subject,
//! message id or payload, so cardinality stays bounded whatever the traffic.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The process-wide registry and metric families.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    fetched: IntCounterVec,
    acked: IntCounterVec,
    batches: IntCounterVec,
    write_seconds: HistogramVec,
    errors: IntCounterVec,
    commit_lag: HistogramVec,
    inflight: IntGaugeVec,
    rejected: IntCounterVec,
    fetch_errors: IntCounterVec,
    ack_errors: IntCounterVec,
    progress_acks: IntCounterVec,
    acks_reconfirmed: IntCounterVec,
    lane_batches: IntCounterVec,
    lane_messages: IntCounterVec,
    lane_defaulted: IntCounterVec,
    lane_rejected: IntCounterVec,
    lanes_active: IntGaugeVec,
    dlq_published: IntCounterVec,
    dlq_failures: IntCounterVec,
    dlq_payload_omitted: IntCounterVec,
    terminated: IntCounterVec,
    poison_isolated: IntCounterVec,
    max_deliveries: IntCounterVec,
    terminated_advisories: IntCounterVec,
    randomizer_delayed: IntCounterVec,
    randomizer_redelivered: IntCounterVec,
    randomizer_window: IntGaugeVec,
    shuffle_buffered: IntGaugeVec,
    shuffle_flushes: IntCounterVec,
    rollover_buffered: IntGaugeVec,
    rollover_flushes: IntCounterVec,
    pinned: IntGaugeVec,
    nats_connected: IntGauge,
    nats_connection_up: IntGaugeVec,
    nats_reconnects: IntCounterVec,
    malformed: IntCounterVec,
    unreadable_scans: IntCounterVec,
    jobs_finished: IntCounterVec,
    result_failures: IntCounterVec,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    register(registry, Box::new(c.clone()), name);
    c
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["sink"])
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    register(registry, Box::new(g.clone()), name);
    g
}

fn histogram(registry: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), &["sink"])
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    register(registry, Box::new(h.clone()), name);
    h
}

fn register(registry: &Registry, c: Box<dyn prometheus::core::Collector>, name: &str) {
    // Names are constants of this module; a clash is a programming error found by the
    // unit test below, not something input can cause.
    registry
        .register(c)
        .unwrap_or_else(|e| panic!("metric {name} registered twice: {e}"));
}

const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Creates and registers every family.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = &registry;
        let inflight = IntGaugeVec::new(
            Opts::new(
                "jetsink_inflight_messages",
                "Messages fetched and not yet ACKed or released, per sink.",
            ),
            &["sink"],
        )
        .unwrap_or_else(|e| panic!("inflight gauge: {e}"));
        register(r, Box::new(inflight.clone()), "jetsink_inflight_messages");
        let nats_connected = IntGauge::new(
            "jetsink_nats_connected",
            "1 while the NATS connection is up, 0 while it is reconnecting.",
        )
        .unwrap_or_else(|e| panic!("connected gauge: {e}"));
        register(
            r,
            Box::new(nats_connected.clone()),
            "jetsink_nats_connected",
        );
        let nats_connection_up = IntGaugeVec::new(
            Opts::new(
                "jetsink_nats_connection_up",
                "1 while this NATS connection is up, 0 while it is reconnecting or closed, per connection (its group name, or the sink's name).",
            ),
            &["connection"],
        )
        .unwrap_or_else(|e| panic!("connection gauge: {e}"));
        register(
            r,
            Box::new(nats_connection_up.clone()),
            "jetsink_nats_connection_up",
        );
        let build = IntGaugeVec::new(
            Opts::new(
                "jetsink_build_info",
                "Always 1; the labels say which build runs.",
            ),
            &["version"],
        )
        .unwrap_or_else(|e| panic!("build info: {e}"));
        register(r, Box::new(build.clone()), "jetsink_build_info");
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);

        let lanes_active = IntGaugeVec::new(
            Opts::new(
                "jetsink_current_priority_lanes_active",
                "Configured lanes represented in the batch most recently scheduled.",
            ),
            &["sink"],
        )
        .unwrap_or_else(|e| panic!("lanes gauge: {e}"));
        register(
            r,
            Box::new(lanes_active.clone()),
            "jetsink_current_priority_lanes_active",
        );

        let randomizer_window = IntGaugeVec::new(
            Opts::new(
                "jetsink_randomizer_window",
                "Messages delayed by the randomizer and not yet redelivered.",
            ),
            &["sink"],
        )
        .unwrap_or_else(|e| panic!("randomizer gauge: {e}"));
        register(
            r,
            Box::new(randomizer_window.clone()),
            "jetsink_randomizer_window",
        );
        let shuffle_buffered = IntGaugeVec::new(
            Opts::new(
                "jetsink_shuffle_buffered",
                "Messages held in the shuffle buffer (delivery.shuffle), unacknowledged, waiting to be shuffled and written.",
            ),
            &["sink"],
        )
        .unwrap_or_else(|e| panic!("shuffle gauge: {e}"));
        register(
            r,
            Box::new(shuffle_buffered.clone()),
            "jetsink_shuffle_buffered",
        );
        let pinned = IntGaugeVec::new(
            Opts::new(
                "jetsink_pinned",
                "1 while this instance holds the pin of the sink's priority group (it is the active one of an active/standby pair), 0 while it stands by; only sinks with source.pinned.",
            ),
            &["sink"],
        )
        .unwrap_or_else(|e| panic!("pinned gauge: {e}"));
        register(r, Box::new(pinned.clone()), "jetsink_pinned");

        Metrics {
            randomizer_delayed: counter(
                r,
                "jetsink_randomizer_delayed_total",
                "First deliveries the randomizer NAKed with a random delay.",
                &["sink"],
            ),
            randomizer_redelivered: counter(
                r,
                "jetsink_randomizer_redelivered_total",
                "Delayed messages that came back and were processed.",
                &["sink"],
            ),
            randomizer_window,
            shuffle_buffered,
            shuffle_flushes: counter(
                r,
                "jetsink_shuffle_flushes_total",
                "Shuffle buffers handed to the destination, by reason: full (another pull could overflow it) or timer (its oldest message waited flush_ms).",
                &["sink", "reason"],
            ),
            rollover_buffered: gauge(
                r,
                "jetsink_rollover_buffered",
                "Messages held for the next object (s3 destination.rollover), unacknowledged, waiting to be written.",
            ),
            rollover_flushes: counter(
                r,
                "jetsink_rollover_flushes_total",
                "Rollover buffers written as one batch, by reason: full (another pull could take it past max_messages) or timer (its oldest message waited max_age_ms).",
                &["sink", "reason"],
            ),
            pinned,
            dlq_published: counter(
                r,
                "jetsink_dlq_published_total",
                "Dead-letter copies stored, by reason: metadata, lane, destination, last_delivery, max_deliveries.",
                &["sink", "reason"],
            ),
            dlq_failures: counter(
                r,
                "jetsink_dlq_publish_failures_total",
                "Dead-letter publishes that failed; the original stays unacked and is redelivered.",
                &["sink"],
            ),
            dlq_payload_omitted: counter(
                r,
                "jetsink_dead_letter_payload_omitted_total",
                "Dead-letter copies published without their payload because the copy would exceed the server's max_payload or the stream's size limit (header Jetsink-Payload-Omitted).",
                &["sink"],
            ),
            terminated: counter(
                r,
                "jetsink_messages_terminated_total",
                "Originals TERMed after their dead-letter copy was stored (ack_term_after_publish).",
                &["sink"],
            ),
            poison_isolated: counter(
                r,
                "jetsink_poison_isolated_total",
                "Messages the destination refused permanently, isolated from their batch.",
                &["sink"],
            ),
            max_deliveries: counter(
                r,
                "jetsink_max_deliveries_total",
                "MAX_DELIVERIES advisories: the server stopped redelivering a message.",
                &["sink"],
            ),
            terminated_advisories: counter(
                r,
                "jetsink_terminated_advisories_total",
                "MSG_TERMINATED advisories for the sink's consumer.",
                &["sink"],
            ),
            lane_batches: counter(
                r,
                "jetsink_priority_lane_batches_total",
                "Batches ordered by priority-lane scheduling.",
                &["sink"],
            ),
            lane_messages: counter(
                r,
                "jetsink_priority_lane_messages_total",
                "Messages evaluated by priority-lane scheduling.",
                &["sink"],
            ),
            lane_defaulted: counter(
                r,
                "jetsink_priority_lane_defaulted_total",
                "Messages sent to the default lane because their priority was missing or unknown.",
                &["sink"],
            ),
            lane_rejected: counter(
                r,
                "jetsink_priority_lane_rejected_total",
                "Messages rejected because their priority violated the lane policy.",
                &["sink"],
            ),
            lanes_active,
            fetched: counter(
                r,
                "jetsink_messages_fetched_total",
                "Messages received from JetStream, redeliveries included.",
                &["sink"],
            ),
            acked: counter(
                r,
                "jetsink_messages_acked_total",
                "Messages ACKed after their batch was committed.",
                &["sink"],
            ),
            batches: counter(
                r,
                "jetsink_batches_total",
                "Batches by outcome: committed, retried (transient failure), isolated (some messages rejected), abandoned (shutdown).",
                &["sink", "outcome"],
            ),
            write_seconds: histogram(
                r,
                "jetsink_sink_write_seconds",
                "Time of one write_batch call, commit included.",
                SECONDS.to_vec(),
            ),
            errors: counter(
                r,
                "jetsink_sink_errors_total",
                "Destination errors by class: transient, permanent, unclassified, misconfigured.",
                &["sink", "class"],
            ),
            commit_lag: histogram(
                r,
                "jetsink_commit_lag_seconds",
                "From the server storing a message to its batch committing.",
                SECONDS.to_vec(),
            ),
            inflight,
            rejected: counter(
                r,
                "jetsink_messages_rejected_total",
                "Refused messages handed back with a delayed NAK (no dead-letter copy), to be redelivered.",
                &["sink"],
            ),
            fetch_errors: counter(
                r,
                "jetsink_fetch_errors_total",
                "Failed pull requests (disconnects, server restarts, timeouts).",
                &["sink"],
            ),
            ack_errors: counter(
                r,
                "jetsink_ack_errors_total",
                "ACKs that could not be sent; the message will be redelivered and deduplicated.",
                &["sink"],
            ),
            acks_reconfirmed: counter(
                r,
                "jetsink_acks_reconfirmed_total",
                "ACKs of recently committed messages confirmed again, as requests the consumer answers, after the connection dropped.",
                &["sink"],
            ),
            progress_acks: counter(
                r,
                "jetsink_progress_acks_total",
                "In-progress acknowledgements (+WPI) sent to keep a batch held past half its AckWait (slow or retried writes).",
                &["sink"],
            ),
            nats_connected,
            nats_connection_up,
            nats_reconnects: counter(
                r,
                "jetsink_nats_reconnects_total",
                "Times a NATS connection was re-established after it dropped, per connection (its group name, or the sink's name).",
                &["connection"],
            ),
            malformed: counter(
                r,
                "jetsink_malformed_messages_total",
                "Messages whose header block the NATS client cannot read, found by reading them raw and dead-lettered or terminated.",
                &["sink"],
            ),
            unreadable_scans: counter(
                r,
                "jetsink_unreadable_scans_total",
                "Scans of a sink's outstanding messages for ones the NATS client cannot read, completed after its connection dropped.",
                &["sink"],
            ),
            jobs_finished: counter(
                r,
                "jetsink_jobs_finished_total",
                "Job results stored by the results stream before the job was acknowledged, by status: committed, dead_lettered.",
                &["sink", "status"],
            ),
            result_failures: counter(
                r,
                "jetsink_result_publish_failures_total",
                "Job results the results stream did not acknowledge; the job stays unacked and is redelivered.",
                &["sink"],
            ),
            registry,
        }
    }

    /// The handles of one sink, labelled once so the hot path does no label lookups.
    pub fn sink(&self, name: &str) -> SinkMetrics {
        let outcome = |o: &str| self.batches.with_label_values(&[name, o]);
        let class = |c: &str| self.errors.with_label_values(&[name, c]);
        SinkMetrics {
            fetched: self.fetched.with_label_values(&[name]),
            acked: self.acked.with_label_values(&[name]),
            batches_committed: outcome("committed"),
            batches_retried: outcome("retried"),
            batches_isolated: outcome("isolated"),
            batches_abandoned: outcome("abandoned"),
            write_seconds: self.write_seconds.with_label_values(&[name]),
            errors_transient: class("transient"),
            errors_permanent: class("permanent"),
            errors_unclassified: class("unclassified"),
            errors_misconfigured: class("misconfigured"),
            commit_lag: self.commit_lag.with_label_values(&[name]),
            inflight: self.inflight.with_label_values(&[name]),
            rejected: self.rejected.with_label_values(&[name]),
            fetch_errors: self.fetch_errors.with_label_values(&[name]),
            ack_errors: self.ack_errors.with_label_values(&[name]),
            progress_acks: self.progress_acks.with_label_values(&[name]),
            acks_reconfirmed: self.acks_reconfirmed.with_label_values(&[name]),
            lane_batches: self.lane_batches.with_label_values(&[name]),
            lane_messages: self.lane_messages.with_label_values(&[name]),
            lane_defaulted: self.lane_defaulted.with_label_values(&[name]),
            lane_rejected: self.lane_rejected.with_label_values(&[name]),
            lanes_active: self.lanes_active.with_label_values(&[name]),
            dlq_published: self.dlq_published.clone(),
            dlq_failures: self.dlq_failures.with_label_values(&[name]),
            dlq_payload_omitted: self.dlq_payload_omitted.with_label_values(&[name]),
            terminated: self.terminated.with_label_values(&[name]),
            poison_isolated: self.poison_isolated.with_label_values(&[name]),
            max_deliveries: self.max_deliveries.with_label_values(&[name]),
            terminated_advisories: self.terminated_advisories.with_label_values(&[name]),
            randomizer_delayed: self.randomizer_delayed.with_label_values(&[name]),
            randomizer_redelivered: self.randomizer_redelivered.with_label_values(&[name]),
            randomizer_window: self.randomizer_window.with_label_values(&[name]),
            shuffle: BufferMetrics::of(&self.shuffle_buffered, &self.shuffle_flushes, name),
            rollover: BufferMetrics::of(&self.rollover_buffered, &self.rollover_flushes, name),
            pinned: self.pinned.clone(),
            malformed: self.malformed.with_label_values(&[name]),
            unreadable_scans: self.unreadable_scans.with_label_values(&[name]),
            jobs_committed: self.jobs_finished.with_label_values(&[name, "committed"]),
            jobs_dead_lettered: self
                .jobs_finished
                .with_label_values(&[name, "dead_lettered"]),
            result_failures: self.result_failures.with_label_values(&[name]),
            name: name.to_string(),
        }
    }

    /// The registry, for gauge families kept beside the module that feeds them.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The handles of one NATS connection, `label` being its group or sink name.
    pub fn connection(&self, label: &str) -> ConnectionMetrics {
        ConnectionMetrics {
            up: self.nats_connection_up.with_label_values(&[label]),
            reconnects: self.nats_reconnects.with_label_values(&[label]),
        }
    }

    /// Records the NATS connection state.
    pub fn set_nats_connected(&self, up: bool) {
        self.nats_connected.set(i64::from(up));
    }

    /// The text exposition format served at `/metrics`.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// One sink's metric handles.
#[derive(Clone)]
pub struct SinkMetrics {
    /// Messages received.
    pub fetched: IntCounter,
    /// Messages ACKed.
    pub acked: IntCounter,
    /// Batches committed whole.
    pub batches_committed: IntCounter,
    /// Write attempts that failed transiently and were retried.
    pub batches_retried: IntCounter,
    /// Batches in which some messages were rejected.
    pub batches_isolated: IntCounter,
    /// Batches left for redelivery at shutdown.
    pub batches_abandoned: IntCounter,
    /// Duration of write_batch.
    pub write_seconds: Histogram,
    /// Transient destination errors.
    pub errors_transient: IntCounter,
    /// Permanent destination errors.
    pub errors_permanent: IntCounter,
    /// Destination errors nobody recognised (held, but only for `max_held_ms`).
    pub errors_unclassified: IntCounter,
    /// Configuration errors found by the destination.
    pub errors_misconfigured: IntCounter,
    /// Publish → commit latency.
    pub commit_lag: Histogram,
    /// Messages held.
    pub inflight: IntGauge,
    /// Messages rejected.
    pub rejected: IntCounter,
    /// Failed pulls.
    pub fetch_errors: IntCounter,
    /// Failed ACK sends.
    pub ack_errors: IntCounter,
    /// In-progress acknowledgements sent.
    pub progress_acks: IntCounter,
    /// ACKs confirmed again after a connection drop.
    pub acks_reconfirmed: IntCounter,
    /// Batches ordered by lanes.
    pub lane_batches: IntCounter,
    /// Messages evaluated by lanes.
    pub lane_messages: IntCounter,
    /// Messages defaulted to the default lane.
    pub lane_defaulted: IntCounter,
    /// Messages rejected by the lane policy.
    pub lane_rejected: IntCounter,
    /// Lanes present in the last scheduled batch.
    pub lanes_active: IntGauge,
    dlq_published: IntCounterVec,
    /// Failed dead-letter publishes.
    pub dlq_failures: IntCounter,
    /// Dead-letter copies published without their payload, too large to publish whole.
    pub dlq_payload_omitted: IntCounter,
    /// Originals TERMed after dead-lettering.
    pub terminated: IntCounter,
    /// Messages isolated as poison.
    pub poison_isolated: IntCounter,
    /// MAX_DELIVERIES advisories.
    pub max_deliveries: IntCounter,
    /// MSG_TERMINATED advisories.
    pub terminated_advisories: IntCounter,
    /// First deliveries delayed by the randomizer.
    pub randomizer_delayed: IntCounter,
    /// Delayed messages that came back.
    pub randomizer_redelivered: IntCounter,
    /// Current randomizer window.
    pub randomizer_window: IntGauge,
    /// The shuffler's buffer (`jetsink_shuffle_*`).
    pub shuffle: BufferMetrics,
    /// The s3 rollover buffer (`jetsink_rollover_*`).
    pub rollover: BufferMetrics,
    /// Messages found with a header block the client cannot read.
    pub malformed: IntCounter,
    /// Scans for such messages completed after a connection drop.
    pub unreadable_scans: IntCounter,
    /// Jobs whose `committed` result was stored (job-queue mode).
    pub jobs_committed: IntCounter,
    /// Jobs whose `dead_lettered` result was stored (job-queue mode).
    pub jobs_dead_lettered: IntCounter,
    /// Results the results stream did not acknowledge.
    pub result_failures: IntCounter,
    pinned: IntGaugeVec,
    name: String,
}

/// One sink's handles on a buffer of pulled batches: the shuffler's or the s3 rollover's,
/// kept apart so each is named for what the operator configured.
#[derive(Clone)]
pub struct BufferMetrics {
    /// Messages held.
    pub buffered: IntGauge,
    /// Flushes because another pull could overflow the buffer.
    pub flushed_full: IntCounter,
    /// Flushes by the timer.
    pub flushed_timer: IntCounter,
}

impl BufferMetrics {
    fn of(buffered: &IntGaugeVec, flushes: &IntCounterVec, name: &str) -> BufferMetrics {
        BufferMetrics {
            buffered: buffered.with_label_values(&[name]),
            flushed_full: flushes.with_label_values(&[name, "full"]),
            flushed_timer: flushes.with_label_values(&[name, "timer"]),
        }
    }
}

/// One NATS connection's metric handles.
#[derive(Clone)]
pub struct ConnectionMetrics {
    /// 1 while up.
    pub up: IntGauge,
    /// Reconnects after a drop.
    pub reconnects: IntCounter,
}

impl SinkMetrics {
    /// The `jetsink_pinned` gauge of this sink; only sinks with `source.pinned` create it,
    /// so a sink without one exports no such series.
    pub fn pinned(&self) -> IntGauge {
        self.pinned.with_label_values(&[self.name.as_str()])
    }

    /// The counter of dead-letter copies stored for `reason`.
    pub fn dlq_published(&self, reason: crate::dlq::Reason) -> IntCounter {
        self.dlq_published
            .with_label_values(&[self.name.as_str(), reason.as_str()])
    }

    /// Records one batch's lane scheduling. Rejections are counted where the refused
    /// message is handed back.
    pub fn lanes(&self, stats: &crate::pipeline::lanes::LaneStats) {
        self.lane_batches.inc_by(stats.batches);
        self.lane_messages.inc_by(stats.messages);
        self.lane_defaulted.inc_by(stats.defaulted);
        self.lanes_active.set(stats.active_lanes as i64);
    }

    /// Counts one destination error by its class.
    pub fn sink_error(&self, err: &crate::sinks::SinkError) {
        self.error_of(err.kind());
    }

    /// Counts one destination failure of `class`.
    pub fn error_of(&self, class: crate::sinks::ErrorClass) {
        use crate::sinks::ErrorClass;
        match class {
            ErrorClass::Transient => self.errors_transient.inc(),
            ErrorClass::Permanent => self.errors_permanent.inc(),
            ErrorClass::Unclassified => self.errors_unclassified.inc(),
            ErrorClass::Misconfigured => self.errors_misconfigured.inc(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_renders_with_the_sink_label() {
        let m = Metrics::new();
        let s = m.sink("orders");
        s.fetched.inc_by(3);
        s.batches_committed.inc();
        s.commit_lag.observe(0.01);
        m.set_nats_connected(true);
        let text = m.render();
        for name in [
            "jetsink_messages_fetched_total{sink=\"orders\"} 3",
            "jetsink_batches_total{outcome=\"committed\",sink=\"orders\"} 1",
            "jetsink_commit_lag_seconds_bucket",
            "jetsink_nats_connected 1",
            "jetsink_build_info{version=",
            "jetsink_inflight_messages{sink=\"orders\"} 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
