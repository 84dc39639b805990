//! The exporter as the daemon sees it: the OTLP exporter, with every batch's result
//! counted and a failure logged (the SDK's own diagnostics are not built in), so an
//! operator learns from `/metrics` and the log that spans are not arriving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prometheus::IntCounter;

/// Shortest time between two logged export failures: a collector that is down fails
/// every batch, and one line per interval says so.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Counters of what reached the collector.
#[derive(Debug, Clone)]
pub(super) struct ExportCounts {
    /// Spans the collector accepted.
    pub(super) exported: IntCounter,
    /// Spans in batches that failed (lost: the SDK does not retry them).
    pub(super) failed: IntCounter,
}

/// The OTLP exporter, counted.
#[derive(Debug)]
pub(super) struct Counted {
    inner: opentelemetry_otlp::SpanExporter,
    counts: ExportCounts,
    /// Where the spans go, for the log (credentials removed).
    target: String,
    /// Milliseconds since `origin` of the last logged failure, plus one (0: none yet).
    last_logged: Arc<AtomicU64>,
    origin: Instant,
}

impl Counted {
    pub(super) fn new(
        inner: opentelemetry_otlp::SpanExporter,
        counts: ExportCounts,
        target: String,
    ) -> Counted {
        Counted {
            inner,
            counts,
            target,
            last_logged: Arc::default(),
            origin: Instant::now(),
        }
    }

    /// Whether a failure now should be logged (the first, then one per [`LOG_EVERY`]).
    fn log_now(&self) -> bool {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let last = self.last_logged.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY.as_millis() as u64;
        due && self
            .last_logged
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.counts.exported.inc_by(n),
            Err(e) => {
                self.counts.failed.inc_by(n);
                if self.log_now() {
                    tracing::warn!(target_url = %self.target, spans = n, error = %e, "OTLP export failed; these spans are lost (counted in jetsink_trace_spans_failed_total)");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
