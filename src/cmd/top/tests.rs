//! The metrics text → rows path: what each column is made of, and that hostile metrics
//! text can neither crash it nor reach the terminal as escape sequences.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::render::{json, table, Snapshot};
use super::rows::{rate, rows, Backlog, Configured, Row, Scrape};
use super::state::{Readiness, SinkState};
use crate::shared::prometheus_text::parse;

fn scrape(text: &str) -> Scrape {
    Scrape {
        samples: parse(text).unwrap(),
        ready: Some(Readiness {
            ok: true,
            ..Readiness::default()
        }),
        server: None,
    }
}

const BEFORE: &str = "\
# TYPE jetsink_messages_acked_total counter
jetsink_messages_acked_total{sink=\"orders\"} 100
jetsink_messages_acked_total{sink=\"audit\"} 7
";

const NOW: &str = "\
# TYPE jetsink_messages_acked_total counter
jetsink_messages_acked_total{sink=\"orders\"} 300
jetsink_messages_acked_total{sink=\"audit\"} 2
jetsink_consumer_pending_messages{sink=\"orders\",consumer=\"a\"} 40
jetsink_consumer_pending_messages{sink=\"orders\",consumer=\"b\"} 2
jetsink_consumer_ack_pending_messages{sink=\"orders\",consumer=\"a\"} 6
jetsink_inflight_messages{sink=\"orders\"} 5
jetsink_shuffle_buffered{sink=\"orders\"} 3
jetsink_rollover_buffered{sink=\"orders\"} 4
jetsink_dlq_published_total{sink=\"orders\",reason=\"destination\"} 2
jetsink_dlq_published_total{sink=\"orders\",reason=\"max_deliveries\"} 1
jetsink_batches_total{sink=\"orders\",outcome=\"committed\"} 30
jetsink_batches_total{sink=\"orders\",outcome=\"retried\"} 4
jetsink_sink_errors_total{sink=\"orders\",class=\"transient\"} 4
jetsink_fetch_errors_total{sink=\"orders\"} 1
jetsink_current_priority_lanes_active{sink=\"orders\"} 2
jetsink_current_priority_lanes_active{sink=\"audit\"} 0
jetsink_randomizer_window{sink=\"audit\"} 0
jetsink_randomizer_delayed_total{sink=\"audit\"} 9
";

fn by_name(rows: Vec<Row>) -> BTreeMap<String, Row> {
    rows.into_iter().map(|r| (r.sink.clone(), r)).collect()
}

#[test]
fn each_column_is_read_from_its_metrics_and_the_rate_from_two_scrapes() {
    let rows = by_name(rows(&scrape(NOW), Some((&scrape(BEFORE), 2.0)), &[]));
    let o = &rows["orders"];
    assert_eq!(o.state, SinkState::Running);
    assert_eq!(o.rate, Some(100.0), "(300 - 100) / 2 s");
    assert_eq!(
        (o.pending, o.ack_pending, o.redelivered),
        (Some(42), Some(6), Some(0))
    );
    assert_eq!(o.backlog_from, Some("daemon"));
    assert_eq!(
        (o.in_batch, o.buffered, o.dead_lettered),
        (Some(5), Some(7), Some(3))
    );
    assert_eq!((o.retries, o.errors), (Some(4), Some(5)));
    assert_eq!((o.lanes_active, o.randomizer_window), (Some(2), None));
    let a = &rows["audit"];
    assert_eq!(
        a.rate,
        Some(1.0),
        "a counter that went down was reset: 2 since"
    );
    assert_eq!((a.lanes_active, a.randomizer_window), (None, Some(0)));
    assert_eq!((a.pending, a.backlog_from), (None, None));
    assert_eq!(
        (a.in_batch, a.retries),
        (None, None),
        "not exported: absent, not 0"
    );
}

#[test]
fn the_servers_backlog_and_the_configs_stages_win_and_a_configured_sink_the_daemon_lacks_is_listed()
{
    let mut now = scrape(NOW);
    let b = Backlog {
        pending: 9,
        ack_pending: 1,
        redelivered: 1,
    };
    now.server = Some(BTreeMap::from([("orders".to_string(), b)]));
    let configured = |name: &str, lanes: bool| Configured {
        name: name.into(),
        lanes,
        randomizer: lanes,
    };
    let rows = by_name(rows(
        &now,
        None,
        &[
            configured("later", false),
            configured("audit", true),
            configured("orders", false),
        ],
    ));
    assert_eq!(rows["orders"].pending, Some(9));
    assert_eq!(rows["orders"].backlog_from, Some("server"));
    assert_eq!(rows["orders"].rate, None, "no rate from one scrape");
    assert_eq!(rows["later"].state, SinkState::Unknown);
    // With a config, lanes and window show where they are configured, used or not.
    assert_eq!(
        (rows["audit"].lanes_active, rows["audit"].randomizer_window),
        (Some(0), Some(0))
    );
    assert_eq!(
        rows["orders"].lanes_active, None,
        "lanes not configured: not shown"
    );
}

#[test]
fn a_rate_needs_a_first_reading_and_a_positive_interval() {
    assert_eq!(rate(None, 5.0, 1.0), None);
    assert_eq!(rate(Some(1.0), 5.0, 0.0), None);
    assert_eq!(rate(Some(1.0), f64::NAN, 1.0), None);
    assert_eq!(rate(Some(1.0), 5.0, 0.5), Some(8.0));
}

#[test]
fn the_text_form_aligns_columns_and_names_last_errors() {
    let mut now = scrape(NOW);
    now.ready = Some(Readiness {
        ok: false,
        problems: vec!["sink audit: destination unavailable: disk full".into()],
        paused: vec![],
    });
    let text = table(&rows(&now, Some((&scrape(BEFORE), 2.0)), &[]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("SINK    STATE    MSG/S  PENDING"),
        "{text}"
    );
    assert!(lines[1].starts_with("audit   holding  1.0    -"), "{text}");
    assert!(lines[2].starts_with("orders  running  100.0  42"), "{text}");
    assert_eq!(lines[3], "audit: disk full");
}

/// One hostile sample line: odd names, label values with escapes, control characters and
/// terminal escape sequences, values that are not counts.
fn hostile_line() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("jetsink_messages_acked_total".to_string()),
        Just("jetsink_inflight_messages".to_string()),
        Just("jetsink_sink_state".to_string()),
        Just("jetsink_consumer_pending_messages".to_string()),
        Just("jetsink_batches_total".to_string()),
        "[a-z_]{1,12}",
    ];
    let value = prop_oneof![
        Just("NaN".to_string()),
        Just("+Inf".to_string()),
        Just("-Inf".to_string()),
        Just("-5".to_string()),
        Just("1e308".to_string()),
        Just("18446744073709551616".to_string()),
        "[0-9]{1,6}(\\.[0-9]{1,3})?",
    ];
    let text = "(\\PC|\u{1b}|\\[|;|\\\\\\\\|\\\\\"|\\\\n|\u{7}){0,12}";
    (
        name,
        text,
        prop_oneof![Just("running".to_string()), text],
        value,
    )
        .prop_map(|(n, sink, state, v)| {
            format!("{n}{{sink=\"{sink}\",state=\"{state}\",outcome=\"retried\"}} {v}")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn hostile_metrics_become_rows_without_a_crash_or_a_control_character(
        before in prop::collection::vec(hostile_line(), 0..12),
        now in prop::collection::vec(hostile_line(), 0..12),
        problems in prop::collection::vec("\\PC{0,20}", 0..4),
        seconds in prop_oneof![Just(0.0), Just(f64::NAN), 0.001f64..100.0],
    ) {
        let (Ok(before), Ok(now)) = (parse(&before.join("\n")), parse(&now.join("\n"))) else {
            return Ok(());
        };
        let before = Scrape { samples: before, ..Scrape::default() };
        let now = Scrape {
            samples: now,
            ready: Some(Readiness { ok: false, problems, paused: vec![] }),
            server: None,
        };
        let rows = rows(&now, Some((&before, seconds)), &[]);
        for r in &rows {
            prop_assert!(r.rate.is_none_or(|x| x.is_finite() && x >= 0.0));
        }
        let text = table(&rows);
        prop_assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        let snapshot = Snapshot { url: "u", ready: None, interval_ms: 1, sinks: &rows, notes: &[] };
        let parsed: serde_json::Value = serde_json::from_str(&json(&snapshot)).unwrap();
        prop_assert_eq!(parsed["sinks"].as_array().map(Vec::len), Some(rows.len()));
    }

    #[test]
    fn any_text_parsed_as_metrics_becomes_rows_without_a_crash(text in "\\PC{0,200}") {
        if let Ok(samples) = parse(&text) {
            let now = Scrape { samples, ..Scrape::default() };
            let _ = table(&rows(&now, Some((&now, 1.0)), &[]));
        }
    }
}
