//! The config file's shape, close to what the operator typed.
//!
//! Every struct denies unknown keys so a misspelt option is an error, not a silent default.
//! Durations are integers with the unit in the key name. A destination is kept as raw JSON
//! here and read by its `type` later, so its errors name the destination's own keys.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::ApiConfig;
use super::dead_letter::DeadLetterConfig;
use super::destination::DestinationConfig;
use super::encryption::EncryptionConfig;
use super::lanes::PriorityLanesConfig;
use super::metadata::MessageMetadataConfig;
use super::randomizer::RandomizerConfig;
use super::results::ResultsConfig;
use super::shuffle::ShuffleConfig;
pub use super::source::{CreateStreamConfig, DeliverPolicy, SourceConfig};
pub use super::stream::{Retention, StorageKind};
pub use crate::shared::idempotency::IdempotencyKey;
use crate::shared::nats_security::TlsConfig;

/// The whole file. Exactly one of `sinks` (multi-sink shape) or `sink` (single-sink shape)
/// must be present.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// NATS connection; in the single-sink shape also the stream, consumer and subject.
    pub nats: RawNats,
    /// The metrics and health HTTP endpoint.
    #[serde(default)]
    pub http: HttpConfig,
    /// The synchronous HTTP job API (opt-in): submit a job to a sink with `results` and
    /// wait for its result. See docs/job-queue.md.
    #[serde(default)]
    pub api: Option<ApiConfig>,
    /// Log level and format.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// Multi-sink shape: named sinks, each with its own source, delivery and destination.
    #[serde(default)]
    pub sinks: Option<BTreeMap<String, RawSink>>,
    /// Single-sink shape: delivery settings of the one sink (named `default`).
    #[serde(default)]
    pub delivery: Option<DeliveryConfig>,
    /// Single-sink shape: the destination of the one sink.
    #[serde(default)]
    #[schemars(with = "Option<DestinationConfig>")]
    pub sink: Option<Value>,
    /// Single-sink shape: how priority, classification and labels are read.
    #[serde(default)]
    pub message_metadata: Option<MessageMetadataConfig>,
    /// Single-sink shape: where refused messages are copied before they are ACKed.
    #[serde(default)]
    pub dead_letter: Option<DeadLetterConfig>,
    /// Payload encryption at rest: the default of every sink without its own
    /// `encryption` section (and the one sink of the single-sink shape).
    #[serde(default)]
    pub encryption: Option<EncryptionConfig>,
    /// A JSON snapshot of every metric, written to a file periodically (opt-in). See
    /// docs/operations.md.
    #[serde(default)]
    pub metrics: Option<MetricsConfig>,
    /// OpenTelemetry traces of every message's write, exported over OTLP (opt-in). See
    /// docs/operations.md.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

/// The `nats` section.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNats {
    /// Server URLs, e.g. `["nats://127.0.0.1:4222"]`. Default: that one URL.
    #[serde(default)]
    #[schemars(extend("default" = ["nats://127.0.0.1:4222"]))]
    pub servers: Option<Vec<String>>,
    /// Single-sink shape: one server URL (an alternative to `servers`).
    #[serde(default)]
    pub url: Option<String>,
    /// Client connection name. Default `jetsink`.
    #[serde(default = "default_client_name")]
    pub name: String,
    /// Time allowed for the first connection, in milliseconds. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Longest delay between reconnect attempts, in milliseconds. Default 5000.
    #[serde(default = "default_reconnect_delay_max_ms")]
    pub reconnect_delay_max_ms: u64,
    /// Reconnect attempts before giving up; absent or null retries forever.
    #[serde(default)]
    pub max_reconnects: Option<usize>,
    /// Timeout of JetStream API requests and publish acknowledgements, in milliseconds.
    /// Default 5000.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// User name for password authentication.
    #[serde(default)]
    pub user: Option<String>,
    /// Name of the environment variable holding the password (with `user`).
    #[serde(default)]
    pub password_env: Option<String>,
    /// Path of a file holding the password (with `user`); a trailing line break is not
    /// part of it.
    #[serde(default)]
    pub password_file: Option<String>,
    /// Name of the environment variable holding an authentication token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Path of a file holding an authentication token; a trailing line break is not part
    /// of it.
    #[serde(default)]
    pub token_file: Option<String>,
    /// Path of a file holding an NKEY user seed (`SU...`); the server's config lists the
    /// matching public key (`U...`).
    #[serde(default)]
    pub nkey_seed_file: Option<String>,
    /// Path of a NATS `.creds` file (JWT and NKEY seed).
    #[serde(default)]
    pub creds_file: Option<String>,
    /// TLS: the certificate authorities to trust, a client certificate for mutual TLS,
    /// whether TLS is required and whether the handshake comes first.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Single-sink shape: the stream to read.
    #[serde(default)]
    pub stream: Option<String>,
    /// Single-sink shape: the durable consumer name.
    #[serde(default)]
    pub consumer: Option<String>,
    /// Single-sink shape: the consumer's filter subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// Single-sink shape: consumer AckWait in milliseconds.
    #[serde(default)]
    pub ack_wait_ms: Option<u64>,
    /// Single-sink shape: consumer MaxDeliver (-1 = unlimited).
    #[serde(default)]
    pub max_deliver: Option<i64>,
    /// Single-sink shape: consumer MaxAckPending (-1 = unlimited).
    #[serde(default)]
    pub max_ack_pending: Option<i64>,
    /// Single-sink shape: create the stream when it is missing.
    #[serde(default)]
    pub create_stream: Option<CreateStreamConfig>,
}

/// One entry of `sinks`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSink {
    /// The stream and durable consumer this sink reads.
    pub source: SourceConfig,
    /// Batching, retry and shutdown settings.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// Where committed messages go: an object whose `type` names the destination.
    #[schemars(with = "DestinationConfig")]
    pub destination: Value,
    /// How priority, classification and labels are read from headers and subject rules.
    #[serde(default)]
    pub message_metadata: Option<MessageMetadataConfig>,
    /// Where refused messages are copied before they are ACKed.
    #[serde(default)]
    pub dead_letter: Option<DeadLetterConfig>,
    /// Payload encryption at rest; replaces the top-level `encryption` default for this
    /// sink (`{"enabled": false}` opts out of it).
    #[serde(default)]
    pub encryption: Option<EncryptionConfig>,
    /// Job-queue mode: publish each job's result to a results stream before ACKing it.
    #[serde(default)]
    pub results: Option<ResultsConfig>,
}

/// How a sink batches, retries and shuts down.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Most messages per fetched batch (and per destination transaction), 1 to 10000.
    /// Default 500.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Most payload bytes per fetched batch, 1 KiB to 64 MiB. Default 8 MiB. A single
    /// larger message is still fetched on its own.
    #[serde(default = "default_max_batch_bytes")]
    pub max_batch_bytes: usize,
    /// Longest wait for messages when the stream is idle, in milliseconds (10 to 60000;
    /// below the source's AckWait). Default 1000.
    #[serde(default = "default_batch_timeout_ms")]
    pub batch_timeout_ms: u64,
    /// When a pull finds fewer than `batch_size` messages ready, how long it waits for
    /// more before the batch is written, in milliseconds (0 to 10000, 0 = write what is
    /// ready at once; below half the source's AckWait). A full pull (a backlog) never
    /// waits. Default 30; 0 in job-queue mode (`results`) and where batches are collected
    /// anyway (the shuffler, a destination's rollover). A sink pulling several consumers
    /// (subject buckets, lane consumers) never lingers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linger_ms: Option<u64>,
    /// On SIGTERM/SIGINT, how long the batch in hand may still take to commit, in
    /// milliseconds; after it the batch is left unacknowledged for redelivery. Default 10000.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u64,
    /// The key that makes a write idempotent: `stream_sequence` (`<stream>:<sequence>`,
    /// default) or `message_id` (the `Nats-Msg-Id` header, falling back to the stream
    /// sequence when a message has none).
    #[serde(default)]
    pub idempotency_key: IdempotencyKey,
    /// Backoff between attempts while the destination fails transiently.
    #[serde(default)]
    pub retry: RetryConfig,
    /// In-batch priority lanes (weighted round-robin); disabled by default.
    #[serde(default)]
    pub priority_lanes: PriorityLanesConfig,
    /// Delayed-NAK randomizer: breaks strict publish order inside a bounded window;
    /// disabled by default.
    #[serde(default)]
    pub randomizer: RandomizerConfig,
    /// The shuffler (opt-in): collect up to `buffer` messages across pulls, shuffle them,
    /// write them in batches; absent by default. Not with the randomizer or priority lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<ShuffleConfig>,
    /// Batches written at once, 1 or 2. Default 1: each batch is written after the one
    /// before committed. 2 (PostgreSQL and MySQL only, a second set of connections) writes
    /// the next batch while the one before commits — each still ACKed after its own
    /// commit, but two batches may commit in either order; not with the randomizer, the
    /// shuffler, job-queue `results` or `idempotency_key: "message_id"`, and only into a
    /// table keyed by the message.
    #[serde(default = "default_batches_in_flight")]
    pub batches_in_flight: u32,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            batch_size: default_batch_size(),
            max_batch_bytes: default_max_batch_bytes(),
            batch_timeout_ms: default_batch_timeout_ms(),
            linger_ms: None,
            shutdown_timeout_ms: default_shutdown_timeout_ms(),
            idempotency_key: IdempotencyKey::default(),
            retry: RetryConfig::default(),
            priority_lanes: PriorityLanesConfig::default(),
            randomizer: RandomizerConfig::default(),
            shuffle: None,
            batches_in_flight: default_batches_in_flight(),
        }
    }
}

/// Capped exponential backoff with jitter.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// First delay in milliseconds, 1 to 60000. Default 100.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    /// Largest delay in milliseconds, at least `initial_backoff_ms`, at most 3600000.
    /// Default 30000.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// Factor between successive delays, 1.0 to 10.0. Default 2.0.
    #[serde(default = "default_multiplier")]
    pub multiplier: f64,
    /// `none`, `full` (default: uniform in [0, delay]) or `equal` (delay/2 + uniform in
    /// [0, delay/2]).
    #[serde(default)]
    pub jitter: Jitter,
    /// How long a batch is held while the destination fails with an error nobody
    /// recognised (an unknown SQLSTATE or MySQL error number: class `unclassified`), in
    /// milliseconds, 1000 to 604800000. After it the batch is split, and a message that
    /// still fails alone is dead-lettered as `unclassified`, so one such message cannot
    /// stall the sink forever. Known outages (connection lost, server down, deadlock, lock
    /// timeout) are held without any bound. Default 600000 (10 minutes): longer than a
    /// database failover or restart, short enough that one bad message stalls its sink
    /// for minutes, not hours.
    #[serde(default = "default_max_held_ms")]
    pub max_held_ms: u64,
    /// Delay, in milliseconds (0 to 3600000), before a message refused without a
    /// dead-letter copy (metadata, lane or destination refusal) is delivered again.
    /// Default unset: when the consumer would redeliver it had it stayed unacknowledged —
    /// its `backoff_ms` step for that delivery, else `ack_wait_ms` — as the lane document
    /// specifies.
    #[serde(default)]
    pub refused_delay_ms: Option<u64>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            multiplier: default_multiplier(),
            jitter: Jitter::default(),
            max_held_ms: default_max_held_ms(),
            refused_delay_ms: None,
        }
    }
}

/// How much randomness is mixed into a backoff delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// Exactly the computed delay.
    None,
    /// Uniform in [0, delay].
    #[default]
    Full,
    /// Half the delay plus uniform in [0, delay/2].
    Equal,
}

pub use super::http::HttpConfig;
pub use super::metrics::MetricsConfig;
pub use super::telemetry::TelemetryConfig;

/// Log settings.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoggingConfig {
    /// `trace`, `debug`, `info` (default), `warn` or `error`. `RUST_LOG` overrides it.
    #[serde(default = "default_level")]
    pub level: String,
    /// `text` (default) or `json` (one object per line, for log shippers).
    #[serde(default)]
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: default_level(),
            format: LogFormat::default(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

fn default_client_name() -> String {
    "jetsink".into()
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_reconnect_delay_max_ms() -> u64 {
    5_000
}
fn default_request_timeout_ms() -> u64 {
    5_000
}
fn default_batch_size() -> usize {
    500
}
fn default_max_batch_bytes() -> usize {
    8 * 1024 * 1024
}
fn default_batch_timeout_ms() -> u64 {
    1_000
}
fn default_shutdown_timeout_ms() -> u64 {
    10_000
}
fn default_batches_in_flight() -> u32 {
    1
}
fn default_initial_backoff_ms() -> u64 {
    100
}
fn default_max_backoff_ms() -> u64 {
    30_000
}
fn default_max_held_ms() -> u64 {
    600_000
}
fn default_multiplier() -> f64 {
    2.0
}
fn default_level() -> String {
    "info".into()
}
