//! The pipeline's metrics, per sink: what the runner pulls, writes, ACKs, holds, refuses,
//! randomizes, buffers and schedules by lane. Each metric is named here once, where its
//! handle is taken; the dead-letter and job-result counters the pipeline also feeds belong
//! to their modules ([`DlqMetrics`], [`JobMetrics`]) and ride along.

use prometheus::{Histogram, IntCounter, IntGauge};

use crate::dlq::metrics::DlqMetrics;
use crate::jobs::metrics::JobMetrics;
use crate::metrics::{Metrics, SECONDS};
use crate::pipeline::lanes::LaneStats;
use crate::sinks::{ErrorClass, SinkError};

/// Buckets of `jetsink_batch_messages`: 1-2-5 steps up to the largest `batch_size`.
const BATCH_MESSAGES: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
];

/// One sink's metric handles, labelled once so the hot path does no label lookups.
#[derive(Clone)]
pub struct SinkMetrics {
    /// Messages received (`jetsink_messages_fetched_total`).
    pub fetched: IntCounter,
    /// Messages ACKed after their commit (`jetsink_messages_acked_total`).
    pub acked: IntCounter,
    /// Batches committed whole (`jetsink_batches_total{outcome="committed"}`).
    pub batches_committed: IntCounter,
    /// Write attempts that failed transiently and were retried.
    pub batches_retried: IntCounter,
    /// Batches in which some messages were refused.
    pub batches_isolated: IntCounter,
    /// Batches left for redelivery at shutdown.
    pub batches_abandoned: IntCounter,
    /// Batches whose first write ran while the batch before was written
    /// (`jetsink_batches_written_ahead_total`, `delivery.batches_in_flight` 2).
    pub written_ahead: IntCounter,
    /// Duration of one write (`jetsink_sink_write_seconds`).
    pub write_seconds: Histogram,
    /// Messages per batch written, committed or with some refused
    /// (`jetsink_batch_messages`): how full the batches are at the rate the stream gets.
    pub batch_messages: Histogram,
    errors: [IntCounter; 4],
    /// Publish → commit latency (`jetsink_commit_lag_seconds`).
    pub commit_lag: Histogram,
    /// Messages in hand (`jetsink_inflight_messages`).
    pub inflight: IntGauge,
    /// Refused messages handed back (`jetsink_messages_rejected_total`).
    pub rejected: IntCounter,
    /// Failed pulls (`jetsink_fetch_errors_total`).
    pub fetch_errors: IntCounter,
    /// ACKs that could not be sent (`jetsink_ack_errors_total`).
    pub ack_errors: IntCounter,
    /// `+WPI` rounds sent (`jetsink_progress_acks_total`).
    pub progress_acks: IntCounter,
    /// ACKs confirmed again after a connection drop (`jetsink_acks_reconfirmed_total`).
    pub acks_reconfirmed: IntCounter,
    /// Messages the destination refused, isolated from their batch.
    pub poison_isolated: IntCounter,
    /// Messages delivered again that the destination already held, committed without being
    /// written again (`jetsink_sink_already_stored_total`).
    pub already_stored: IntCounter,
    /// Priority-lane scheduling.
    pub lanes: LaneMetrics,
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
    /// 1 while every consumer of the sink is paused in the server (`jetsink_paused`).
    pub paused: IntGauge,
    /// The sink's dead-letter counters.
    pub dlq: DlqMetrics,
    /// The sink's job-result counters (job-queue mode).
    pub jobs: JobMetrics,
    metrics: Metrics,
    name: String,
}

impl SinkMetrics {
    /// The handles of sink `name` in `metrics`.
    pub fn new(metrics: &Metrics, name: &str) -> SinkMetrics {
        let m = metrics;
        let s = [("sink", name)];
        let c = |n, help| m.counter(n, help, &s);
        let g = |n, help| m.gauge(n, help, &s);
        const BATCHES: &str = "Batches by outcome: committed, retried (transient failure), isolated (some messages rejected), abandoned (shutdown).";
        let batch = |o| {
            m.counter(
                "jetsink_batches_total",
                BATCHES,
                &[("sink", name), ("outcome", o)],
            )
        };
        const ERRORS: &str =
            "Destination errors by class: transient, permanent, unclassified, misconfigured.";
        let error = |class: ErrorClass| {
            m.counter(
                "jetsink_sink_errors_total",
                ERRORS,
                &[("sink", name), ("class", class.as_str())],
            )
        };
        SinkMetrics {
            fetched: c("jetsink_messages_fetched_total", "Messages received from JetStream, redeliveries included."),
            acked: c("jetsink_messages_acked_total", "Messages ACKed after their batch was committed."),
            batches_committed: batch("committed"),
            batches_retried: batch("retried"),
            batches_isolated: batch("isolated"),
            batches_abandoned: batch("abandoned"),
            written_ahead: c("jetsink_batches_written_ahead_total", "Batches written on the second writer while the batch before was written (delivery.batches_in_flight 2)."),
            write_seconds: m.histogram("jetsink_sink_write_seconds", "Time of one write call, commit included.", SECONDS, &s),
            batch_messages: m.histogram("jetsink_batch_messages", "Messages per batch written (committed, or with some messages refused).", BATCH_MESSAGES, &s),
            errors: [
                error(ErrorClass::Transient),
                error(ErrorClass::Permanent),
                error(ErrorClass::Unclassified),
                error(ErrorClass::Misconfigured),
            ],
            commit_lag: m.histogram("jetsink_commit_lag_seconds", "From the server storing a message to its batch committing.", SECONDS, &s),
            inflight: g("jetsink_inflight_messages", "Messages fetched and not yet ACKed or released, per sink."),
            rejected: c("jetsink_messages_rejected_total", "Refused messages handed back with a delayed NAK (no dead-letter copy), to be redelivered."),
            fetch_errors: c("jetsink_fetch_errors_total", "Failed pull requests (disconnects, server restarts, timeouts)."),
            ack_errors: c("jetsink_ack_errors_total", "ACKs that could not be sent; the message will be redelivered and deduplicated."),
            progress_acks: c("jetsink_progress_acks_total", "Rounds of in-progress acknowledgements (+WPI) for the messages the sink holds unacknowledged (being written, retried or dead-lettered, buffered, pulled ahead), sent at half the consumer's shortest redelivery interval."),
            acks_reconfirmed: c("jetsink_acks_reconfirmed_total", "ACKs of recently committed messages confirmed again, as requests the consumer answers, after the connection dropped."),
            poison_isolated: c("jetsink_poison_isolated_total", "Messages the destination refused permanently, isolated from their batch."),
            already_stored: c("jetsink_sink_already_stored_total", "Messages delivered again that the destination already held (an archive file or object of an earlier delivery, or another copy in the same write), committed and ACKed without being written again."),
            lanes: LaneMetrics::new(m, name),
            randomizer_delayed: c("jetsink_randomizer_delayed_total", "First deliveries the randomizer NAKed with a random delay."),
            randomizer_redelivered: c("jetsink_randomizer_redelivered_total", "Delayed messages that came back and were processed."),
            randomizer_window: g("jetsink_randomizer_window", "Messages delayed by the randomizer and not yet redelivered."),
            shuffle: BufferMetrics::shuffle(m, name),
            rollover: BufferMetrics::rollover(m, name),
            malformed: c("jetsink_malformed_messages_total", "Messages whose header block the NATS client cannot read, found by reading them raw and dead-lettered or terminated."),
            unreadable_scans: c("jetsink_unreadable_scans_total", "Scans of a sink's outstanding messages for ones the NATS client cannot read, completed after its connection dropped."),
            paused: g("jetsink_paused", "1 while every consumer of the sink is paused in the server (jetsink pause, nats-server 2.11+) and the sink pulls nothing, 0 otherwise."),
            dlq: DlqMetrics::new(m, name),
            jobs: JobMetrics::new(m, name),
            metrics: m.clone(),
            name: name.to_string(),
        }
    }

    /// The `jetsink_pinned` gauge of this sink; only sinks with `source.pinned` take it,
    /// so a sink without one exports no such series.
    pub fn pinned(&self) -> IntGauge {
        self.metrics.gauge(
            "jetsink_pinned",
            "1 while this instance holds the pin of the sink's priority group (it is the active one of an active/standby pair), 0 while it stands by; only sinks with source.pinned.",
            &[("sink", self.name.as_str())],
        )
    }

    /// Counts one destination error by its class.
    pub fn sink_error(&self, err: &SinkError) {
        self.error_of(err.kind());
    }

    /// Counts one destination failure of `class`.
    pub fn error_of(&self, class: ErrorClass) {
        let i = match class {
            ErrorClass::Transient => 0,
            ErrorClass::Permanent => 1,
            ErrorClass::Unclassified => 2,
            ErrorClass::Misconfigured => 3,
        };
        self.errors[i].inc();
    }

    /// Destination errors of `class` counted so far (for tests and the bench report).
    pub fn errors_of(&self, class: ErrorClass) -> u64 {
        let i = match class {
            ErrorClass::Transient => 0,
            ErrorClass::Permanent => 1,
            ErrorClass::Unclassified => 2,
            ErrorClass::Misconfigured => 3,
        };
        self.errors[i].get()
    }
}

/// One sink's priority-lane counters (the source document's names, with the prefix).
#[derive(Clone)]
pub struct LaneMetrics {
    /// Batches ordered by lanes.
    pub batches: IntCounter,
    /// Messages evaluated by lanes.
    pub messages: IntCounter,
    /// Messages sent to the default lane.
    pub defaulted: IntCounter,
    /// Messages refused by the lane policy.
    pub rejected: IntCounter,
    /// Lanes present in the last scheduled batch.
    pub active: IntGauge,
}

impl LaneMetrics {
    fn new(m: &Metrics, name: &str) -> LaneMetrics {
        let s = [("sink", name)];
        LaneMetrics {
            batches: m.counter(
                "jetsink_priority_lane_batches_total",
                "Batches ordered by priority-lane scheduling.",
                &s,
            ),
            messages: m.counter(
                "jetsink_priority_lane_messages_total",
                "Messages evaluated by priority-lane scheduling.",
                &s,
            ),
            defaulted: m.counter(
                "jetsink_priority_lane_defaulted_total",
                "Messages sent to the default lane because their priority was missing or unknown.",
                &s,
            ),
            rejected: m.counter(
                "jetsink_priority_lane_rejected_total",
                "Messages rejected because their priority violated the lane policy.",
                &s,
            ),
            active: m.gauge(
                "jetsink_current_priority_lanes_active",
                "Configured lanes represented in the batch most recently scheduled.",
                &s,
            ),
        }
    }

    /// Records one batch's lane scheduling. Rejections are counted where the refused
    /// message is handed back.
    pub fn record(&self, stats: &LaneStats) {
        self.batches.inc_by(stats.batches);
        self.messages.inc_by(stats.messages);
        self.defaulted.inc_by(stats.defaulted);
        self.active.set(stats.active_lanes as i64);
    }
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
    fn shuffle(m: &Metrics, name: &str) -> BufferMetrics {
        const FLUSHES: &str = "Shuffle buffers handed to the destination, by reason: full (another pull could overflow it) or timer (its oldest message waited flush_ms).";
        BufferMetrics {
            buffered: m.gauge("jetsink_shuffle_buffered", "Messages held in the shuffle buffer (delivery.shuffle), unacknowledged, waiting to be shuffled and written.", &[("sink", name)]),
            flushed_full: m.counter("jetsink_shuffle_flushes_total", FLUSHES, &[("sink", name), ("reason", "full")]),
            flushed_timer: m.counter("jetsink_shuffle_flushes_total", FLUSHES, &[("sink", name), ("reason", "timer")]),
        }
    }

    fn rollover(m: &Metrics, name: &str) -> BufferMetrics {
        const FLUSHES: &str = "Rollover buffers written as one batch, by reason: full (another pull could take it past max_messages) or timer (its oldest message waited max_age_ms).";
        BufferMetrics {
            buffered: m.gauge("jetsink_rollover_buffered", "Messages held for the next object (s3 destination.rollover), unacknowledged, waiting to be written.", &[("sink", name)]),
            flushed_full: m.counter("jetsink_rollover_flushes_total", FLUSHES, &[("sink", name), ("reason", "full")]),
            flushed_timer: m.counter("jetsink_rollover_flushes_total", FLUSHES, &[("sink", name), ("reason", "timer")]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_renders_with_the_sink_label() {
        let m = Metrics::new();
        let s = SinkMetrics::new(&m, "orders");
        s.fetched.inc_by(3);
        s.batches_committed.inc();
        s.commit_lag.observe(0.01);
        s.error_of(ErrorClass::Unclassified);
        assert_eq!(s.errors_of(ErrorClass::Unclassified), 1);
        let text = m.render();
        for name in [
            "jetsink_messages_fetched_total{sink=\"orders\"} 3",
            "jetsink_batches_total{outcome=\"committed\",sink=\"orders\"} 1",
            "jetsink_sink_errors_total{class=\"unclassified\",sink=\"orders\"} 1",
            "jetsink_commit_lag_seconds_bucket",
            "jetsink_build_info{version=",
            "jetsink_inflight_messages{sink=\"orders\"} 0",
            "jetsink_dlq_publish_failures_total{sink=\"orders\"} 0",
            "jetsink_jobs_finished_total{sink=\"orders\",status=\"committed\"} 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
        // A second sink shares the families.
        SinkMetrics::new(&m, "other");
        assert_eq!(
            m.render()
                .matches("# TYPE jetsink_messages_fetched_total")
                .count(),
            1
        );
    }
}
