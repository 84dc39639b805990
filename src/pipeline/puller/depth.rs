//! How many batches a sink keeps pulled ahead of the one in hand.
//!
//! With one, the server delivers nothing while that batch waits for the runner: each pull
//! starts only once the runner takes the batch before it. With two, the server is already
//! delivering the next whenever the destination writes slower than it delivers, which is
//! most of the time with a backlog (issue 27: SQLite 0.67–0.72 → 0.73–0.76 of the ceiling
//! at 200 B, 0.54–0.56 → 0.60–0.63 at 4 KiB, in alternated runs of one build; strict lanes
//! 5 % faster, their urgent p99 unchanged). The pull task pulls the second only after a
//! full pull (a backlog), so a sink keeping up with a trickle pulls as before, one batch
//! gathering what arrived during the write.

use crate::config::buckets::BucketPull;
use crate::config::lanes::ConsumerPull;
use crate::config::SinkSpec;

/// Batches kept pulled ahead where [`pull_depth`] allows more than one.
pub(super) const PULL_DEPTH: usize = 2;

/// [`PULL_DEPTH`], when the consumer's MaxAckPending as the server has it
/// (`max_ack_pending`) carries the batches pulled ahead besides the batches being written
/// and what the shuffler, an s3 `rollover` or the randomizer holds; else one. With several
/// consumers (per-lane consumers, buckets read in turn) the pull task draws each next
/// visiting order itself, so strict lanes still ask the first lane first on every pull.
/// One for buckets pulled all at once (each pull already asks every bucket) and for a
/// job-queue worker (`results`), so the jobs it has not started stay with the stream for
/// another worker to take.
pub(super) fn pull_depth(spec: &SinkSpec, consumers: usize, max_ack_pending: i64) -> usize {
    let d = &spec.delivery;
    let concurrent = consumers > 1
        && spec
            .source
            .buckets
            .as_ref()
            .is_some_and(|b| b.pull == BucketPull::Concurrent);
    if concurrent || spec.results.is_some() {
        return 1;
    }
    let held = match (&d.shuffle, spec.destination.accumulate()) {
        (Some(s), _) => s.buffer,
        (None, Some(a)) => a.messages,
        (None, None) if d.randomizer.enabled => d.randomizer.max_window,
        (None, None) => 0,
    };
    let writing = d.batches_in_flight.max(1) as usize;
    // Strict lane pulls can leave one batch more: the next lane's, pulled beside the probe
    // that found the first lane's backlog beginning (`fetch_strict`).
    let strict = consumers > 1 && d.priority_lanes.consumer_pull == ConsumerPull::Strict;
    let ahead = PULL_DEPTH + usize::from(strict);
    let needed = held.saturating_add((ahead + writing).saturating_mul(d.batch_size));
    if max_ack_pending == -1 || i64::try_from(needed).is_ok_and(|n| max_ack_pending >= n) {
        PULL_DEPTH
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::{json, Value};

    fn spec(delivery: Value, destination: Value) -> SinkSpec {
        let cfg = json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"a": {
                "source": {"stream": "S", "consumer": "c"},
                "delivery": delivery,
                "destination": destination
            }}
        });
        let mut c = Config::from_json_str(&cfg.to_string()).expect("valid");
        c.sinks.remove(0)
    }

    fn file() -> Value {
        json!({"type": "file", "directory": "out"})
    }

    #[test]
    fn a_plain_sink_pulls_two_ahead_when_max_ack_pending_carries_them() {
        let s = spec(json!({"batch_size": 500}), file());
        assert_eq!(pull_depth(&s, 1, 10_000), 2);
        assert_eq!(pull_depth(&s, 1, -1), 2, "unlimited");
        // In hand plus two ahead: exactly three batches fit.
        assert_eq!(pull_depth(&s, 1, 1_500), 2);
        assert_eq!(pull_depth(&s, 1, 1_499), 1);
        assert_eq!(pull_depth(&s, 1, 500), 1);
    }

    #[test]
    fn concurrent_buckets_and_job_queue_workers_pull_one_ahead() {
        let plain = spec(json!({}), file());
        assert_eq!(
            pull_depth(&plain, 3, -1),
            2,
            "per-lane consumers, buckets in turn"
        );
        let lanes = spec(
            json!({"priority_lanes": {"enabled": true, "default_lane": "routine", "lanes": [
                {"name": "urgent", "weight": 3, "subjects": ["s.urgent"]},
                {"name": "routine", "weight": 1, "subjects": ["s.routine"]}
            ]}}),
            file(),
        );
        assert_eq!(pull_depth(&lanes, 1, -1), 2, "in-batch lanes");
        let mut concurrent = spec(json!({}), file());
        concurrent.source.buckets = Some(
            serde_json::from_value(json!({"prefix": "b", "count": 4, "pull": "concurrent"}))
                .expect("buckets"),
        );
        assert_eq!(pull_depth(&concurrent, 4, -1), 1, "every bucket at once");
        let mut jobs = spec(json!({}), file());
        jobs.results = Some(
            serde_json::from_value(json!({"subject_prefix": "jobs.results"})).expect("results"),
        );
        assert_eq!(pull_depth(&jobs, 1, -1), 1);
    }

    #[test]
    fn what_the_shuffler_or_the_randomizer_holds_counts_against_max_ack_pending() {
        let shuffled = spec(
            json!({"batch_size": 100, "shuffle": {"buffer": 1000}}),
            file(),
        );
        assert_eq!(pull_depth(&shuffled, 1, 1_300), 2);
        assert_eq!(pull_depth(&shuffled, 1, 1_299), 1);
        let randomized = spec(
            json!({"batch_size": 100, "randomizer": {"enabled": true, "max_window": 1000}}),
            file(),
        );
        assert_eq!(pull_depth(&randomized, 1, 1_300), 2);
        assert_eq!(pull_depth(&randomized, 1, 1_299), 1);
    }

    #[test]
    fn strict_lanes_count_the_batch_pulled_beside_the_probe() {
        let strict = spec(
            json!({"batch_size": 500, "priority_lanes": {"enabled": true, "default_lane": "routine",
                "consumer_pull": "strict", "lanes": [
                {"name": "urgent", "subjects": ["s.urgent"]},
                {"name": "routine", "subjects": ["s.routine"]}
            ]}}),
            file(),
        );
        assert_eq!(pull_depth(&strict, 2, 2_000), 2);
        assert_eq!(pull_depth(&strict, 2, 1_999), 1);
        assert_eq!(pull_depth(&strict, 2, -1), 2);
    }

    #[test]
    fn a_second_batch_in_flight_counts_too() {
        let pg = json!({"type": "postgres", "host": "127.0.0.1", "user": "postgres", "table": "t"});
        let s = spec(json!({"batch_size": 500, "batches_in_flight": 2}), pg);
        assert_eq!(pull_depth(&s, 1, 2_000), 2);
        assert_eq!(pull_depth(&s, 1, 1_999), 1);
    }
}
