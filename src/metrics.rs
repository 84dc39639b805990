//! The Prometheus registry jetsink exports at `/metrics`, and the one way a module adds a
//! metric to it. The metrics themselves belong to the modules that count them (the
//! pipeline's per-sink counters in `pipeline/metrics.rs`, the dead-letter queue's in
//! `dlq/metrics.rs`, the job API's in `api/metrics.rs`, …): each names its metric once,
//! where it takes the handle, and this module creates and registers the family on first
//! use. It imports nothing else of the crate, so every module can use it.
//!
//! Names follow Prometheus conventions with the `jetsink_` prefix. The only labels are the
//! configured sink name, the configured connection name (a `connection_group` or a sink
//! name) and small fixed enums (`outcome`, `class`); never a subject, message id or
//! payload, so cardinality stays bounded whatever the traffic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Histogram buckets for durations, in seconds: half a millisecond to a minute.
pub const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A family once created: its kind and label names, which every later use must repeat.
#[derive(Clone)]
enum Family {
    Counter(IntCounterVec, Vec<&'static str>),
    Gauge(IntGaugeVec, Vec<&'static str>),
    Histogram(HistogramVec, Vec<&'static str>),
}

/// The process-wide registry. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    families: Arc<Mutex<HashMap<&'static str, Family>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// An empty registry holding `jetsink_build_info`.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::new(),
            families: Arc::default(),
        };
        m.gauge(
            "jetsink_build_info",
            "Always 1; the labels say which build runs.",
            &[("version", env!("CARGO_PKG_VERSION"))],
        )
        .set(1);
        m
    }

    /// The registry, for families kept beside the module that feeds them with labels of
    /// their own shape (the consumer backlog gauges, the job API).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The counter `name` with these label values, its family created on first use.
    ///
    /// Names, help texts and label names are constants of the module that counts: using
    /// one name with another kind or other label names is a programming error, which the
    /// metric tests that render every family find.
    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> IntCounter {
        let family = self.family(name, labels, || {
            let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            IntCounterVec::new(Opts::new(name, help), &names)
                .map(|c| (Family::Counter(c.clone(), key(labels)), Box::new(c) as _))
        });
        match family {
            Family::Counter(c, _) => c.with_label_values(&values(labels)),
            _ => panic!("metric {name} is used as a counter and as another kind"),
        }
    }

    /// The gauge `name` with these label values (see [`Metrics::counter`]).
    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> IntGauge {
        let family = self.family(name, labels, || {
            let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            IntGaugeVec::new(Opts::new(name, help), &names)
                .map(|g| (Family::Gauge(g.clone(), key(labels)), Box::new(g) as _))
        });
        match family {
            Family::Gauge(g, _) => g.with_label_values(&values(labels)),
            _ => panic!("metric {name} is used as a gauge and as another kind"),
        }
    }

    /// The histogram `name` with these label values and `buckets` (see
    /// [`Metrics::counter`]).
    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        buckets: &[f64],
        labels: &[(&'static str, &str)],
    ) -> Histogram {
        let family = self.family(name, labels, || {
            let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            HistogramVec::new(opts, &names)
                .map(|h| (Family::Histogram(h.clone(), key(labels)), Box::new(h) as _))
        });
        match family {
            Family::Histogram(h, _) => h.with_label_values(&values(labels)),
            _ => panic!("metric {name} is used as a histogram and as another kind"),
        }
    }

    /// The family `name`, made by `make` and registered the first time.
    fn family(
        &self,
        name: &'static str,
        labels: &[(&'static str, &str)],
        make: impl FnOnce() -> prometheus::Result<(Family, Box<dyn prometheus::core::Collector>)>,
    ) -> Family {
        let mut families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = families.get(name) {
            let (Family::Counter(_, k) | Family::Gauge(_, k) | Family::Histogram(_, k)) = f;
            assert!(
                *k == key(labels),
                "metric {name} is used with labels {:?} and {k:?}",
                key(labels)
            );
            return f.clone();
        }
        // A name or help text a Prometheus client refuses is a constant of this crate, not
        // something input can cause; the metric tests render every family.
        let (family, collector) =
            make().unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
        self.registry
            .register(collector)
            .unwrap_or_else(|e| panic!("metric {name} registered twice: {e}"));
        families.insert(name, family.clone());
        family
    }

    /// The text exposition format served at `/metrics`.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn key(labels: &[(&'static str, &str)]) -> Vec<&'static str> {
    labels.iter().map(|(k, _)| *k).collect()
}

fn values<'a>(labels: &[(&'static str, &'a str)]) -> Vec<&'a str> {
    labels.iter().map(|(_, v)| *v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_created_once_and_shared_by_its_label_values() {
        let m = Metrics::new();
        let a = m.counter(
            "jetsink_t_total",
            "Test.",
            &[("sink", "a"), ("outcome", "x")],
        );
        let b = m.counter(
            "jetsink_t_total",
            "Test.",
            &[("sink", "b"), ("outcome", "y")],
        );
        a.inc_by(2);
        b.inc();
        m.gauge("jetsink_g", "Gauge.", &[("sink", "a")]).set(7);
        m.histogram("jetsink_h_seconds", "Hist.", SECONDS, &[("sink", "a")])
            .observe(0.01);
        let text = m.render();
        for line in [
            "jetsink_t_total{outcome=\"x\",sink=\"a\"} 2",
            "jetsink_t_total{outcome=\"y\",sink=\"b\"} 1",
            "jetsink_g{sink=\"a\"} 7",
            "jetsink_h_seconds_bucket{sink=\"a\",le=\"0.01\"} 1",
            "jetsink_build_info{version=",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE jetsink_t_total counter").count(), 1);
    }

    #[test]
    #[should_panic(expected = "used with labels")]
    fn a_name_used_with_other_labels_is_a_programming_error() {
        let m = Metrics::new();
        m.counter("jetsink_t_total", "Test.", &[("sink", "a")]);
        m.counter("jetsink_t_total", "Test.", &[("connection", "a")]);
    }
}
