//! The metrics snapshot file (`metrics.snapshot_file`): every sample of the registry as
//! JSON, written every `snapshot_interval_ms` and once at shutdown, for hosts where
//! nothing scrapes `/metrics` and for scripts (`jetsink metrics show FILE`, `jetsink
//! metrics get NAME FILE`, which read it back with [`decode`]).
//!
//! The format, versioned by its `format` key:
//! `{"format": "jetsink-metrics-snapshot/1", "written_at": RFC 3339 UTC,
//! "samples": [{"kind", "family", "name", "labels": {…}, "value"}]}`, the samples in
//! exposition order, `value` a JSON number (a string for `+Inf`, `-Inf`, `NaN`).
//!
//! A snapshot replaces the previous one atomically ([`crate::files::write`]): written to a
//! temporary file created new, never through a link, at an unpredictable name in the same
//! directory, fsync'd, renamed over the file, the directory fsync'd, so a reader sees the
//! old snapshot or the new one, never half of one, and a link planted beside it is never
//! written through. A failed write is logged as a warning
//! with the path, counted in `jetsink_metrics_snapshot_failures_total`, and never stops
//! the daemon. Metrics carry no secrets (see `metrics.rs`), so neither does the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prometheus::IntCounter;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::shared::prometheus_text::{parse, Kind, Sample};

/// The `format` key of this version of the file.
pub const FORMAT: &str = "jetsink-metrics-snapshot/1";

/// The file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: String,
    written_at: String,
    samples: Vec<Entry>,
}

/// One sample in the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    kind: String,
    family: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: serde_json::Value,
}

/// Why a snapshot file could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON of the snapshot's shape.
    #[error("not a jetsink metrics snapshot: {0}")]
    Shape(String),
    /// Another version of the format.
    #[error("snapshot format {found:?}, this build reads {FORMAT:?}")]
    Format {
        /// The `format` key found.
        found: String,
    },
    /// A sample whose kind or value is malformed.
    #[error("sample {index} ({name}): {reason}")]
    Sample {
        /// Position in `samples`, from 0.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// A snapshot read back: when it was written, and its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// RFC 3339 time the daemon took it.
    pub written_at: String,
    /// The samples, in exposition order.
    pub samples: Vec<Sample>,
}

/// The snapshot of `samples` taken at `written_at`, as the file's text.
pub fn encode(samples: &[Sample], written_at: &str) -> String {
    let file = File {
        format: FORMAT.to_string(),
        written_at: written_at.to_string(),
        samples: samples
            .iter()
            .map(|s| Entry {
                kind: s.kind.as_str().to_string(),
                family: s.family.clone(),
                name: s.name.clone(),
                labels: s.labels.iter().cloned().collect(),
                value: s.json_value(),
            })
            .collect(),
    };
    // A struct of strings, maps and JSON values always serializes.
    serde_json::to_string_pretty(&file).unwrap_or_default() + "\n"
}

/// Reads a snapshot file's text back into samples.
pub fn decode(text: &str) -> Result<Snapshot, DecodeError> {
    let file: File = serde_json::from_str(text).map_err(|e| DecodeError::Shape(e.to_string()))?;
    if file.format != FORMAT {
        return Err(DecodeError::Format { found: file.format });
    }
    let mut samples = Vec::with_capacity(file.samples.len());
    for (index, e) in file.samples.into_iter().enumerate() {
        let bad = |reason| DecodeError::Sample {
            index,
            name: e.name.clone(),
            reason,
        };
        let kind = Kind::from_type(&e.kind).ok_or_else(|| bad("unknown kind"))?;
        let value = match &e.value {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) if s.parse::<f64>().is_ok() => s.clone(),
            _ => return Err(bad("the value is not a number")),
        };
        samples.push(Sample {
            kind,
            family: e.family,
            name: e.name,
            labels: e.labels.into_iter().collect(),
            value,
        });
    }
    Ok(Snapshot {
        written_at: file.written_at,
        samples,
    })
}

/// The registry's samples now, as the file's text.
fn take(metrics: &Metrics) -> String {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    // The registry's own rendering always parses; an empty snapshot would say otherwise.
    let samples = parse(&metrics.render()).unwrap_or_default();
    encode(&samples, &now)
}

/// Replaces `path` with `text` atomically through [`crate::files::replace`]: a temporary
/// file created new (never through a link) at an unpredictable name in the same
/// directory, fsync, rename, directory fsync. The temporary file is removed when a step
/// fails; a device, FIFO, socket or directory at `path` is never replaced. A new file's
/// mode is 0666 less the umask, as any file the daemon creates.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), crate::files::WriteError> {
    crate::files::replace(path, text.as_bytes(), 0o666)
}

/// The running snapshot writer.
pub struct Writer {
    task: JoinHandle<()>,
    path: PathBuf,
    metrics: Metrics,
    failures: IntCounter,
}

/// The writer's own metric, registered where it is counted (and by tools that list every
/// metric the daemon can export).
pub fn register(metrics: &Metrics) -> IntCounter {
    metrics.counter(
        "jetsink_metrics_snapshot_failures_total",
        "Metrics snapshot files that could not be written (each logged as a warning).",
        &[],
    )
}

/// Starts writing the snapshot to `path` now and every `interval` until `shutdown`.
pub fn start(
    path: PathBuf,
    interval: Duration,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
) -> Writer {
    let failures = register(metrics);
    let (p, m, f, mut stop) = (
        path.clone(),
        metrics.clone(),
        failures.clone(),
        shutdown.clone(),
    );
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopping {
                break;
            }
            write_once(&p, &m, &f).await;
        }
    });
    Writer {
        task,
        path,
        metrics: metrics.clone(),
        failures,
    }
}

impl Writer {
    /// Waits for the periodic task to stop, then writes the last snapshot: called once
    /// every sink has settled, so it holds the final counts.
    pub async fn finish(self) {
        let _ = self.task.await;
        write_once(&self.path, &self.metrics, &self.failures).await;
    }
}

/// Takes and writes one snapshot off the async threads; a failure is logged and counted.
async fn write_once(path: &Path, metrics: &Metrics, failures: &IntCounter) {
    let text = take(metrics);
    let target = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || write_atomic(&target, &text)).await;
    let error = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    failures.inc();
    tracing::warn!(path = %path.display(), error = %error, "cannot write the metrics snapshot file");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_as_the_samples_it_was_taken_from() {
        let m = Metrics::new();
        m.counter("jetsink_t_total", "T.", &[("sink", "a")])
            .inc_by(3);
        m.histogram("jetsink_h_seconds", "H.", &[0.5], &[])
            .observe(0.25);
        let samples = parse(&m.render()).unwrap();
        let text = encode(&samples, "2026-12-01T00:00:00Z");
        let back = decode(&text).unwrap();
        assert_eq!(back.written_at, "2026-12-01T00:00:00Z");
        assert_eq!(back.samples, samples);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let t = v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "jetsink_t_total")
            .unwrap();
        assert_eq!(t["value"], 3);
        assert_eq!(t["labels"]["sink"], "a");
        assert_eq!(t["kind"], "counter");
    }

    #[test]
    fn another_format_or_a_malformed_sample_is_refused() {
        let ok = encode(&parse("# TYPE x counter\nx 1\n").unwrap(), "t");
        assert!(decode(&ok).is_ok());
        let other = ok.replace(FORMAT, "jetsink-metrics-snapshot/9");
        assert!(matches!(decode(&other), Err(DecodeError::Format { .. })));
        let kind = ok.replace("\"counter\"", "\"meter\"");
        assert!(matches!(
            decode(&kind),
            Err(DecodeError::Sample { index: 0, .. })
        ));
        assert!(matches!(decode("[1]"), Err(DecodeError::Shape(_))));
        assert!(matches!(
            decode(&ok.replace("\"value\": 1", "\"value\": \"one\"")),
            Err(DecodeError::Sample { .. })
        ));
    }

    proptest::proptest! {
        /// An operator may point `metrics show` or `get` at any file: whatever it holds
        /// ends in samples or an error, never a panic.
        #[test]
        fn any_text_decodes_or_is_refused(text in ".{0,400}") {
            let _ = decode(&text);
        }

        /// What the writer encodes reads back as the same samples, whatever the names,
        /// label values and counts.
        #[test]
        fn encoded_samples_read_back_unchanged(
            rows in proptest::collection::vec(
                ("[a-z_]{1,12}", "[a-z]{1,6}", "[ -~]{0,12}", 0u64..u64::from(u32::MAX)),
                0..20,
            )
        ) {
            let samples: Vec<Sample> = rows
                .into_iter()
                .map(|(name, label, value, n)| Sample {
                    kind: Kind::Counter,
                    family: name.clone(),
                    name,
                    labels: vec![(label, value)],
                    value: n.to_string(),
                })
                .collect();
            let back = decode(&encode(&samples, "t")).unwrap();
            proptest::prop_assert_eq!(back.samples, samples);
        }
    }

    #[test]
    fn infinities_survive_as_strings() {
        let samples = parse("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nx NaN\n").unwrap();
        let back = decode(&encode(&samples, "t")).unwrap();
        assert_eq!(back.samples, samples);
    }

    #[test]
    fn the_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        write_atomic(&p, "one").unwrap();
        write_atomic(&p, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert!(write_atomic(&dir.path().join("no/m.json"), "x").is_err());
    }

    #[test]
    fn a_link_planted_beside_the_snapshot_is_never_written_through() {
        // Issue 50: the old temporary name `.m.json.tmp-<pid>` was predictable and
        // opened with File::create, so a link planted there had its target overwritten.
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        let old = dir
            .path()
            .join(format!(".m.json.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old).unwrap();
        write_atomic(&p, "{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{}");
    }

    #[tokio::test]
    async fn the_writer_writes_at_start_and_at_finish_and_counts_failures() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        let m = Metrics::new();
        let (tx, rx) = watch::channel(false);
        let w = start(p.clone(), Duration::from_secs(3600), &m, &rx);
        m.counter("jetsink_late_total", "L.", &[]).inc();
        tx.send_replace(true);
        w.finish().await;
        let snap = decode(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert!(snap.samples.iter().any(|s| s.name == "jetsink_late_total"));

        let (tx, rx) = watch::channel(false);
        let bad = start(
            dir.path().join("no/m.json"),
            Duration::from_secs(3600),
            &m,
            &rx,
        );
        tx.send_replace(true);
        bad.finish().await;
        let failures = m.counter("jetsink_metrics_snapshot_failures_total", "x", &[]);
        assert!(failures.get() >= 1);
    }
}
