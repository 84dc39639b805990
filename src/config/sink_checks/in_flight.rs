//! `delivery.batches_in_flight`: two batches written at once only where that keeps every
//! promise — a destination with writers of its own, and no stage that needs the batches
//! one after another.

use super::paths::SinkPaths;
use crate::config::destination::DestinationConfig;
use crate::config::raw::DeliveryConfig;
use crate::shared::idempotency::IdempotencyKey;
use crate::shared::issue::Issues;

/// The most batches a sink writes at once.
const MOST: u32 = 2;

/// Checks the range, the destination, and the stages two batches in flight cannot run
/// with; `results` says whether the sink is in job-queue mode.
pub(crate) fn check(
    dest: &DestinationConfig,
    d: &DeliveryConfig,
    results: bool,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let at = format!("{}.batches_in_flight", p.delivery);
    issues.range(at.clone(), d.batches_in_flight, 1, MOST);
    if d.batches_in_flight < 2 {
        return;
    }
    if !dest.writes_batches_at_once() {
        issues.push(
            at.clone(),
            format!(
                "the {} destination writes one batch at a time; 2 needs postgres or mysql",
                dest.kind()
            ),
        );
    }
    let conflicts = [
        (
            d.randomizer.enabled,
            format!("{}.randomizer.enabled", p.delivery),
            "the randomizer decides each batch after the one before",
        ),
        (
            d.shuffle.is_some(),
            format!("{}.shuffle", p.delivery),
            "the shuffler writes its buffer a part at a time",
        ),
        (
            results,
            p.key("results"),
            "a job's result is published before the next job is written",
        ),
        (
            d.idempotency_key == IdempotencyKey::MessageId,
            format!("{}.idempotency_key", p.delivery),
            "two messages with one Nats-Msg-Id in two batches could commit in either order",
        ),
    ];
    for (on, other, why) in conflicts {
        if on {
            issues.push(
                at.clone(),
                format!("cannot be combined with {other}: {why}; keep 1"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(
        destination: serde_json::Value,
        tweak: impl FnOnce(&mut DeliveryConfig),
    ) -> Vec<String> {
        problems_with(destination, false, tweak)
    }

    fn problems_with(
        destination: serde_json::Value,
        results: bool,
        tweak: impl FnOnce(&mut DeliveryConfig),
    ) -> Vec<String> {
        let dest =
            crate::config::destination::parse("sinks.a.destination", destination).expect("parses");
        let mut d = DeliveryConfig {
            batches_in_flight: 2,
            ..DeliveryConfig::default()
        };
        tweak(&mut d);
        let mut issues = Issues::default();
        check(
            &dest,
            &d,
            results,
            &SinkPaths::multi("sinks.a"),
            &mut issues,
        );
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    fn postgres() -> serde_json::Value {
        serde_json::json!({"type": "postgres", "host": "db", "table": "events"})
    }

    #[test]
    fn two_batches_in_flight_are_taken_by_the_database_destinations_alone() {
        assert!(problems(postgres(), |_| {}).is_empty());
        let mysql = serde_json::json!({"type": "mysql", "host": "db", "table": "events"});
        assert!(problems(mysql, |_| {}).is_empty());
        for dest in [
            serde_json::json!({"type": "sqlite", "path": "/var/lib/a.db"}),
            serde_json::json!({"type": "file", "directory": "/var/lib/a"}),
        ] {
            let got = problems(dest.clone(), |_| {});
            assert_eq!(got.len(), 1, "{dest}: {got:?}");
            assert!(
                got[0].starts_with("sinks.a.delivery.batches_in_flight: the ")
                    && got[0].ends_with("writes one batch at a time; 2 needs postgres or mysql"),
                "{got:?}"
            );
        }
    }

    #[test]
    fn the_count_is_one_or_two() {
        for n in [0, 3] {
            let got = problems(postgres(), |d| d.batches_in_flight = n);
            assert_eq!(
                got,
                [format!(
                    "sinks.a.delivery.batches_in_flight: must be between 1 and 2, got {n}"
                )]
            );
        }
        assert!(problems(postgres(), |d| d.batches_in_flight = 1).is_empty());
    }

    #[test]
    fn stages_that_need_batches_one_after_another_are_refused_naming_both_settings() {
        type Tweak = fn(&mut DeliveryConfig);
        let cases: [(Tweak, &str); 3] = [
            (
                |d| d.randomizer.enabled = true,
                "sinks.a.delivery.randomizer.enabled",
            ),
            (
                |d| {
                    d.shuffle = Some(crate::config::shuffle::ShuffleConfig {
                        buffer: 1000,
                        flush_ms: 100,
                    })
                },
                "sinks.a.delivery.shuffle",
            ),
            (
                |d| d.idempotency_key = IdempotencyKey::MessageId,
                "sinks.a.delivery.idempotency_key",
            ),
        ];
        for (tweak, other) in cases {
            let got = problems(postgres(), tweak);
            assert_eq!(got.len(), 1, "{other}: {got:?}");
            assert!(
                got[0].starts_with(&format!(
                    "sinks.a.delivery.batches_in_flight: cannot be combined with {other}: "
                )),
                "{got:?}"
            );
        }
        let got = problems_with(postgres(), true, |_| {});
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].contains("cannot be combined with sinks.a.results: "),
            "{got:?}"
        );
        // Left at 1, none of them matters.
        let got = problems_with(postgres(), true, |d| {
            d.batches_in_flight = 1;
            d.randomizer.enabled = true;
        });
        assert!(got.is_empty(), "{got:?}");
    }
}
