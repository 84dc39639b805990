//! Where each part of one sink sits in the file, so the same checks report
//! `sinks.<name>.source.stream` in the multi-sink shape and `nats.stream` in the single-sink
//! shape. A leaf: the section checks import it, not the module that runs them.

/// The JSON paths of one sink's parts.
pub(crate) struct SinkPaths {
    /// The source object (`sinks.x.source` or `nats`).
    pub(crate) source: String,
    /// The stream name.
    pub(crate) stream: String,
    /// The durable consumer name.
    pub(crate) consumer: String,
    /// The filter subjects (`subjects` or the single shape's `subject`).
    pub(crate) subjects: String,
    /// The delivery section.
    pub(crate) delivery: String,
    /// The destination object (`sinks.x.destination` or `sink`).
    pub(crate) destination: String,
    /// The sink itself (`sinks.x`), empty for the single-sink shape's top level.
    pub(crate) section: String,
}

impl SinkPaths {
    /// Paths of the sink at `base` (`sinks.<name>`) in the multi-sink shape.
    pub(crate) fn multi(base: &str) -> SinkPaths {
        SinkPaths {
            source: format!("{base}.source"),
            stream: format!("{base}.source.stream"),
            consumer: format!("{base}.source.consumer"),
            subjects: format!("{base}.source.subjects"),
            delivery: format!("{base}.delivery"),
            destination: format!("{base}.destination"),
            section: base.to_string(),
        }
    }

    /// Paths of the one sink of the single-sink shape: top-level `delivery.x`, `sink.x`,
    /// `nats.stream`.
    pub(crate) fn single() -> SinkPaths {
        SinkPaths {
            source: "nats".into(),
            stream: "nats.stream".into(),
            consumer: "nats.consumer".into(),
            subjects: "nats.subject".into(),
            delivery: "delivery".into(),
            destination: "sink".into(),
            section: String::new(),
        }
    }

    /// The path of the delivery section's `priority_lanes`.
    pub(crate) fn lanes(&self) -> String {
        format!("{}.priority_lanes", self.delivery)
    }

    /// The path of a section `k` of the sink (`sinks.x.k`, or `k` at the top level).
    pub(crate) fn key(&self, k: &str) -> String {
        if self.section.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.section)
        }
    }
}
