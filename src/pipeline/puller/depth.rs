//! How many batches a sink keeps pulled ahead of the one in hand.
//!
//! With one, the server delivers nothing while that batch waits for the runner: each pull
//! starts only once the runner takes the batch before it. With two, the server is already
//! delivering the next whenever the destination writes slower than it delivers, which is
//! most of the time with a backlog (issue 27: SQLite 0.67–0.72 → 0.73–0.76 of the ceiling
//! at 200 B, 0.54–0.56 → 0.60–0.63 at 4 KiB, in alternated runs of one build; strict lanes
//! 5 % faster, their urgent p99 unchanged). With four, SQLite wrote faster again in every
//! alternated pair (2–7 %, more at 4 KiB), so a sink that schedules nothing pulls up to
//! four. Strict lanes do too: each chained pull asks the first lane first, and its batches
//! go into the slot ahead of the other lanes' ([`Slot::put_all`]), so an urgent message
//! waits for the batch in hand, not for the routine batches pulled before it (issue 28:
//! strict / lanes off 0.903 → 0.939 by the median of 34 alternated pairs, urgent p99
//! unchanged). In-batch and weighted lanes and the randomizer stay at two, since an urgent
//! message or a delay decision waits behind every batch pulled ahead. The pull task pulls
//! the next only after a full pull (a backlog), so a sink keeping up with a trickle pulls
//! as before, one batch gathering what arrived during the write; past two batches it pulls
//! only while what waits is small ([`Room`]), so payload memory stays at two full pulls
//! ahead.

use crate::config::buckets::BucketPull;
use crate::config::lanes::ConsumerPull;
use crate::config::SinkSpec;
#[cfg(doc)]
use crate::pipeline::keeper::Slot;
use crate::pipeline::room::Room;

/// Batches kept pulled ahead of a backlog by a sink with neither lanes nor the randomizer.
pub(crate) const PULL_DEPTH: usize = 4;
/// Batches kept pulled ahead with in-batch or weighted priority lanes or the randomizer.
pub(crate) const SCHEDULED_DEPTH: usize = 2;

/// The slot's room: the most batches, up to [`PULL_DEPTH`] (or [`SCHEDULED_DEPTH`]), that
/// the consumer's MaxAckPending as the server has it (`max_ack_pending`) carries besides
/// the batches being written and what the shuffler, an s3 `rollover` or the randomizer
/// holds — one batch fewer at a time, down to one. With several consumers (per-lane
/// consumers, buckets read in turn) the pull task draws each next visiting order itself,
/// so strict lanes still ask the first lane first on every pull. One for buckets pulled
/// all at once (each pull already asks every bucket) and for a job-queue worker
/// (`results`), so the jobs it has not started stay with the stream for another worker
/// to take.
pub(super) fn pull_depth(spec: &SinkSpec, consumers: usize, max_ack_pending: i64) -> Room {
    let d = &spec.delivery;
    let room = |batches| Room {
        batches,
        bytes: d.max_batch_bytes,
    };
    let concurrent = consumers > 1
        && spec
            .source
            .buckets
            .as_ref()
            .is_some_and(|b| b.pull == BucketPull::Concurrent);
    if concurrent || spec.results.is_some() {
        return room(1);
    }
    let held = match (&d.shuffle, spec.accumulate()) {
        (Some(s), _) => s.buffer,
        (None, Some(a)) => a.messages,
        (None, None) if d.randomizer.enabled => d.randomizer.max_window,
        (None, None) => 0,
    };
    let writing = d.batches_in_flight.max(1) as usize;
    // Strict lane pulls can leave one batch more: the next lane's, pulled beside the probe
    // that found the first lane's backlog beginning (`fetch_strict`).
    let strict = consumers > 1 && d.priority_lanes.consumer_pull == ConsumerPull::Strict;
    // Strict pulls ask the first lane first on every chained pull, so batches pulled ahead
    // hold back only what arrived after them: strict lanes pull as deep as a plain sink.
    let deepest = if d.randomizer.enabled || (d.priority_lanes.enabled && !strict) {
        SCHEDULED_DEPTH
    } else {
        PULL_DEPTH
    };
    let fits = |depth: usize| {
        let ahead = depth + usize::from(strict);
        let needed = held.saturating_add((ahead + writing).saturating_mul(d.batch_size));
        max_ack_pending == -1 || i64::try_from(needed).is_ok_and(|n| max_ack_pending >= n)
    };
    room((2..=deepest).rev().find(|&depth| fits(depth)).unwrap_or(1))
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

    fn lanes(pull: &str) -> Value {
        json!({"batch_size": 500, "priority_lanes": {"enabled": true, "default_lane": "routine",
            "consumer_pull": pull, "lanes": [
            {"name": "urgent", "weight": 3, "subjects": ["s.urgent"]},
            {"name": "routine", "weight": 1, "subjects": ["s.routine"]}
        ]}})
    }

    fn depth(s: &SinkSpec, consumers: usize, max_ack_pending: i64) -> usize {
        pull_depth(s, consumers, max_ack_pending).batches
    }

    #[test]
    fn a_plain_sink_pulls_four_ahead_and_steps_down_one_batch_at_a_time() {
        let s = spec(json!({"batch_size": 500}), file());
        assert_eq!(depth(&s, 1, 10_000), 4);
        assert_eq!(depth(&s, 1, -1), 4, "unlimited");
        // In hand plus four ahead: exactly five batches fit.
        assert_eq!(depth(&s, 1, 2_500), 4);
        assert_eq!(depth(&s, 1, 2_499), 3);
        assert_eq!(depth(&s, 1, 2_000), 3);
        assert_eq!(depth(&s, 1, 1_999), 2);
        assert_eq!(depth(&s, 1, 1_500), 2);
        assert_eq!(depth(&s, 1, 1_499), 1);
        assert_eq!(depth(&s, 1, 500), 1);
        assert_eq!(depth(&s, 1, 1), 1, "never none");
    }

    #[test]
    fn past_two_batches_what_waits_is_bounded_by_the_pull_byte_cap() {
        let s = spec(
            json!({"batch_size": 500, "max_batch_bytes": 65_536}),
            file(),
        );
        let room = pull_depth(&s, 1, -1);
        assert_eq!(room.bytes, 65_536);
        assert!(room.fits(2, 65_536));
        assert!(!room.fits(2, 65_537));
    }

    #[test]
    fn lanes_and_the_randomizer_pull_two_ahead() {
        let in_batch = spec(lanes("weighted"), file());
        assert_eq!(depth(&in_batch, 1, -1), 2, "in-batch lanes");
        assert_eq!(depth(&in_batch, 2, -1), 2, "per-lane consumers");
        let randomized = spec(
            json!({"batch_size": 100, "randomizer": {"enabled": true, "max_window": 1000}}),
            file(),
        );
        assert_eq!(depth(&randomized, 1, -1), 2);
    }

    #[test]
    fn concurrent_buckets_and_job_queue_workers_pull_one_ahead() {
        let plain = spec(json!({}), file());
        assert_eq!(depth(&plain, 3, -1), 4, "buckets in turn");
        let mut concurrent = spec(json!({}), file());
        concurrent.source.buckets = Some(
            serde_json::from_value(json!({"prefix": "b", "count": 4, "pull": "concurrent"}))
                .expect("buckets"),
        );
        assert_eq!(depth(&concurrent, 4, -1), 1, "every bucket at once");
        let mut jobs = spec(json!({}), file());
        jobs.results = Some(
            serde_json::from_value(json!({"subject_prefix": "jobs.results"})).expect("results"),
        );
        assert_eq!(depth(&jobs, 1, -1), 1);
    }

    #[test]
    fn what_the_shuffler_or_the_randomizer_holds_counts_against_max_ack_pending() {
        let shuffled = spec(
            json!({"batch_size": 100, "shuffle": {"buffer": 1000}}),
            file(),
        );
        assert_eq!(depth(&shuffled, 1, 1_500), 4);
        assert_eq!(depth(&shuffled, 1, 1_499), 3);
        assert_eq!(depth(&shuffled, 1, 1_300), 2);
        assert_eq!(depth(&shuffled, 1, 1_299), 1);
        let randomized = spec(
            json!({"batch_size": 100, "randomizer": {"enabled": true, "max_window": 1000}}),
            file(),
        );
        assert_eq!(depth(&randomized, 1, 1_300), 2);
        assert_eq!(depth(&randomized, 1, 1_299), 1);
    }

    #[test]
    fn strict_lanes_pull_four_ahead_and_count_the_batch_pulled_beside_the_probe() {
        let strict = spec(lanes("strict"), file());
        assert_eq!(depth(&strict, 2, -1), 4);
        // In hand, four ahead and the one beside the probe: six batches.
        assert_eq!(depth(&strict, 2, 3_000), 4);
        assert_eq!(depth(&strict, 2, 2_999), 3);
        assert_eq!(depth(&strict, 2, 2_000), 2);
        assert_eq!(depth(&strict, 2, 1_999), 1);
        // Strict with one consumer (in-batch lanes have nothing to pick) stays at two.
        assert_eq!(depth(&strict, 1, -1), 2);
    }

    #[test]
    fn batches_in_flight_count_too() {
        let pg = json!({"type": "postgres", "host": "127.0.0.1", "user": "postgres", "table": "t"});
        let s = spec(json!({"batch_size": 500, "batches_in_flight": 2}), pg);
        assert_eq!(depth(&s, 1, 3_000), 4);
        assert_eq!(depth(&s, 1, 2_999), 3);
        assert_eq!(depth(&s, 1, 2_000), 2);
        assert_eq!(depth(&s, 1, 1_999), 1);
    }
}
