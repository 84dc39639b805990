//! The sink's `delivery` section: batching, timeouts, retry, and the randomizer, including
//! the randomizer's offline check of the consumer it will run on.

use super::paths::SinkPaths;
use crate::config::destination::DestinationConfig;
use crate::config::randomizer;
use crate::config::raw::{DeliveryConfig, SourceConfig};
use crate::config::shuffle;
use crate::shared::issue::Issues;

/// Checks `delivery.randomizer`, and the consumer settings it needs unless told to skip
/// them.
pub(crate) fn check_randomizer(
    d: &DeliveryConfig,
    source: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    issues.0.extend(randomizer::validate_randomizer(
        &d.randomizer,
        &format!("{}.randomizer", p.delivery),
        d.batch_size,
    ));
    if d.randomizer.enabled && !d.randomizer.skip_startup_checks {
        // The same checks run against the live consumer at start-up; catching them here
        // lets `validate` report them offline.
        for problem in randomizer::check_consumer(
            &d.randomizer,
            d.batch_size,
            source.max_ack_pending,
            source.max_deliver(),
            source.ack_wait_ms(),
            d.batch_timeout_ms,
        ) {
            issues.push(format!("{}.randomizer", p.delivery), problem);
        }
    }
}

/// Checks `delivery.shuffle`: its ranges, the stages it cannot run with, and (offline) the
/// configured `max_ack_pending` it needs, which start-up checks again on the live consumer.
pub(crate) fn check_shuffle(
    d: &DeliveryConfig,
    source: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let Some(cfg) = &d.shuffle else {
        return;
    };
    let at = format!("{}.shuffle", p.delivery);
    issues
        .0
        .extend(shuffle::validate_shuffle(cfg, &at, d.batch_size));
    if d.randomizer.enabled {
        issues.push(
            at.clone(),
            format!(
                "cannot be combined with {}.randomizer.enabled: both reorder messages and both \
                 hold messages unacknowledged against max_ack_pending; choose one",
                p.delivery
            ),
        );
    }
    if d.priority_lanes.enabled {
        issues.push(
            at.clone(),
            format!(
                "cannot be combined with {}.priority_lanes.enabled: a shuffle would undo the \
                 lane order",
                p.delivery
            ),
        );
    }
    let buffer = format!("{at}.buffer");
    consumer_carries(cfg.buffer, &buffer, d.batch_size, source, p, issues);
}

/// Checks, offline, that the configured `max_ack_pending` carries a buffer of `size`
/// messages (set at `setting`) and a batch; start-up checks again on the live consumer.
fn consumer_carries(
    size: usize,
    setting: &str,
    batch_size: usize,
    source: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let max_ack_pending = source.max_ack_pending;
    if let Some(problem) = shuffle::check_consumer(size, setting, batch_size, max_ack_pending) {
        issues.push(
            setting.to_string(),
            format!("{problem} (see {}.max_ack_pending)", p.source),
        );
    }
}

/// Checks a destination that accumulates several batches per write (s3 `rollover`): its
/// size against the batch and the unacknowledged ceiling, the stages it cannot run with
/// (each would reorder or hold the same messages), and the `max_ack_pending` it needs.
pub(crate) fn check_rollover(
    dest: &DestinationConfig,
    d: &DeliveryConfig,
    source: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let Some(a) = dest.accumulate() else {
        return;
    };
    let at = format!("{}.{}", p.destination, a.key);
    let size_at = format!("{at}.{}", a.messages_key);
    issues
        .0
        .extend(shuffle::validate_buffer(a.messages, &size_at, d.batch_size));
    let conflicts = [
        (
            d.shuffle.is_some(),
            "shuffle",
            "the shuffler writes its buffer in shuffled batches",
        ),
        (
            d.randomizer.enabled,
            "randomizer.enabled",
            "the randomizer holds messages unacknowledged against max_ack_pending too",
        ),
        (
            d.priority_lanes.enabled,
            "priority_lanes.enabled",
            "a buffer written whole would undo the lane order",
        ),
    ];
    for (on, key, why) in conflicts {
        if on {
            issues.push(
                at.clone(),
                format!(
                    "cannot be combined with {}.{key}: {why}; choose one",
                    p.delivery
                ),
            );
        }
    }
    consumer_carries(a.messages, &size_at, d.batch_size, source, p, issues);
}

/// Checks `delivery.linger_ms`: a lingering batch is held unacknowledged, so the wait
/// must stay well inside AckWait (half of it leaves the other half for the write), or a
/// slow write after a long linger would see its messages delivered again.
fn check_linger(d: &DeliveryConfig, ack_wait_ms: u64, p: &SinkPaths, issues: &mut Issues) {
    let Some(linger) = d.linger_ms else {
        return;
    };
    let at = format!("{}.linger_ms", p.delivery);
    issues.range(at.clone(), linger, 0, 10_000);
    if linger > 0 && linger.saturating_mul(2) >= ack_wait_ms {
        issues.push(
            at,
            format!(
                "must be below half the source's ack_wait_ms ({ack_wait_ms}): a lingering batch \
                 is held unacknowledged, and its write needs the other half; got {linger}"
            ),
        );
    }
}

/// Checks the batch, timeout and retry ranges; `ack_wait_ms` is the source's, which the
/// batch timeout must stay below.
pub(crate) fn check(d: &DeliveryConfig, ack_wait_ms: u64, p: &SinkPaths, issues: &mut Issues) {
    issues.range(
        format!("{}.batch_size", p.delivery),
        d.batch_size,
        1,
        10_000,
    );
    issues.range(
        format!("{}.max_batch_bytes", p.delivery),
        d.max_batch_bytes,
        1_024,
        64 * 1024 * 1024,
    );
    issues.range(
        format!("{}.batch_timeout_ms", p.delivery),
        d.batch_timeout_ms,
        10,
        60_000,
    );
    if d.batch_timeout_ms >= ack_wait_ms {
        issues.push(
            format!("{}.batch_timeout_ms", p.delivery),
            format!(
                "must be below the source's ack_wait_ms ({}), got {}",
                ack_wait_ms, d.batch_timeout_ms
            ),
        );
    }
    check_linger(d, ack_wait_ms, p, issues);
    issues.range(
        format!("{}.shutdown_timeout_ms", p.delivery),
        d.shutdown_timeout_ms,
        0,
        600_000,
    );
    let r = &d.retry;
    issues.range(
        format!("{}.retry.initial_backoff_ms", p.delivery),
        r.initial_backoff_ms,
        1,
        60_000,
    );
    if r.max_backoff_ms < r.initial_backoff_ms || r.max_backoff_ms > 3_600_000 {
        issues.push(
            format!("{}.retry.max_backoff_ms", p.delivery),
            format!(
                "must be between initial_backoff_ms ({}) and 3600000, got {}",
                r.initial_backoff_ms, r.max_backoff_ms
            ),
        );
    }
    issues.range(
        format!("{}.retry.max_held_ms", p.delivery),
        r.max_held_ms,
        1_000,
        604_800_000,
    );
    if let Some(ms) = r.refused_delay_ms {
        issues.range(
            format!("{}.retry.refused_delay_ms", p.delivery),
            ms,
            0,
            3_600_000,
        );
    }
    if !(1.0..=10.0).contains(&r.multiplier) {
        issues.push(
            format!("{}.retry.multiplier", p.delivery),
            format!("must be between 1.0 and 10.0, got {}", r.multiplier),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(max_held_ms: u64) -> Vec<String> {
        let mut d = DeliveryConfig::default();
        d.retry.max_held_ms = max_held_ms;
        let mut issues = Issues::default();
        check(&d, 30_000, &SinkPaths::multi("sinks.orders"), &mut issues);
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn a_linger_must_stay_below_half_the_ack_wait_and_within_its_range() {
        let with = |linger: u64, ack_wait: u64| {
            let d = DeliveryConfig {
                linger_ms: Some(linger),
                ..DeliveryConfig::default()
            };
            let mut issues = Issues::default();
            check(&d, ack_wait, &SinkPaths::multi("sinks.orders"), &mut issues);
            issues.0.iter().map(|i| i.to_string()).collect::<Vec<_>>()
        };
        assert!(with(0, 2_000).is_empty());
        assert!(with(999, 2_000).is_empty());
        let half = with(1_000, 2_000);
        assert_eq!(half.len(), 1, "{half:?}");
        assert!(
            half[0].starts_with("sinks.orders.delivery.linger_ms: must be below half the source's ack_wait_ms (2000)"),
            "{half:?}"
        );
        let long = with(10_001, 60_000);
        assert_eq!(long.len(), 1, "{long:?}");
        assert!(long[0].contains("must be between 0 and 10000"), "{long:?}");
    }

    /// The issues of an s3 sink with `rollover` and the given delivery and source tweaks.
    fn rollover_problems(
        rollover: serde_json::Value,
        tweak: impl FnOnce(&mut DeliveryConfig, &mut SourceConfig),
    ) -> Vec<String> {
        let value = serde_json::json!({"type": "s3", "bucket": "archive", "rollover": rollover});
        let dest = crate::config::destination::parse("sinks.a.destination", value).expect("s3");
        let mut d = DeliveryConfig {
            batch_size: 100,
            ..DeliveryConfig::default()
        };
        let mut source: SourceConfig =
            serde_json::from_value(serde_json::json!({"stream": "S", "consumer": "c"}))
                .expect("source");
        tweak(&mut d, &mut source);
        let mut issues = Issues::default();
        check_rollover(
            &dest,
            &d,
            &source,
            &SinkPaths::multi("sinks.a"),
            &mut issues,
        );
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn rollover_max_messages_is_at_least_a_batch_and_within_the_unacked_ceiling() {
        let ok = |n: usize| {
            rollover_problems(serde_json::json!({"max_messages": n}), |_, s| {
                s.max_ack_pending = -1
            })
        };
        assert!(ok(100).is_empty());
        assert!(ok(99_900).is_empty());
        for n in [99, 99_901] {
            let got = ok(n);
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(
                got[0].starts_with("sinks.a.destination.rollover.max_messages: must be between"),
                "{got:?}"
            );
        }
    }

    #[test]
    fn rollover_is_refused_with_a_shuffle_randomizer_or_lanes_naming_both_paths() {
        type Tweak = fn(&mut DeliveryConfig);
        let cases: [(Tweak, &str); 3] = [
            (
                |d| {
                    d.shuffle = Some(crate::config::shuffle::ShuffleConfig {
                        buffer: 100,
                        flush_ms: 10,
                    })
                },
                "sinks.a.delivery.shuffle",
            ),
            (
                |d| d.randomizer.enabled = true,
                "sinks.a.delivery.randomizer.enabled",
            ),
            (
                |d| d.priority_lanes.enabled = true,
                "sinks.a.delivery.priority_lanes.enabled",
            ),
        ];
        for (tweak, other) in cases {
            let got = rollover_problems(serde_json::json!({"max_messages": 1000}), |d, _| tweak(d));
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(
                got[0].starts_with("sinks.a.destination.rollover: cannot be combined with"),
                "{got:?}"
            );
            assert!(got[0].contains(other), "{got:?}");
        }
    }

    #[test]
    fn rollover_needs_max_ack_pending_of_the_buffer_and_a_batch() {
        let with = |map: i64| {
            rollover_problems(serde_json::json!({"max_messages": 1000}), |_, s| {
                s.max_ack_pending = map
            })
        };
        assert!(with(1100).is_empty());
        assert!(with(-1).is_empty());
        let got = with(1099);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with(
                "sinks.a.destination.rollover.max_messages: consumer max_ack_pending is 1099"
            ),
            "{got:?}"
        );
        assert!(got[0].contains("sinks.a.source.max_ack_pending"), "{got:?}");
        assert!(got[0].contains("1100"), "{got:?}");
    }

    #[test]
    fn max_held_ms_defaults_to_ten_minutes_and_is_range_checked_with_its_path() {
        assert_eq!(DeliveryConfig::default().retry.max_held_ms, 600_000);
        assert!(problems(600_000).is_empty());
        for bad in [0, 999, 604_800_001] {
            let got = problems(bad);
            assert_eq!(
                got,
                vec![format!(
                    "sinks.orders.delivery.retry.max_held_ms: must be between 1000 and \
                     604800000, got {bad}"
                )]
            );
        }
    }
}
