//! The job API's metric families, registered beside the module that feeds them. Labels
//! are the configured sink name (empty for a path naming no configured sink, so a client
//! cannot grow the label set), a fixed `outcome` and the HTTP status code.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Wait-time buckets, in seconds: milliseconds to the longest allowed wait.
const WAIT_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 600.0,
];

/// Why the metric families could not be registered (a name registered twice).
#[derive(Debug, thiserror::Error)]
#[error("job API metrics: {0}")]
pub struct RegisterError(#[from] prometheus::Error);

/// How a wait ended: the `outcome` label of `jetsink_job_wait_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A `committed` result.
    Committed,
    /// A `dead_lettered` result.
    DeadLettered,
    /// The budget ran out (503).
    Timeout,
    /// NATS or a stream failed during the wait.
    Error,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// The job API's families.
#[derive(Clone)]
pub struct ApiMetrics {
    submitted: IntCounterVec,
    wait_seconds: HistogramVec,
    waits: IntGaugeVec,
    responses: IntCounterVec,
}

impl ApiMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &Registry) -> Result<ApiMetrics, RegisterError> {
        let submitted = IntCounterVec::new(
            Opts::new(
                "jetsink_jobs_submitted_total",
                "Jobs the job API published and the jobs stream acknowledged (duplicates of an earlier submission included), per sink.",
            ),
            &["sink"],
        )?;
        let wait_seconds = HistogramVec::new(
            HistogramOpts::new(
                "jetsink_job_wait_seconds",
                "Time a job API request waited for its result after the job was published, by outcome: committed, dead_lettered, timeout, error.",
            )
            .buckets(WAIT_SECONDS.to_vec()),
            &["sink", "outcome"],
        )?;
        let waits = IntGaugeVec::new(
            Opts::new(
                "jetsink_job_waits",
                "Job API requests waiting for a result now, per sink (api.max_waiting bounds the sum).",
            ),
            &["sink"],
        )?;
        let responses = IntCounterVec::new(
            Opts::new(
                "jetsink_job_api_responses_total",
                "Job API responses by sink and HTTP status code (503: the wait ran out, the job stays queued).",
            ),
            &["sink", "code"],
        )?;
        registry.register(Box::new(submitted.clone()))?;
        registry.register(Box::new(wait_seconds.clone()))?;
        registry.register(Box::new(waits.clone()))?;
        registry.register(Box::new(responses.clone()))?;
        Ok(ApiMetrics {
            submitted,
            wait_seconds,
            waits,
            responses,
        })
    }

    /// Shows every sink's series at zero, so dashboards and alerts see them before the
    /// first request.
    pub fn init_sink(&self, sink: &str) {
        self.submitted.with_label_values(&[sink]);
        self.waits.with_label_values(&[sink]);
    }

    /// Counts one job published.
    pub fn submitted(&self, sink: &str) {
        self.submitted.with_label_values(&[sink]).inc();
    }

    /// Records one finished wait.
    pub fn waited(&self, sink: &str, outcome: Outcome, seconds: f64) {
        self.wait_seconds
            .with_label_values(&[sink, outcome.as_str()])
            .observe(seconds);
    }

    /// Marks one wait in progress until the guard is dropped.
    pub fn waiting(&self, sink: &str) -> WaitGuard {
        let g = self.waits.with_label_values(&[sink]);
        g.inc();
        WaitGuard(g)
    }

    /// Counts one response.
    pub fn responded(&self, sink: &str, code: u16) {
        let mut buf = itoa::Buffer::new();
        self.responses
            .with_label_values(&[sink, buf.format(code)])
            .inc();
    }
}

/// Decrements `jetsink_job_waits` when dropped, however the wait ends (also when the
/// client goes away and the request future is dropped).
pub struct WaitGuard(prometheus::IntGauge);

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_renders_with_its_labels() {
        let r = Registry::new();
        let m = ApiMetrics::register(&r).unwrap();
        m.init_sink("grader");
        m.submitted("grader");
        {
            let _w = m.waiting("grader");
            m.waited("grader", Outcome::Timeout, 0.3);
        }
        m.responded("grader", 503);
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut buf)
            .unwrap();
        let text = String::from_utf8(buf).unwrap();
        for line in [
            "jetsink_jobs_submitted_total{sink=\"grader\"} 1",
            "jetsink_job_waits{sink=\"grader\"} 0",
            "jetsink_job_wait_seconds_count{outcome=\"timeout\",sink=\"grader\"} 1",
            "jetsink_job_api_responses_total{code=\"503\",sink=\"grader\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(ApiMetrics::register(&r).is_err());
    }
}
