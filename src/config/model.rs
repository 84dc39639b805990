//! The checked model: what validation produces and the daemon runs, whichever shape the
//! file used. Policies (metadata, lanes, randomizer) are built from it without checking
//! again.

use std::sync::Arc;

use super::api::ApiConfig;
use super::dead_letter;
use super::destination::DestinationConfig;
use super::metadata;
use super::randomizer;
use super::raw::{DeliveryConfig, HttpConfig, LoggingConfig, MetricsConfig, SourceConfig};
use super::results::ResultsConfig;
use super::telemetry::TelemetryConfig;
use crate::crypto::Encryption;
use crate::shared::nats_security::{NatsConfig, NatsTls};
use crate::sinks::settings::Accumulate;

/// One configured sink after validation: a source binding, delivery settings and a destination.
#[derive(Debug, Clone)]
pub struct SinkSpec {
    /// The configured name; the `sink` label of every metric.
    pub name: String,
    /// Where the messages come from.
    pub source: SourceConfig,
    /// Batching, retries, lanes and shutdown behaviour.
    pub delivery: DeliveryConfig,
    /// Metadata rules; `None` when the section is absent.
    pub metadata: Option<metadata::MessageMetadataConfig>,
    /// Dead-letter queue; `None` (or `enabled: false`) leaves refused messages unacked.
    pub dead_letter: Option<dead_letter::DeadLetterConfig>,
    /// Where the messages go.
    pub destination: DestinationConfig,
    /// Job-queue results, published before each ACK; `None` when the section is absent.
    pub results: Option<ResultsConfig>,
    /// Which of `source.ack_wait_ms` / `source.max_deliver` were left unset in a job-queue
    /// sink and so took the job-queue document's value (the summary says so).
    pub job_defaults: crate::config::source::JobDefaults,
    /// Payload encryption, keys loaded; `None` stores payloads in clear.
    pub encryption: Option<Arc<Encryption>>,
    /// JSON path of the source's filter subjects (`sinks.x.source.subjects`, or
    /// `nats.subject` in the single-sink shape), for messages about them.
    pub subjects_path: String,
    /// JSON path of the sink's `priority_lanes` section, for messages about a lane.
    pub lanes_path: String,
    /// JSON paths of the sink's `source` (`nats` in the single-sink shape), `delivery` and
    /// `destination` (`sink`) objects, for messages about their settings.
    pub paths: SectionPaths,
}

/// Where a sink's sections sit in the file, so a message about a setting names its JSON
/// path whichever shape the file has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SectionPaths {
    /// `sinks.x.source`, or `nats`.
    pub source: String,
    /// `sinks.x.delivery`, or `delivery`.
    pub delivery: String,
    /// `sinks.x.destination`, or `sink`.
    pub destination: String,
    /// `sinks.x`, or empty for the single-sink shape's top level.
    pub section: String,
}

impl SectionPaths {
    /// The path of the sink's section `k` (`sinks.x.k`, or `k` at the top level).
    pub fn key(&self, k: &str) -> String {
        if self.section.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.section)
        }
    }
}

/// A validated configuration, whichever shape the file used.
#[derive(Debug, Clone)]
pub struct Config {
    /// Shared NATS connection settings.
    pub nats: NatsConfig,
    /// The metrics and health endpoint.
    pub http: HttpConfig,
    /// The job API; `None` when the section is absent.
    pub api: Option<ApiConfig>,
    /// Log level and format.
    pub logging: LoggingConfig,
    /// The metrics snapshot file; `None` when the section is absent.
    pub metrics: Option<MetricsConfig>,
    /// Traces exported over OTLP; `otlp` is `None` when off.
    pub telemetry: TelemetryConfig,
    /// Sinks in name order.
    pub sinks: Vec<SinkSpec>,
    /// Every local path the config names (keys, secrets, TLS files, the snapshot, the
    /// destinations' files and directories), by JSON path, for the check
    /// [`Config::load`](super::Config::load) makes that none written is named twice.
    pub paths: Vec<crate::sinks::settings::NamedPath>,
    /// What loading found that works but should be fixed, by JSON path: `validate`
    /// prints them, `run` logs them once logging has started.
    pub warnings: Vec<crate::shared::issue::Issue>,
}

impl Config {
    /// A short, secret-free description of what the config will do, for `validate`.
    pub fn summary(&self, rates: &[f64]) -> String {
        let mut out = format!(
            "nats: {} (client name {})\n  auth: {}\n  tls:  {}\nhttp: {}\nsinks: {}\n",
            self.nats.servers.join(", "),
            self.nats.name,
            self.nats.auth.describe(),
            self.nats
                .tls
                .as_ref()
                .map(NatsTls::describe)
                .unwrap_or_else(|| "by URL scheme (tls://) or when the server asks".into()),
            if self.http.enabled {
                self.http.listen.as_str()
            } else {
                "disabled"
            },
            self.sinks.len()
        );
        if let Some(api) = &self.api {
            out.push_str(&format!(
                "api: {} (token {}), waits up to {} ms (at most {} ms), {} waiting at most\n",
                api.listen,
                api.token()
                    .map(|t| t.describe())
                    .unwrap_or_else(|| "none: loopback only".into()),
                api.default_timeout_ms,
                api.max_timeout_ms,
                api.max_waiting
            ));
        }
        if let Some(otlp) = &self.telemetry.otlp {
            out.push_str(&format!("telemetry: {}\n", otlp.describe()));
        }
        for s in &self.sinks {
            s.summary(rates, &mut out);
        }
        out
    }
}

impl SinkSpec {
    /// What the destination gathers into one write: its `rollover` as configured, or —
    /// for a Parquet archive without one, when nothing else of the sink holds or orders
    /// messages across pulls (the shuffler, the randomizer, priority lanes, job-queue
    /// results, batches in flight) — the default rollover sized to the consumer
    /// ([`Accumulate::default_rollover`]). `None`: every batch is written as pulled.
    pub fn accumulate(&self) -> Option<Accumulate> {
        if let Some(a) = self.destination.accumulate() {
            return Some(a);
        }
        let d = &self.delivery;
        let free = self.destination.rolls_over_by_default()
            && d.shuffle.is_none()
            && !d.randomizer.enabled
            && !d.priority_lanes.enabled
            && d.batches_in_flight <= 1
            && self.results.is_none();
        free.then(|| {
            Accumulate::default_rollover(
                self.source.max_ack_pending,
                d.batch_size,
                d.max_batch_bytes,
            )
        })
    }

    /// The summary's lines about priority lanes, when they are enabled.
    fn lanes_summary(&self, out: &mut String) {
        let pl = &self.delivery.priority_lanes;
        if !pl.enabled {
            return;
        }
        let lanes: Vec<String> = pl
            .lanes
            .iter()
            .map(|l| format!("{} (weight {})", l.name, l.weight))
            .collect();
        out.push_str(&format!("    lanes:       {}\n", lanes.join(", ")));
        if pl.consumer_pull == super::lanes::ConsumerPull::Strict {
            out.push_str(&format!(
                "    lane pulls:  strict: {} asked first on every pull, the others by weight and first at least every {} ms\n",
                pl.lanes.first().map(|l| l.name.as_str()).unwrap_or("-"),
                pl.strict_max_wait_ms
            ));
        }
    }

    /// The summary's line about a Parquet archive's default rollover, when the config
    /// names none.
    fn default_rollover_line(&self, out: &mut String) {
        if let (None, Some(a)) = (self.destination.accumulate(), self.accumulate()) {
            out.push_str(&format!(
                "    rollover:    default: a write per {} messages, {} bytes or {} ms, whichever comes first\n",
                a.messages, a.bytes, a.flush_ms
            ));
        } else if self.destination.rolls_over_by_default() {
            out.push_str("    rollover:    none by default beside the shuffler, randomizer, lanes or job results: a write per batch\n");
        }
    }

    /// This sink's lines of [`Config::summary`].
    fn summary(&self, rates: &[f64], out: &mut String) {
        let s = self;
        let filter = if s.source.subjects.is_empty() {
            "(every subject)".to_string()
        } else {
            s.source.subjects.join(", ")
        };
        let create = match &s.source.create_stream {
            Some(c) => {
                format!(" (created if missing: {:?}, {:?})", c.retention, c.storage).to_lowercase()
            }
            None => " (must exist)".to_string(),
        };
        out.push_str(&format!(
            "  {name}:\n    stream:      {stream}{create}\n    consumer:    {consumer} (filter {filter}, ack_wait {aw} ms, max_deliver {md}, max_ack_pending {map})\n    delivery:    batch {bs}, {bytes} bytes max, wait {bt} ms{flight}\n    destination: {dest}\n",
            name = s.name,
            stream = s.source.stream,
            consumer = s.source.consumer,
            aw = s.source.ack_wait_ms(),
            md = s.source.max_deliver(),
            map = s.source.max_ack_pending,
            bs = s.delivery.batch_size,
            bytes = s.delivery.max_batch_bytes,
            bt = s.delivery.batch_timeout_ms,
            flight = match s.delivery.batches_in_flight {
                1 => String::new(),
                n => format!(", {n} batches in flight"),
            },
            dest = s.destination.describe(),
        ));
        s.default_rollover_line(out);
        let jd = s.job_defaults;
        if jd.ack_wait || jd.max_deliver {
            let which: Vec<&str> = [(jd.ack_wait, "ack_wait"), (jd.max_deliver, "max_deliver")]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, name)| *name)
                .collect();
            out.push_str(&format!(
                "    job queue:   {} from the job-queue defaults (60000 ms AckWait, MaxDeliver 4), as `results` is set\n",
                which.join(" and ")
            ));
        }
        let bindings = s.consumer_bindings();
        if bindings.len() > 1 {
            let names: Vec<String> = bindings
                .iter()
                .map(|(b, _)| format!("{} ({})", b.consumer, b.subjects.join(",")))
                .collect();
            out.push_str(&format!("    consumers:   {}\n", names.join(", ")));
        }
        if let Some(b) = &s.source.buckets {
            if let Some(g) = b.groups {
                out.push_str(&format!(
                    "    buckets:     {} buckets read by {g} group consumers, each in stream order (nats-server 2.10+); the pulls read the groups as below\n",
                    b.count
                ));
            }
            out.push_str(match b.pull {
                super::buckets::BucketPull::RandomOrder if b.reshuffle_every > 1 => {
                    "    buckets:     one bucket per pull, in a random order kept for reshuffle_every pulls\n"
                }
                super::buckets::BucketPull::RandomOrder => {
                    "    buckets:     one bucket per pull, in a fresh random order each pull\n"
                }
                super::buckets::BucketPull::Concurrent => {
                    "    buckets:     every bucket pulled at once for its share of the batch, interleaved at random\n"
                }
            });
        }
        if let Some(p) = &s.source.pinned {
            out.push_str(&format!(
                "    pinned:      group {}, priority timeout {} ms (active/standby; nats-server 2.11+)\n",
                p.group, p.timeout_ms
            ));
        }
        s.randomizer_summary(rates, out);
        if let Some(sh) = &s.delivery.shuffle {
            out.push_str(&format!(
                "    shuffle:     buffer {}, flushed when full or after {} ms (held unacknowledged against max_ack_pending)\n",
                sh.buffer, sh.flush_ms
            ));
        }
        s.lanes_summary(out);
        if let Some(r) = &s.results {
            out.push_str(&format!(
                "    results:     {}.<job id>, stored before each ACK{}\n",
                r.subject_prefix,
                r.create_stream
                    .as_ref()
                    .map(|c| format!(" (stream {}, kept {} ms)", c.name, c.max_age_ms))
                    .unwrap_or_default()
            ));
        }
        if let Some(enc) = &s.encryption {
            out.push_str(&format!("    encryption:  {}\n", enc.describe()));
        }
        if let Some(dl) = s.dead_letter.as_ref().filter(|d| d.enabled) {
            out.push_str(&format!(
                "    dead letter: {}\n",
                dl.subject.replace("{sink}", &s.name)
            ));
        }
    }

    /// The randomizer's line, and what its window grows toward at each of `rates`.
    fn randomizer_summary(&self, rates: &[f64], out: &mut String) {
        let s = self;
        let r = &s.delivery.randomizer;
        if r.enabled {
            out.push_str(&format!(
                "    randomizer:  P(process at once) {}, delays {}-{} ms, max_window {}, {}\n",
                r.process_immediately_probability,
                r.min_delay_ms,
                r.max_delay_ms,
                r.max_window,
                if r.adaptive && r.adaptive_source == randomizer::AdaptiveSource::Server {
                    "adaptive, fed by the server (delay probability (1-P) x (1 - W/max_window), \
                     W the larger of the own window and the consumer's outstanding count less \
                     2 x batch_size)"
                } else if r.adaptive {
                    "adaptive (delay probability (1-P) x (1 - window/max_window))"
                } else {
                    "fixed (delay probability 1-P while the window has room)"
                }
            ));
            for rate in rates {
                out.push_str(&format!(
                    "                 at {rate} msg/s the delayed window grows toward R x D x (1-P) = {:.0} messages (settles near {:.0} with max_window {}{})\n",
                    randomizer::expected_window(*rate, r),
                    randomizer::settled_window(*rate, r),
                    r.max_window,
                    if r.adaptive { ", adaptive" } else { "" }
                ));
            }
        }
    }
    /// A fingerprint of the sink's section (source, delivery, metadata, dead letter,
    /// destination): the first 16 hex digits of the SHA-256 of its canonical JSON (keys
    /// sorted). It goes into the consumer's metadata, so an operator looking at a consumer
    /// can tell which config, and whether the same one, its jetsink runs.
    pub fn config_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let section = serde_json::json!({
            "source": self.source,
            "delivery": self.delivery,
            "message_metadata": self.metadata,
            "dead_letter": self.dead_letter,
            "destination": self.destination,
        });
        let digest = Sha256::digest(section.to_string().as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// JSON path of the filter subjects of the consumer binding that feeds `lane` (from
    /// [`SinkSpec::consumer_bindings`]): the lane's `subjects`, or the source's.
    pub fn subjects_path_of(&self, lane: Option<usize>) -> String {
        match (lane, &self.source.buckets) {
            (Some(i), _) => format!("{}.lanes[{i}].subjects", self.lanes_path),
            // A group's consumer filters the buckets dealt to it.
            (None, Some(b)) if b.groups.is_some() => {
                format!(
                    "{}.buckets.groups",
                    self.subjects_path.trim_end_matches(".subjects")
                )
            }
            (None, _) => self.subjects_path.clone(),
        }
    }

    /// The connection this sink uses: its `connection_group`, or its own name. Sinks with
    /// the same label share one NATS connection; the label is the `connection` label of
    /// the connection metrics.
    pub fn connection_label(&self) -> &str {
        self.source
            .connection_group
            .as_deref()
            .unwrap_or(&self.name)
    }

    /// The durable consumers this sink binds, each with the priority lane it feeds in
    /// per-lane consumer mode: one consumer, one per random subject bucket, or one per
    /// lane (named `<consumer>-lane-<lane>-0`, filtering every subject of the lane; several
    /// subjects need nats-server 2.10+, which [`crate::nats::bind`] checks).
    pub fn consumer_bindings(&self) -> Vec<(SourceConfig, Option<usize>)> {
        let lanes = &self.delivery.priority_lanes;
        let per_lane = lanes.enabled && lanes.lanes.iter().any(|l| !l.subjects.is_empty());
        if !per_lane {
            return self
                .source
                .bindings()
                .into_iter()
                .map(|s| (s, None))
                .collect();
        }
        let all: Vec<String> = lanes
            .lanes
            .iter()
            .flat_map(|l| l.subjects.clone())
            .collect();
        let mut out = Vec::new();
        for (li, lane) in lanes.lanes.iter().enumerate() {
            let mut s = self.source.clone();
            // `-0`: the name the lane's consumer had when each lane subject got its own
            // consumer, so a lane of one subject keeps its consumer (and its position).
            s.consumer = format!("{}-lane-{}-0", self.source.consumer, lane.name);
            s.subjects = lane.subjects.clone();
            if let Some(cs) = s.create_stream.as_mut() {
                if cs.subjects.is_empty() {
                    cs.subjects = all.clone();
                }
            }
            out.push((s, Some(li)));
        }
        out
    }
}
