//! Summaries of benchmark passes: rates, latency percentiles, medians over runs.
//!
//! Pure so the arithmetic is tested on its own; the passes only collect raw numbers.

use serde::Serialize;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// Percentiles of `samples` (seconds), nearest-rank; zeros for no samples.
pub fn latency(samples: &mut [f64]) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    samples.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        let idx = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[idx] * 1000.0
    };
    Latency {
        p50_ms: rank(0.50),
        p99_ms: rank(0.99),
        max_ms: samples[samples.len() - 1] * 1000.0,
    }
}

/// The median of `values` (mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// One measured pass.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pass {
    /// `ceiling`, `destination` or `pipeline`.
    pub kind: String,
    /// Messages consumed and ACKed.
    pub messages: u64,
    /// Wall time of the pass in seconds.
    pub seconds: f64,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
    /// Publish → ACK (ceiling), publish → commit (pipeline), or the write call alone
    /// (destination) latency.
    pub latency: Latency,
    /// Peak resident memory of the process during the pass, MiB.
    pub peak_rss_mib: f64,
    /// CPU seconds per 100,000 messages, by process.
    pub cpu: super::cpu::CpuUse,
}

impl Pass {
    /// Builds a pass summary from raw measurements.
    pub fn new(
        kind: &str,
        messages: u64,
        payload_bytes: u64,
        seconds: f64,
        lags: &mut [f64],
        peak_rss_kib: u64,
    ) -> Pass {
        let secs = seconds.max(1e-9);
        Pass {
            kind: kind.to_string(),
            messages,
            seconds,
            msgs_per_sec: messages as f64 / secs,
            mib_per_sec: payload_bytes as f64 / secs / (1024.0 * 1024.0),
            latency: latency(lags),
            peak_rss_mib: peak_rss_kib as f64 / 1024.0,
            cpu: Default::default(),
        }
    }

    /// The pass with the CPU use measured over it.
    pub fn with_cpu(self, cpu: super::cpu::CpuUse) -> Pass {
        Pass { cpu, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut s: Vec<f64> = (1..=100).map(|i| i as f64 / 1000.0).collect();
        let l = latency(&mut s);
        assert_eq!((l.p50_ms, l.p99_ms, l.max_ms), (50.0, 99.0, 100.0));
        let mut one = vec![0.002];
        assert_eq!(latency(&mut one).p99_ms, 2.0);
        assert_eq!(latency(&mut []), Latency::default());
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn rates_come_from_counts_and_time() {
        let p = Pass::new("pipeline", 1000, 2 * 1024 * 1024, 2.0, &mut [], 10240);
        assert_eq!(p.msgs_per_sec, 500.0);
        assert_eq!(p.mib_per_sec, 1.0);
        assert_eq!(p.peak_rss_mib, 10.0);
    }
}
