//! The `delivery.shuffle` section: the shuffler's buffer, its flush interval, their
//! validation, and the pure check made against the live consumer at start-up.
//!
//! The shuffler collects up to `buffer` messages across pulls, shuffles them uniformly and
//! hands them to the destination in batches of `delivery.batch_size`; each message is
//! ACKed only after its batch committed. Every buffered message is unacknowledged on the
//! server, so the buffer counts toward the consumer's MaxAckPending: [`check_consumer`]
//! refuses a consumer that could not carry it. The run-time stage is
//! `crate::pipeline::shuffle`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::randomizer::MAX_UNACKED;
use crate::shared::issue::Issue;

/// Largest `flush_ms`: one hour, the randomizer's longest delay.
pub const MAX_FLUSH_MS: u64 = 3_600_000;

/// `delivery.shuffle` (opt-in, a jetsink extension of the source document's "shuffle
/// batches and republish"): collect up to `buffer` messages across pulls, shuffle them
/// uniformly, write them in batches of `batch_size`, ACK each after its batch committed.
/// Refused together with an enabled randomizer or priority lanes.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShuffleConfig {
    /// Most messages collected before they are shuffled and written: at least
    /// `delivery.batch_size`; `buffer` + `batch_size` at most 100000 and at most the
    /// consumer's `max_ack_pending` (unless -1). Required.
    pub buffer: usize,
    /// Longest time, in milliseconds, the oldest buffered message waits before a partial
    /// buffer is shuffled and written (1 to 3600000). Default 2000, the randomizer's
    /// default longest delay.
    #[serde(default = "default_flush_ms")]
    pub flush_ms: u64,
}

fn default_flush_ms() -> u64 {
    2_000
}

/// Checks `delivery.shuffle` found at `path` against the sink's `delivery.batch_size`.
pub fn validate_shuffle(cfg: &ShuffleConfig, path: &str, batch_size: usize) -> Vec<Issue> {
    let mut out: Vec<Issue> = validate_buffer(cfg.buffer, &format!("{path}.buffer"), batch_size)
        .into_iter()
        .collect();
    if !(1..=MAX_FLUSH_MS).contains(&cfg.flush_ms) {
        out.push(Issue {
            path: format!("{path}.flush_ms"),
            message: format!("must be between 1 and {MAX_FLUSH_MS}, got {}", cfg.flush_ms),
        });
    }
    out
}

/// Checks the size of a buffer of pulled batches (the shuffler's `buffer`, the s3
/// `rollover.max_messages`) found at `path`: at least one batch, and with the batch pulled
/// ahead within [`MAX_UNACKED`], as all of it stays unacknowledged at once.
pub fn validate_buffer(buffer: usize, path: &str, batch_size: usize) -> Option<Issue> {
    let upper = MAX_UNACKED.saturating_sub(batch_size);
    (buffer < batch_size || buffer > upper).then(|| Issue {
        path: path.to_string(),
        message: format!(
            "must be between delivery.batch_size ({batch_size}) and {MAX_UNACKED} - \
             batch_size = {upper}, got {buffer}: the buffer plus the batch pulled ahead stay \
             unacknowledged at once"
        ),
    })
}

/// The start-up check of a buffer of pulled batches (the shuffler's, or an s3
/// `rollover`'s) against the consumer's MaxAckPending (the live value at start-up, the
/// configured one in `validate`): it must be -1 or at least `buffer` + `batch_size` — the
/// buffer and the batch pulled ahead while it is written. A smaller cap would stop
/// delivery before the buffer fills, so every flush would wait for the timer. `setting`
/// names the buffer's size (`delivery.shuffle.buffer`). Returns the explanation of the
/// problem, if any.
pub fn check_consumer(
    buffer: usize,
    setting: &str,
    batch_size: usize,
    max_ack_pending: i64,
) -> Option<String> {
    let needed = buffer.saturating_add(batch_size);
    let needed_i64 = i64::try_from(needed).unwrap_or(i64::MAX);
    (max_ack_pending != -1 && max_ack_pending < needed_i64).then(|| {
        format!(
            "consumer max_ack_pending is {max_ack_pending}; with {setting} ({buffer}) it must be \
             -1 or at least {setting} + delivery.batch_size ({batch_size}) = {needed}: every \
             buffered message stays unacknowledged until it is written, next to the batch \
             pulled ahead, so a smaller cap stops delivery before the buffer fills"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(buffer: usize, flush_ms: u64) -> ShuffleConfig {
        ShuffleConfig { buffer, flush_ms }
    }

    #[test]
    fn a_buffer_of_at_least_one_batch_within_the_unacked_ceiling_is_accepted() {
        assert!(validate_shuffle(&cfg(500, 2000), "d.shuffle", 500).is_empty());
        assert!(validate_shuffle(&cfg(99_500, 1), "d.shuffle", 500).is_empty());
    }

    #[test]
    fn a_buffer_below_a_batch_or_past_the_ceiling_is_refused_with_its_path() {
        for b in [0, 499, 99_501] {
            let issues = validate_shuffle(&cfg(b, 2000), "d.shuffle", 500);
            assert_eq!(issues.len(), 1, "{b}");
            assert_eq!(issues[0].path, "d.shuffle.buffer");
        }
    }

    #[test]
    fn a_flush_interval_out_of_range_is_refused() {
        for f in [0, MAX_FLUSH_MS + 1] {
            let issues = validate_shuffle(&cfg(1000, f), "d.shuffle", 100);
            assert_eq!(issues[0].path, "d.shuffle.flush_ms");
        }
    }

    #[test]
    fn max_ack_pending_must_carry_the_buffer_and_a_batch() {
        let at = "delivery.shuffle.buffer";
        assert!(check_consumer(1000, at, 100, -1).is_none());
        assert!(check_consumer(1000, at, 100, 1100).is_none());
        let p = check_consumer(1000, at, 100, 1099).unwrap();
        assert!(
            p.contains("1099") && p.contains("1100") && p.contains(at),
            "{p}"
        );
    }
}
