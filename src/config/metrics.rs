//! The `metrics` section: an optional snapshot of every metric, written as JSON to a file
//! every `snapshot_interval_ms` and once at shutdown, for hosts where nothing scrapes
//! `/metrics` (or the endpoint is off) and for scripts (`jetsink metrics show FILE`,
//! `jetsink metrics get NAME FILE`). Off when the section is absent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::issue::Issues;

/// Shortest interval: a snapshot is a full render, fsync and rename.
const MIN_INTERVAL_MS: u64 = 1_000;
/// Longest interval: one hour.
const MAX_INTERVAL_MS: u64 = 3_600_000;

/// The metrics snapshot file.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// File the snapshot is written to (JSON: every sample's kind, name, labels and value,
    /// and when it was taken). Replaced atomically: written to a temporary file in the
    /// same directory, fsync'd, then renamed over it, so a reader never sees half a
    /// snapshot. The directory must exist and be writable by the daemon.
    pub snapshot_file: String,
    /// How often the snapshot is written, in milliseconds; also once at shutdown.
    /// Default 10000, 1000 to 3600000.
    #[serde(default = "default_interval_ms")]
    pub snapshot_interval_ms: u64,
}

fn default_interval_ms() -> u64 {
    10_000
}

impl MetricsConfig {
    /// The snapshot file.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.snapshot_file)
    }

    /// Time between snapshots.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.snapshot_interval_ms)
    }
}

/// Checks the section: the interval's bounds and a path that names a file in a directory.
/// A directory that does not exist (yet) is a warning: the config may be validated on
/// another host than the one it runs on, and each failed write is logged and counted.
pub(crate) fn check(cfg: &MetricsConfig, issues: &mut Issues) {
    issues.range(
        "metrics.snapshot_interval_ms".into(),
        cfg.snapshot_interval_ms,
        MIN_INTERVAL_MS,
        MAX_INTERVAL_MS,
    );
    let key = "metrics.snapshot_file";
    let path = cfg.path();
    if cfg.snapshot_file.trim().is_empty() {
        issues.push(key, "must name a file, got an empty string");
        return;
    }
    if cfg.snapshot_file.ends_with('/') || path.file_name().is_none() {
        issues.push(
            key,
            format!("{} names a directory, not a file", cfg.snapshot_file),
        );
        return;
    }
    if path.is_dir() {
        issues.push(
            key,
            format!("{} is a directory, not a file", cfg.snapshot_file),
        );
        return;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if dir.exists() && !dir.is_dir() {
        issues.push(key, format!("{} is not a directory", dir.display()));
    } else if !dir.exists() {
        issues.warn(
            key,
            format!(
                "the directory {} does not exist: every snapshot write fails until it does",
                dir.display()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(json: &str) -> Issues {
        let cfg: MetricsConfig = serde_json::from_str(json).unwrap();
        let mut issues = Issues::default();
        check(&cfg, &mut issues);
        issues
    }

    #[test]
    fn a_file_in_an_existing_directory_with_the_default_interval_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(r#"{{"snapshot_file": "{}/m.json"}}"#, dir.path().display());
        let cfg: MetricsConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(cfg.interval(), Duration::from_secs(10));
        let issues = checked(&json);
        assert!(issues.0.is_empty() && issues.1.is_empty(), "{issues:?}");
    }

    #[test]
    fn an_interval_out_of_bounds_is_refused_at_its_path() {
        for ms in [0, 999, 3_600_001] {
            let issues = checked(&format!(
                r#"{{"snapshot_file": "m.json", "snapshot_interval_ms": {ms}}}"#
            ));
            assert_eq!(issues.0.len(), 1, "{ms}: {issues:?}");
            assert_eq!(issues.0[0].path, "metrics.snapshot_interval_ms");
        }
    }

    #[test]
    fn a_path_that_is_no_file_is_refused_and_a_missing_directory_warned() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            String::new(),
            "out/".into(),
            dir.path().display().to_string(),
        ] {
            let issues = checked(&format!(r#"{{"snapshot_file": "{bad}"}}"#));
            assert_eq!(issues.0.len(), 1, "{bad}: {issues:?}");
            assert_eq!(issues.0[0].path, "metrics.snapshot_file");
        }
        let missing = dir.path().join("nope/m.json");
        let issues = checked(&format!(r#"{{"snapshot_file": "{}"}}"#, missing.display()));
        assert!(issues.0.is_empty(), "{issues:?}");
        assert_eq!(issues.1.len(), 1);
        assert!(issues.1[0].message.contains("does not exist"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(serde_json::from_str::<MetricsConfig>(
            r#"{"snapshot_file": "m.json", "interval": 5}"#
        )
        .is_err());
    }
}
