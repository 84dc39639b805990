//! Job-queue mode's metrics, per sink: results stored by status, and results the results
//! stream did not acknowledge.

use prometheus::IntCounter;

use crate::metrics::Metrics;

/// One sink's job-result counters.
#[derive(Clone)]
pub struct JobMetrics {
    /// `committed` results stored (`jetsink_jobs_finished_total{status="committed"}`).
    pub committed: IntCounter,
    /// `dead_lettered` results stored.
    pub dead_lettered: IntCounter,
    /// Results the results stream did not acknowledge
    /// (`jetsink_result_publish_failures_total`).
    pub failures: IntCounter,
}

impl JobMetrics {
    /// The counters of `sink`.
    pub fn new(metrics: &Metrics, sink: &str) -> JobMetrics {
        const FINISHED: &str = "Job results stored by the results stream before the job was acknowledged, by status: committed, dead_lettered.";
        JobMetrics {
            committed: metrics.counter(
                "jetsink_jobs_finished_total",
                FINISHED,
                &[("sink", sink), ("status", "committed")],
            ),
            dead_lettered: metrics.counter(
                "jetsink_jobs_finished_total",
                FINISHED,
                &[("sink", sink), ("status", "dead_lettered")],
            ),
            failures: metrics.counter(
                "jetsink_result_publish_failures_total",
                "Job results the results stream did not acknowledge; the job stays unacked and is redelivered.",
                &[("sink", sink)],
            ),
        }
    }
}
