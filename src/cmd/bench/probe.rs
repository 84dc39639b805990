//! Instruments for a benchmark: a destination wrapper that records publish → commit
//! latency after each successful commit, a destination that discards (to measure the
//! pipeline without storage), and the process's peak resident memory.
//!
//! The wrapper adds one clock reading per batch around the real destination; the runner
//! and destination code measured are the ones `jetsink run` uses.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::envelope::Envelope;
use crate::sinks::{Outcome, Sink, SinkError};

/// Wraps a destination and records, per committed message, seconds from publish to commit.
pub struct Timed {
    inner: Box<dyn Sink>,
    lags: Arc<Mutex<Vec<f64>>>,
}

impl Timed {
    /// Wraps `inner`; lags are appended to `lags`.
    pub fn new(inner: Box<dyn Sink>, lags: Arc<Mutex<Vec<f64>>>) -> Timed {
        Timed { inner, lags }
    }
}

#[async_trait]
impl Sink for Timed {
    async fn open(&mut self) -> Result<(), SinkError> {
        self.inner.open().await
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        self.inner.write_batch(batch).await?;
        let now = OffsetDateTime::now_utc();
        if let Ok(mut lags) = self.lags.lock() {
            lags.extend(
                batch
                    .iter()
                    .map(|e| (now - e.published_at).as_seconds_f64().max(0.0)),
            );
        }
        Ok(())
    }

    fn per_message(&self) -> bool {
        self.inner.per_message()
    }

    async fn write_each(&mut self, batch: &[Envelope]) -> Vec<Outcome> {
        let outcomes = self.inner.write_each(batch).await;
        let now = OffsetDateTime::now_utc();
        if let Ok(mut lags) = self.lags.lock() {
            lags.extend(
                batch
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, o)| matches!(o, Outcome::Committed { .. }))
                    .map(|(e, _)| (now - e.published_at).as_seconds_f64().max(0.0)),
            );
        }
        outcomes
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        self.inner.health().await
    }
}

/// A destination that stores nothing, for measuring the pipeline's own cost.
#[derive(Debug, Default)]
pub struct Discard;

#[async_trait]
impl Sink for Discard {
    async fn open(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn write_batch(&mut self, _batch: &[Envelope]) -> Result<(), SinkError> {
        Ok(())
    }
    async fn health(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Resets the kernel's peak-RSS mark of this process (Linux `clear_refs`), so a pass
/// measures its own peak. Returns false where that is not possible.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size since the last reset, in KiB (`VmHWM`), 0 if unknown.
pub fn peak_rss_kib() -> u64 {
    status_field("VmHWM:")
}

fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_readable_on_linux() {
        assert!(peak_rss_kib() > 0);
    }
}
