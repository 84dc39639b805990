//! What a reload compares and counts: the settings only a restart applies, the fingerprint
//! by which a sink counts as unchanged, and the reload metrics.
//!
//! A sink's fingerprint is the `Debug` form of its resolved settings (`SinkSpec`): every
//! value the file, the environment variables and the key and secret files it names
//! resolved to, so a rotated key or a changed secret file changes the sink too. Key
//! material never appears in it (keys show as their fingerprints), and it is compared,
//! never logged.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::IntGauge;

use crate::config::{Config, SinkSpec};
use crate::metrics::Metrics;

/// Each sink of `config` by name, with its fingerprint.
pub fn fingerprints(config: &Config) -> BTreeMap<String, String> {
    config
        .sinks
        .iter()
        .map(|s| (s.name.clone(), fingerprint(s)))
        .collect()
}

/// The fingerprint of one sink's resolved settings.
pub fn fingerprint(spec: &SinkSpec) -> String {
    format!("{spec:?}")
}

/// The top-level sections the daemon builds once (the NATS connections, the HTTP and API
/// listeners, the log subscriber, the metrics snapshot writer, the trace exporter) that
/// differ between `running` and `new`, by JSON path. A reload that would change any of
/// them is refused whole.
pub fn restart_only_changes(running: &Config, new: &Config) -> Vec<&'static str> {
    let sections = [
        ("nats", differs(&running.nats, &new.nats)),
        ("http", differs(&running.http, &new.http)),
        ("api", differs(&running.api, &new.api)),
        ("logging", differs(&running.logging, &new.logging)),
        ("metrics", differs(&running.metrics, &new.metrics)),
        ("telemetry", differs(&running.telemetry, &new.telemetry)),
    ];
    sections
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
}

fn differs<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") != format!("{b:?}")
}

const RELOADS: &str =
    "Configuration reloads (SIGHUP or a changed file with run --watch-config) by result: ok, failed.";

/// The reload metrics, registered once per process.
pub struct ReloadMetrics {
    metrics: Metrics,
    successful: IntGauge,
    at: IntGauge,
}

impl ReloadMetrics {
    /// Registers the families; the last reload counts as successful until one fails.
    pub fn new(metrics: &Metrics) -> ReloadMetrics {
        for result in ["ok", "failed"] {
            metrics.counter(
                "jetsink_config_reloads_total",
                RELOADS,
                &[("result", result)],
            );
        }
        let m = ReloadMetrics {
            metrics: metrics.clone(),
            successful: metrics.gauge(
                "jetsink_config_last_reload_successful",
                "1 when the last reload (or the start, before any) applied the config, 0 when it was refused.",
                &[],
            ),
            at: metrics.gauge(
                "jetsink_config_last_reload_timestamp_seconds",
                "When the last reload was tried (the start, before any), in Unix seconds.",
                &[],
            ),
        };
        m.record(true);
        m
    }

    /// Counts a reload as applied or refused (the start is recorded as applied without
    /// counting).
    pub fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.metrics
            .counter(
                "jetsink_config_reloads_total",
                RELOADS,
                &[("result", result)],
            )
            .inc();
        self.record(ok);
    }

    fn record(&self, ok: bool) {
        self.successful.set(i64::from(ok));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.at.set(i64::try_from(now).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, text).unwrap();
        Config::load(&path).unwrap()
    }

    fn config(listen: &str, batch: u32, sinks: &[&str]) -> String {
        let sinks: Vec<String> = sinks
            .iter()
            .map(|n| {
                format!(
                    r#""{n}": {{"source": {{"stream": "S", "consumer": "{n}", "subjects": ["s.>"]}},
                    "delivery": {{"batch_size": {batch}}},
                    "destination": {{"type": "file", "directory": "/tmp/jetsink-reload-{n}"}}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"nats": {{"servers": ["nats://127.0.0.1:4222"]}}, "http": {{"listen": "{listen}"}},
            "sinks": {{{}}}}}"#,
            sinks.join(",")
        )
    }

    #[test]
    fn a_changed_listener_needs_a_restart_and_a_changed_sink_does_not() {
        let running = load(&config("127.0.0.1:9100", 10, &["a"]));
        let same = load(&config("127.0.0.1:9100", 20, &["a", "b"]));
        assert!(restart_only_changes(&running, &same).is_empty());
        let moved = load(&config("127.0.0.1:9101", 10, &["a"]));
        assert_eq!(restart_only_changes(&running, &moved), vec!["http"]);
    }

    #[test]
    fn a_sink_loaded_twice_from_one_file_has_one_fingerprint() {
        let text = config("127.0.0.1:9100", 10, &["a", "b"]);
        assert_eq!(fingerprints(&load(&text)), fingerprints(&load(&text)));
        let changed = fingerprints(&load(&config("127.0.0.1:9100", 11, &["a", "b"])));
        assert_ne!(fingerprints(&load(&text))["a"], changed["a"]);
    }

    #[test]
    fn the_reload_metrics_count_and_remember_the_last_result() {
        let metrics = Metrics::new();
        let r = ReloadMetrics::new(&metrics);
        r.reloaded(false);
        let text = metrics.render();
        assert!(
            text.contains("jetsink_config_reloads_total{result=\"failed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("jetsink_config_reloads_total{result=\"ok\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("jetsink_config_last_reload_successful 0"),
            "{text}"
        );
        r.reloaded(true);
        assert!(metrics
            .render()
            .contains("jetsink_config_last_reload_successful 1"));
    }
}
