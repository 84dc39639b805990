//! Every integration test, as one test binary: each `tests/<name>.rs` is the module
//! `<name>` here, so `cargo test --test integration <name>::` runs one file's tests and
//! `cargo test --test integration <name>::<test>` one test.
//!
//! One binary instead of one per file: each of them linked the whole crate and its
//! dependencies (53 links of the test build), and cargo ran them one after another, so a
//! file holding one long test left the second core idle while it ran. Here the test
//! threads take tests from every file. `tests/structure.rs` fails when a file in `tests/`
//! is not listed below (with `autotests = false` in Cargo.toml, cargo would not run it).

mod common;

mod ack_layout;
mod backlog_gauges;
mod binding;
mod buckets;
mod cli;
mod cli_snapshots;
mod cluster;
mod crash_recovery;
mod dead_letter;
mod dead_letter_limits;
mod deb;
mod deploy;
mod destination_failure;
mod dlq_replay;
mod docs_drift;
mod drain;
mod encryption;
mod examples;
mod exec_worker;
mod fault_matrix;
mod file_two_writers;
mod hostile_files;
mod http_destination;
mod job_api;
mod job_defaults;
mod job_latency;
mod job_queue;
mod keda;
mod lane_consumers;
mod lanes;
mod linger;
mod listener_limits;
mod malformed;
mod metrics_snapshot;
mod mysql;
mod mysql_tls;
mod nats_atomic;
mod nats_destination;
mod nats_security;
mod notify;
mod otlp;
mod owned_files;
mod parquet_archive;
mod pause;
mod pinned;
mod postgres;
mod postgres_tls;
mod pull_inbox;
mod quickstart;
mod randomizer;
mod readme;
mod reload;
mod replay;
mod results_postgres;
mod s3_destination;
mod schema;
mod server_features;
mod shuffle;
mod slow_write;
mod stage_order;
mod structure;
mod top;
mod trace;
mod validate_online;
mod validate_run;
