//! jetsink moves messages from NATS JetStream into durable destinations and ACKs each
//! message only after the destination has committed it.
//!
//! Modules and their roles:
//! - [`shared`]: the names every layer shares (config issues, name and subject rules, the
//!   idempotency key, NATS connection settings, metadata value rules); imports nothing.
//! - [`config`]: the JSON config, strict parsing, validation with JSON paths.
//! - [`envelope`]: a delivered message normalized for destinations (pure).
//! - [`crypto`]: payload encryption at rest: key ring, sealed format, the encryption stage.
//! - [`metadata`]: priority, classification and labels from headers and subject rules (pure).
//! - [`nats`]: connecting, binding stream and consumer, pulling bounded batches.
//! - [`pipeline`]: retry policy and the per-sink runner, the only code that ACKs.
//! - [`sinks`]: the `Sink` trait, its error classes, one folder per destination (its
//!   settings included), and the registry that lists them.
//! - [`dlq`]: dead-letter copies and the max-deliveries advisory listener.
//! - [`jobs`]: job-queue mode: job ids, results, and their publication before the ACK;
//!   the client side (publish a job, wait for its result) shared by `submit` and [`api`].
//! - [`api`]: the synchronous HTTP job API (opt-in `api` section).
//! - [`metrics`], [`health`], [`server`]: Prometheus metrics, liveness/readiness, HTTP.
//! - [`listener`]: how both HTTP listeners accept and serve connections, within limits.
//! - [`cmd`]: one module per command of the `jetsink` binary: `run` (the daemon's
//!   wiring), `quickstart`, `validate`, `schema`, `publish` (the test publisher), `bench`
//!   (the benchmark against the bare-consumer ceiling), `submit`, `metrics show`,
//!   `decrypt`, `keygen`, `replay`, `pause` and `resume`, `dlq replay`; and `cli`, the
//!   command tree `main.rs` calls.
//! - [`notify`]: systemd readiness, stopping and watchdog notifications.
//! - [`logging`], [`exit`]: log setup and process exit codes.
//! - [`telemetry`]: OpenTelemetry spans of every message's write, exported over OTLP.
//! - [`files`]: the bounded reader of every file an operator names (config, keys, secrets).
//! - [`allocator`]: how soon the binary's allocator returns freed memory.
#![deny(missing_docs)]

pub mod allocator;
pub mod api;
pub mod cmd;
pub mod config;
pub mod crypto;
pub mod daemon;
pub mod dlq;
pub mod envelope;
pub mod exit;
pub mod files;
pub mod health;
pub mod jobs;
pub mod listener;
pub mod logging;
pub mod metadata;
pub mod metrics;
pub mod metrics_snapshot;
pub mod nats;
pub mod notify;
pub mod pipeline;
pub mod server;
pub mod shared;
pub mod sinks;
pub mod telemetry;
