//! An upsert whose last write wins (`"order": "arrival"`) in a sink with a stage that
//! reorders messages on purpose: accepted, since the config asked for arrival order, with
//! a warning per stage, because each can leave a row holding an older message.

use super::paths::SinkPaths;
use crate::config::destination::DestinationConfig;
use crate::config::raw::{DeliveryConfig, SourceConfig};
use crate::shared::issue::Issues;

/// Warns at the destination's `order` for each reordering stage of the sink.
pub(crate) fn check(
    dest: &DestinationConfig,
    d: &DeliveryConfig,
    s: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    if !dest.last_write_wins() {
        return;
    }
    let stages = [
        (d.randomizer.enabled, format!("{}.randomizer", p.delivery)),
        (d.shuffle.is_some(), format!("{}.shuffle", p.delivery)),
        (s.buckets.is_some(), format!("{}.buckets", p.source)),
        (d.priority_lanes.enabled, p.lanes()),
        (
            d.batches_in_flight >= 2,
            format!("{}.batches_in_flight", p.delivery),
        ),
    ];
    for (on, stage) in stages {
        if on {
            issues.warn(
                format!("{}.order", p.destination),
                format!(
                    "\"arrival\": the last write wins, and {stage} reorders messages, so a \
                     row can end holding an older message than the newest of its key; name an \
                     order column (drop `order` to use the one mapped from $stream_sequence)"
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn warnings(order: serde_json::Value, tweak: impl FnOnce(&mut DeliveryConfig)) -> Vec<String> {
        let dest = crate::config::destination::parse(
            "sinks.a.destination",
            json!({"type": "postgres", "table": "t", "mode": "upsert", "order": order,
                   "columns": {"id": "/id", "seq": "$stream_sequence"}}),
        )
        .expect("parses");
        let mut d = DeliveryConfig::default();
        tweak(&mut d);
        let s: SourceConfig =
            serde_json::from_value(json!({"stream": "S", "consumer": "c"})).expect("source");
        let mut issues = Issues::default();
        check(&dest, &d, &s, &SinkPaths::multi("sinks.a"), &mut issues);
        assert!(issues.0.is_empty(), "warnings only");
        issues.1.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn arrival_order_beside_a_reordering_stage_is_warned_naming_both_paths() {
        let got = warnings(json!("arrival"), |d| {
            d.randomizer.enabled = true;
            d.batches_in_flight = 2;
        });
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("sinks.a.destination.order: \"arrival\": the last write wins, and sinks.a.delivery.randomizer reorders"),
            "{got:?}"
        );
        assert!(
            got[1].contains("sinks.a.delivery.batches_in_flight"),
            "{got:?}"
        );
        assert!(warnings(json!("arrival"), |_| {}).is_empty());
        // An ordered upsert reorders safely.
        let ordered = warnings(json!({"column": "seq"}), |d| d.randomizer.enabled = true);
        assert!(ordered.is_empty(), "{ordered:?}");
    }
}
