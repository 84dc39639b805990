//! A sink's `source` as typed: the stream, the durable consumer and its settings, and the
//! stream jetsink may create; with the consumer arithmetic the runtime shares (the AckWait
//! the server applies, the shortest redelivery interval, the bucket consumers).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::buckets::{bucket_wildcard, BucketsConfig};
pub use super::stream::{Retention, StorageKind};

/// The stream and durable pull consumer a sink reads.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Stream name. It must exist unless `create_stream` is given.
    pub stream: String,
    /// Filter subjects of the consumer: one subject (a string) or a list. Several make one
    /// consumer filtering all of them (`filter_subjects`), which needs nats-server 2.10+;
    /// on 2.9 start-up refuses them (exit 78) because that server would deliver every
    /// subject. Empty: every subject of the stream.
    #[serde(default, deserialize_with = "one_or_many")]
    #[schemars(with = "OneOrMany")]
    pub subjects: Vec<String>,
    /// Durable consumer name; created when missing, checked for unsafe drift when present.
    pub consumer: String,
    /// Consumer AckWait in milliseconds: how long a delivered, unacknowledged message waits
    /// before redelivery. Default 30000; in job-queue mode (the sink has `results`) 60000,
    /// the job-queue document's value, since a job may run code and AckWait is how long a
    /// crashed worker's job waits for another.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "u64", extend("default" = 30000))]
    pub ack_wait_ms: Option<u64>,
    /// Consumer MaxDeliver: deliveries before the server gives up on a message; -1 unlimited.
    /// Default -1; in job-queue mode (the sink has `results`) 4, the job-queue document's
    /// bound on a poison job, which then gets a `dead_lettered` result instead of looping.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "i64", extend("default" = -1))]
    pub max_deliver: Option<i64>,
    /// Consumer MaxAckPending: delivered but unacknowledged messages allowed; -1 unlimited.
    /// Default 10000; must be at least `delivery.batch_size`.
    #[serde(default = "default_max_ack_pending")]
    pub max_ack_pending: i64,
    /// Consumer redelivery backoff steps in milliseconds: the n-th delivery of a message is
    /// redelivered after the n-th step (the last step for later ones). With it the server
    /// uses the first step as AckWait and ignores `ack_wait_ms`; jetsink's keep-alive
    /// follows the shortest step.
    #[serde(default)]
    pub backoff_ms: Vec<u64>,
    /// Where a new consumer starts: `all` (default), `new`, `last`, `last_per_subject`.
    #[serde(default)]
    pub deliver_policy: DeliverPolicy,
    /// Create the stream with these settings when it does not exist.
    #[serde(default)]
    pub create_stream: Option<CreateStreamConfig>,
    /// Random subject buckets: one filtered durable consumer per bucket subject
    /// (`<prefix>.0` … `<prefix>.<count-1>`), pulled in a random interleaving.
    #[serde(default)]
    pub buckets: Option<BucketsConfig>,
    /// NATS connection group: sinks with the same group share one connection; a sink
    /// without one gets its own. A connection is a fault domain (a message the client
    /// cannot read drops the connection it arrives on), so sharing trades isolation for
    /// fewer connections. 1-64 letters, digits, `_` or `-`; it is the `connection` label
    /// of the connection metrics, so it must not be another sink's name.
    #[serde(default)]
    pub connection_group: Option<String>,
    /// Active/standby (nats-server 2.11+): instances sharing this consumer pull in one
    /// priority group with a pinned client, so the server delivers to one instance at a
    /// time and pins another when it stops pulling. Off by default; on older servers
    /// start-up refuses it (exit 78). See docs/operations.md, "Running two instances".
    #[serde(default)]
    pub pinned: Option<super::pinned::PinnedConfig>,
}

/// AckWait of a job-queue sink (one with `results`) that does not set `ack_wait_ms`: the
/// job-queue document's 60 s.
pub const JOB_ACK_WAIT_MS: u64 = 60_000;
/// MaxDeliver of a job-queue sink that does not set `max_deliver`: the document's 4.
pub const JOB_MAX_DELIVER: i64 = 4;

impl SourceConfig {
    /// AckWait in milliseconds: the configured value, else the default
    /// [`Self::settle_defaults`] chose (30000 before it ran).
    pub fn ack_wait_ms(&self) -> u64 {
        self.ack_wait_ms.unwrap_or_else(default_ack_wait_ms)
    }

    /// MaxDeliver: the configured value, else the default [`Self::settle_defaults`] chose
    /// (-1 before it ran).
    pub fn max_deliver(&self) -> i64 {
        self.max_deliver.unwrap_or_else(minus_one)
    }

    /// Fills the consumer settings the config left unset: the job-queue document's AckWait
    /// and MaxDeliver when the sink publishes results (`job_queue`), else jetsink's general
    /// defaults. A value the config sets is kept. Returns which of the two were filled
    /// with job-queue defaults, for the `validate` summary.
    pub(crate) fn settle_defaults(&mut self, job_queue: bool) -> JobDefaults {
        let filled = JobDefaults {
            ack_wait: job_queue && self.ack_wait_ms.is_none(),
            max_deliver: job_queue && self.max_deliver.is_none(),
        };
        let (ack_wait, max_deliver) = if job_queue {
            (JOB_ACK_WAIT_MS, JOB_MAX_DELIVER)
        } else {
            (default_ack_wait_ms(), minus_one())
        };
        self.ack_wait_ms.get_or_insert(ack_wait);
        self.max_deliver.get_or_insert(max_deliver);
        filled
    }

    /// The AckWait the server applies: with `backoff_ms`, nats-server (2.9 to 2.14)
    /// replaces AckWait by the first step, and reports that back; `ack_wait_ms` then only
    /// counts when no backoff is set.
    pub fn effective_ack_wait(&self) -> std::time::Duration {
        let ms = self
            .backoff_ms
            .first()
            .copied()
            .unwrap_or(self.ack_wait_ms());
        std::time::Duration::from_millis(ms)
    }

    /// The shortest time the server leaves a delivered, unacknowledged message before it
    /// redelivers it: AckWait, or with `backoff_ms` the shortest step, since the server
    /// times each delivery by its own step (the first delivery by the first, the n-th by
    /// the n-th, the last step for any later one). jetsink's `+WPI` keep-alive beats
    /// twice within it.
    pub fn shortest_redelivery(&self) -> std::time::Duration {
        let ms = self
            .backoff_ms
            .iter()
            .copied()
            .min()
            .unwrap_or(self.ack_wait_ms());
        std::time::Duration::from_millis(ms.max(1))
    }

    /// The consumers this source binds: itself, or one per bucket with derived names and
    /// bucket filters (a stream created by any of them captures every bucket).
    pub fn bindings(&self) -> Vec<SourceConfig> {
        let Some(b) = &self.buckets else {
            return vec![self.clone()];
        };
        b.readers(&self.consumer)
            .into_iter()
            .map(|(consumer, subjects)| {
                let mut s = self.clone();
                s.buckets = None;
                s.consumer = consumer;
                s.subjects = subjects;
                if let Some(cs) = s.create_stream.as_mut() {
                    if cs.subjects.is_empty() {
                        cs.subjects = vec![bucket_wildcard(&b.prefix)];
                    }
                }
                s
            })
            .collect()
    }
}

/// Which consumer settings of a job-queue sink took the job-queue document's default
/// because the config left them unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobDefaults {
    /// `ack_wait_ms` is [`JOB_ACK_WAIT_MS`] by default.
    pub ack_wait: bool,
    /// `max_deliver` is [`JOB_MAX_DELIVER`] by default.
    pub max_deliver: bool,
}

/// A key that, when present, holds a value: `null` is refused like any other wrong type
/// instead of meaning "unset", so the schema's `integer` stays the whole truth.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Where a newly created consumer starts reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliverPolicy {
    /// From the first message in the stream.
    #[default]
    All,
    /// Only messages published after the consumer is created.
    New,
    /// From the last message in the stream.
    Last,
    /// From the last message of each subject.
    LastPerSubject,
}

/// Settings for creating a missing stream.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateStreamConfig {
    /// Subjects the stream captures. Default: the source's filter subjects.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// `limits` (default), `workqueue` or `interest`.
    #[serde(default)]
    pub retention: Retention,
    /// `file` (default) or `memory`.
    #[serde(default)]
    pub storage: StorageKind,
    /// Replicas in a cluster, 1 to 5. Default 1.
    #[serde(default = "one")]
    pub replicas: usize,
    /// Maximum message age in milliseconds; 0 keeps messages forever. Default 0.
    #[serde(default)]
    pub max_age_ms: u64,
    /// Window in milliseconds in which a repeated `Nats-Msg-Id` is dropped. Default 120000.
    #[serde(default = "default_duplicate_window_ms")]
    pub duplicate_window_ms: u64,
}

/// A subject, or a list of subjects.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged, expecting = "a subject string or a list of subject strings")]
enum OneOrMany {
    /// One subject.
    One(String),
    /// Several subjects.
    Many(Vec<String>),
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

pub(crate) fn default_ack_wait_ms() -> u64 {
    30_000
}
pub(crate) fn minus_one() -> i64 {
    -1
}
pub(crate) fn default_max_ack_pending() -> i64 {
    10_000
}
pub(crate) fn one() -> usize {
    1
}
pub(crate) fn default_duplicate_window_ms() -> u64 {
    120_000
}
