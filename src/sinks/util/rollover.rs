//! `destination.rollover`, shared by the s3 destination and the file destination's Parquet
//! files: when the runner writes a buffer of pulled batches as one object or file.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::settings::{out_of_range, Accumulate, DEFAULT_MAX_AGE_MS, DEFAULT_MAX_BYTES};

/// `destination.rollover` of an `s3` or Parquet `file` sink: when a buffer of pulled
/// batches is written.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RolloverConfig {
    /// Most messages per write: at least `delivery.batch_size`; `max_messages` +
    /// `batch_size` at most 100000 and at most the consumer's `max_ack_pending` (unless
    /// -1). Required.
    pub max_messages: usize,
    /// Longest time, in milliseconds, the oldest held message waits before a partial
    /// buffer is written (1000 to 3600000). Default 60000.
    #[serde(default = "default_max_age_ms")]
    pub max_age_ms: u64,
    /// Most payload bytes per write: the buffer is written once another full pull
    /// (`delivery.max_batch_bytes`) could take it past this (1048576 to 1073741824).
    /// Default 67108864 (64 MiB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
}

impl RolloverConfig {
    /// What the runner holds for this rollover.
    pub fn accumulate(&self) -> Accumulate {
        Accumulate {
            messages: self.max_messages,
            bytes: usize::try_from(self.max_bytes).unwrap_or(usize::MAX),
            flush_ms: self.max_age_ms,
            key: "rollover",
            messages_key: "max_messages",
        }
    }

    /// The range checks of its keys, named under `rollover.`.
    pub fn problems(&self, out: &mut Vec<(String, String)>) {
        out_of_range(
            out,
            &[
                (
                    "rollover.max_age_ms",
                    self.max_age_ms,
                    MIN_MAX_AGE_MS,
                    MAX_MAX_AGE_MS,
                ),
                (
                    "rollover.max_bytes",
                    self.max_bytes,
                    MIN_MAX_BYTES,
                    MAX_MAX_BYTES,
                ),
            ],
        );
    }
}

/// Shortest `rollover.max_age_ms`.
pub const MIN_MAX_AGE_MS: u64 = 1_000;
/// Longest `rollover.max_age_ms`: one hour, as the shuffler's `flush_ms`.
pub const MAX_MAX_AGE_MS: u64 = 3_600_000;
/// Smallest `rollover.max_bytes`: 1 MiB.
pub const MIN_MAX_BYTES: u64 = 1 << 20;
/// Largest `rollover.max_bytes`: 1 GiB.
pub const MAX_MAX_BYTES: u64 = 1 << 30;

fn default_max_age_ms() -> u64 {
    DEFAULT_MAX_AGE_MS
}

fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}
