//! Unit tests of `jetsink metrics show`: parsing, selection and rendering on a fixed
//! exposition, the real registry's output, and the fetch errors.

use super::*;

/// Shaped like the daemon's real output (prometheus crate 0.14).
const EXPOSITION: &str = r#"# HELP jetsink_batches_total Batches by outcome.
# TYPE jetsink_batches_total counter
jetsink_batches_total{outcome="committed",sink="orders"} 12
jetsink_batches_total{outcome="retried",sink="orders"} 0
# HELP jetsink_build_info Always 1.
# TYPE jetsink_build_info gauge
jetsink_build_info{version="0.1.0"} 1
# HELP jetsink_current_priority_lanes_active Lanes in the last batch.
# TYPE jetsink_current_priority_lanes_active gauge
jetsink_current_priority_lanes_active{sink="orders"} 2
# HELP jetsink_nats_connected 1 while connected.
# TYPE jetsink_nats_connected gauge
jetsink_nats_connected 1
# HELP jetsink_priority_lane_batches_total Batches ordered.
# TYPE jetsink_priority_lane_batches_total counter
jetsink_priority_lane_batches_total{sink="orders"} 12
# HELP jetsink_priority_lane_defaulted_total Defaulted.
# TYPE jetsink_priority_lane_defaulted_total counter
jetsink_priority_lane_defaulted_total{sink="orders"} 41
# HELP jetsink_sink_write_seconds Time of one write_batch call.
# TYPE jetsink_sink_write_seconds histogram
jetsink_sink_write_seconds_bucket{sink="orders",le="0.001"} 3
jetsink_sink_write_seconds_bucket{sink="orders",le="+Inf"} 12
jetsink_sink_write_seconds_sum{sink="orders"} 0.0425
jetsink_sink_write_seconds_count{sink="orders"} 12
"#;

fn rows(glob: Option<&str>) -> Vec<String> {
    let samples = parse(EXPOSITION).unwrap();
    select(&samples, glob)
        .iter()
        .map(|s| format!("{} {} {}", s.kind, s.display_name(), s.value))
        .collect()
}

#[test]
fn type_lines_give_the_kind_and_comments_are_skipped() {
    let samples = parse(EXPOSITION).unwrap();
    assert_eq!(samples.len(), 11);
    let first = &samples[0];
    assert_eq!(first.kind, Kind::Counter);
    assert_eq!(first.family, "jetsink_batches_total");
    assert_eq!(
        first.labels,
        vec![
            ("outcome".to_string(), "committed".to_string()),
            ("sink".to_string(), "orders".to_string())
        ]
    );
    assert_eq!(first.value, "12");
    let connected = samples
        .iter()
        .find(|s| s.name == "jetsink_nats_connected")
        .unwrap();
    assert_eq!((connected.kind, connected.labels.len()), (Kind::Gauge, 0));
}

#[test]
fn histogram_samples_belong_to_their_family() {
    let samples = parse(EXPOSITION).unwrap();
    let hist: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.family == "jetsink_sink_write_seconds")
        .collect();
    assert_eq!(hist.len(), 4);
    assert!(hist.iter().all(|s| s.kind == Kind::Histogram));
    assert_eq!(hist.iter().filter(|s| s.is_bucket()).count(), 2);
}

#[test]
fn a_sample_without_type_is_untyped_and_a_timestamp_is_dropped() {
    let samples = parse("foo_count 3 1700000000000\nbar{a=\"b\"} -1.5e3\n").unwrap();
    assert_eq!(samples[0].kind, Kind::Untyped);
    assert_eq!(samples[0].family, "foo_count");
    assert_eq!(samples[0].value, "3");
    assert_eq!(samples[1].value, "-1.5e3");
}

#[test]
fn special_values_parse() {
    let samples = parse("a +Inf\nb -Inf\nc NaN\n").unwrap();
    let values: Vec<&str> = samples.iter().map(|s| s.value.as_str()).collect();
    assert_eq!(values, ["+Inf", "-Inf", "NaN"]);
}

#[test]
fn summary_sum_and_count_take_the_summary_kind() {
    let samples =
        parse("# TYPE rpc summary\nrpc{quantile=\"0.5\"} 1\nrpc_sum 9\nrpc_count 3\n").unwrap();
    assert!(samples.iter().all(|s| s.kind == Kind::Summary));
    assert!(samples.iter().all(|s| s.family == "rpc"));
    assert!(!samples.iter().any(Sample::is_bucket));
}

#[test]
fn label_values_are_unescaped_and_redisplayed_escaped() {
    let line = r#"m{path="C:\\dir",quote="say \"hi\"",nl="a\nb",comma="x,y}",} 1"#;
    let samples = parse(line).unwrap();
    assert_eq!(
        samples[0].labels,
        vec![
            ("path".to_string(), "C:\\dir".to_string()),
            ("quote".to_string(), "say \"hi\"".to_string()),
            ("nl".to_string(), "a\nb".to_string()),
            ("comma".to_string(), "x,y}".to_string()),
        ]
    );
    assert_eq!(
        samples[0].display_name(),
        r#"m{path="C:\\dir",quote="say \"hi\"",nl="a\nb",comma="x,y}"}"#
    );
}

#[test]
fn whitespace_around_labels_is_accepted() {
    let samples = parse("m { a = \"1\" , b=\"2\" }   7\n\n   \n").unwrap();
    assert_eq!(samples[0].labels.len(), 2);
    assert_eq!(samples[0].value, "7");
    assert_eq!(parse("m{} 1").unwrap()[0].labels, vec![]);
}

#[test]
fn malformed_lines_are_errors_naming_the_line() {
    for (text, reason) in [
        ("ok 1\n<html>", "a sample must start with a metric name"),
        ("ok 1\nm", "missing value"),
        ("ok 1\nm one", "the value is not a number"),
        (
            "ok 1\nm 1 2 3",
            "unexpected text after the value and timestamp",
        ),
        ("ok 1\nm 1 soon", "the timestamp is not an integer"),
        ("ok 1\nm{a=1} 1", "a label value must be in double quotes"),
        ("ok 1\nm{a=\"1} 1", "unterminated label value"),
        (
            "ok 1\nm{a=\"1\" b=\"2\"} 1",
            "expected `,` or `}` after a label value",
        ),
        (
            "ok 1\nm{a=\"\\t\"} 1",
            "invalid escape in a label value (\\n, \\\\, \\\")",
        ),
        ("ok 1\nm{=\"1\"} 1", "expected a label name or `}`"),
        ("ok 1\nm{a \"1\"} 1", "expected `=` after a label name"),
        ("ok 1\nm-x 1", "invalid character in the metric name"),
        (
            "ok 1\n# TYPE m",
            "a TYPE line must be `# TYPE <name> <kind>`",
        ),
        (
            "ok 1\n# TYPE m meter",
            "unknown metric kind (counter, gauge, histogram, summary, untyped)",
        ),
    ] {
        assert_eq!(
            parse(text),
            Err(ParseError {
                line: 2,
                reason: reason.to_string()
            }),
            "{text:?}"
        );
    }
}

#[test]
fn an_empty_body_has_no_samples() {
    assert_eq!(parse(""), Ok(vec![]));
    assert_eq!(parse("# only a comment\n"), Ok(vec![]));
}

#[test]
fn glob_matching() {
    for (pattern, text, expected) in [
        ("*", "", true),
        ("*", "anything", true),
        ("", "", true),
        ("", "a", false),
        ("abc", "abc", true),
        ("abc", "abcd", false),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("priority_lane_*", "priority_lane_batches_total", true),
        ("priority_lane_*", "current_priority_lanes_active", false),
        ("*lane*", "current_priority_lanes_active", true),
        ("*_total", "jetsink_acked_total", true),
        ("*_total", "jetsink_total_x", false),
        ("a*b*c", "aXXbYYbZZc", true),
        ("a*b*c", "aXXbYYbZZ", false),
        ("**", "x", true),
        ("*a", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", false),
        ("é?", "éü", true),
        ("ABC", "abc", false),
    ] {
        assert_eq!(
            glob_match(pattern, text),
            expected,
            "{pattern:?} vs {text:?}"
        );
    }
}

#[test]
fn the_glob_works_with_and_without_the_prefix() {
    let expected = vec![
        "counter jetsink_priority_lane_batches_total{sink=\"orders\"} 12",
        "counter jetsink_priority_lane_defaulted_total{sink=\"orders\"} 41",
    ];
    assert_eq!(rows(Some("priority_lane_*")), expected);
    assert_eq!(rows(Some("jetsink_priority_lane_*")), expected);
    assert_eq!(
        rows(Some("current_priority_lanes_active")),
        vec!["gauge jetsink_current_priority_lanes_active{sink=\"orders\"} 2"]
    );
    assert!(rows(Some("lane_*")).is_empty(), "the glob is anchored");
}

#[test]
fn histograms_show_sum_and_count_and_buckets_only_on_request() {
    let sum_count = vec![
        "histogram jetsink_sink_write_seconds_sum{sink=\"orders\"} 0.0425",
        "histogram jetsink_sink_write_seconds_count{sink=\"orders\"} 12",
    ];
    assert_eq!(rows(Some("sink_write_seconds")), sum_count);
    assert_eq!(rows(Some("sink_write_seconds*")), sum_count);
    assert_eq!(rows(Some("*")).len(), 9);
    assert_eq!(rows(None).len(), 9);
    assert_eq!(
        rows(Some("sink_write_seconds_bucket")),
        vec![
            "histogram jetsink_sink_write_seconds_bucket{sink=\"orders\",le=\"0.001\"} 3",
            "histogram jetsink_sink_write_seconds_bucket{sink=\"orders\",le=\"+Inf\"} 12",
        ]
    );
    assert_eq!(rows(Some("*_bucket")).len(), 2);
}

#[test]
fn the_table_has_aligned_kind_name_value_columns() {
    let samples = parse(EXPOSITION).unwrap();
    let table = render_table(&select(&samples, Some("priority_lane_*")));
    assert_eq!(
        table,
        "kind     name                                                  value\n\
         counter  jetsink_priority_lane_batches_total{sink=\"orders\"}    12\n\
         counter  jetsink_priority_lane_defaulted_total{sink=\"orders\"}  41\n"
    );
    assert_eq!(render_table(&[]), "kind  name  value\n");
}

#[test]
fn json_rows_carry_labels_and_typed_values() {
    let samples =
        parse("# TYPE c counter\nc{sink=\"a\"} 12\n# TYPE g gauge\ng 0.5\ng2 +Inf\ng3 NaN\n")
            .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&select(&samples, None))).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"kind": "counter", "name": "c", "labels": {"sink": "a"}, "value": 12},
            {"kind": "gauge", "name": "g", "labels": {}, "value": 0.5},
            {"kind": "untyped", "name": "g2", "labels": {}, "value": "+Inf"},
            {"kind": "untyped", "name": "g3", "labels": {}, "value": "NaN"},
        ])
    );
    assert_eq!(render_json(&[]), "[]");
}

#[test]
fn the_real_registry_output_parses() {
    let m = crate::metrics::Metrics::new();
    let s = crate::pipeline::SinkMetrics::new(&m, "orders");
    s.lanes.batches.inc_by(3);
    s.write_seconds.observe(0.002);
    let samples = parse(&m.render()).unwrap();
    let shown = rows_of(&samples, Some("priority_lane_batches_total"));
    assert_eq!(
        shown,
        vec!["counter jetsink_priority_lane_batches_total{sink=\"orders\"} 3"]
    );
    assert_eq!(
        rows_of(&samples, Some("sink_write_seconds")),
        vec![
            "histogram jetsink_sink_write_seconds_sum{sink=\"orders\"} 0.002",
            "histogram jetsink_sink_write_seconds_count{sink=\"orders\"} 1",
        ]
    );
}

fn rows_of(samples: &[Sample], glob: Option<&str>) -> Vec<String> {
    select(samples, glob)
        .iter()
        .map(|s| format!("{} {} {}", s.kind, s.display_name(), s.value))
        .collect()
}

#[tokio::test]
async fn only_plain_http_urls_are_fetched() {
    let err = fetch("https://127.0.0.1:9464/metrics", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind, FetchErrorKind::BadUrl);
    assert_eq!(err.exit_code(), crate::exit::USAGE);
    assert!(err
        .to_string()
        .starts_with("https://127.0.0.1:9464/metrics: "));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_and_named() {
    // Bind then drop a listener: the port is very likely closed right after.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let err = fetch(&url, Duration::from_secs(2)).await.unwrap_err();
    assert_eq!(err.kind, FetchErrorKind::Unreachable);
    assert_eq!(err.exit_code(), crate::exit::UNAVAILABLE);
    assert!(err.to_string().starts_with(&url), "{err}");
}

#[tokio::test]
async fn a_password_in_the_url_is_never_printed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://user:S3CRETPW@127.0.0.1:{port}/metrics");
    let err = fetch(&url, Duration::from_secs(2)).await.unwrap_err();
    let shown = err.to_string();
    assert!(!shown.contains("S3CRETPW"), "{shown}");
    assert!(
        shown.starts_with(&format!("http://***@127.0.0.1:{port}/metrics: ")),
        "{shown}"
    );
    let bad = fetch("https://u:S3CRETPW@h/metrics", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(!bad.to_string().contains("S3CRETPW"), "{bad}");
}

#[tokio::test]
async fn an_endless_answer_is_refused_at_16_mib_not_read_to_its_end() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.read(&mut [0u8; 1024]);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        let line = b"# HELP x y\n".repeat(1024);
        while s.write_all(&line).is_ok() {}
    });
    let err = fetch(&url, Duration::from_secs(30)).await.unwrap_err();
    assert_eq!(err.kind, FetchErrorKind::NotMetrics, "{err}");
    assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
}

#[tokio::test]
async fn a_snapshot_file_is_read_and_a_bad_one_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("m.json");
    let samples = parse("# TYPE jetsink_x_total counter\njetsink_x_total 4\n").unwrap();
    std::fs::write(&good, crate::metrics_snapshot::encode(&samples, "t")).unwrap();
    assert_eq!(load(&Source::File(good)).await.unwrap(), samples);

    let missing = dir.path().join("nope.json");
    let err = load(&Source::File(missing.clone())).await.unwrap_err();
    assert_eq!(err.kind, FetchErrorKind::File);
    assert_eq!(err.exit_code(), crate::exit::FAILURE);
    assert_eq!(err.to_string().matches("nope.json").count(), 1, "{err}");

    let other = dir.path().join("other.json");
    std::fs::write(&other, "{}").unwrap();
    let err = load(&Source::File(other)).await.unwrap_err();
    assert_eq!(err.kind, FetchErrorKind::NotMetrics);
    assert!(
        err.to_string().contains("not a jetsink metrics snapshot"),
        "{err}"
    );
    let dir_err = load(&Source::File(dir.path().to_path_buf()))
        .await
        .unwrap_err();
    assert!(dir_err.to_string().contains("a directory"), "{dir_err}");
}
