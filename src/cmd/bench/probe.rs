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
use crate::sinks::{CutShort, Sink, SinkError, Written};

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

    /// Records the lag of each committed envelope, now.
    fn record<'a>(&self, committed: impl Iterator<Item = &'a Envelope>) {
        let now = OffsetDateTime::now_utc();
        if let Ok(mut lags) = self.lags.lock() {
            lags.extend(committed.map(|e| (now - e.published_at).as_seconds_f64().max(0.0)));
        }
    }
}

#[async_trait]
impl Sink for Timed {
    async fn open(&mut self) -> Result<(), SinkError> {
        self.inner.open().await
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        self.inner.write_batch(batch).await?;
        self.record(batch.iter());
        Ok(())
    }

    async fn write(&mut self, batch: &[Envelope]) -> Written {
        let written = self.inner.write(batch).await;
        match &written {
            Written::Batch(Ok(())) => self.record(batch.iter()),
            Written::Batch(Err(_)) => {}
            Written::Each(outcomes) => self.record(
                batch
                    .iter()
                    .zip(outcomes)
                    .filter(|(_, o)| o.is_committed())
                    .map(|(e, _)| e),
            ),
        }
        written
    }

    fn cut_short_by(&mut self, signal: CutShort) {
        self.inner.cut_short_by(signal);
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
    crate::files::read_text(
        std::path::Path::new("/proc/self/status"),
        crate::files::Kind::Proc,
    )
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
