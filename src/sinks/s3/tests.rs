//! Unit tests of the `s3` destination's pure parts: settings checks, the partition
//! template, object keys, encoding round trips. Classification is tested beside its code
//! (`classify.rs`); the sink against a real store in `tests/s3_destination.rs`.

use bytes::Bytes;
use proptest::prelude::*;
use time::OffsetDateTime;

use super::config::{Compression, S3Config};
use super::encode::{decode, ObjectEncoder};
use super::key::{object_name, plan, Template, MAX_KEY_BYTES};
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};
use crate::sinks::settings::DestinationSettings;

fn config(json: serde_json::Value) -> S3Config {
    serde_json::from_value(json).unwrap()
}

fn problems(c: &S3Config) -> Vec<String> {
    c.problems()
        .into_iter()
        .map(|(k, m)| format!("{k}: {m}"))
        .collect()
}

fn envelope_at(subject: &str, seq: u64, published: OffsetDateTime) -> Envelope {
    normalize(
        subject,
        Delivery {
            stream: "ORDERS",
            consumer: "c",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published,
        },
        [],
        Bytes::from(format!("{{\"n\":{seq}}}")),
        IdempotencyKey::StreamSequence,
    )
}

fn envelope(seq: u64) -> Envelope {
    envelope_at("orders.new", seq, OffsetDateTime::UNIX_EPOCH)
}

#[test]
fn a_bucket_alone_is_valid_with_documented_defaults() {
    let c = config(serde_json::json!({"bucket": "archive"}));
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
    assert_eq!(c.partition, "{stream}/{yyyy}/{mm}/{dd}");
    assert_eq!(c.compression, None);
    assert_eq!(c.jsonl_compression(), Compression::None);
    assert!(c.path_style);
    assert_eq!(c.multipart_part_bytes, 8 << 20);
    assert_eq!(c.location(), "s3://archive");
}

#[test]
fn rollover_defaults_to_a_minute_and_its_age_is_range_checked_with_its_key() {
    let c = config(serde_json::json!({"bucket": "archive"}));
    assert_eq!(c.accumulate(), None);
    assert!(
        !c.rolls_over_by_default(),
        "JSON Lines objects: one per batch"
    );
    let c = config(serde_json::json!({"bucket": "archive", "format": "parquet"}));
    assert!(
        c.rolls_over_by_default(),
        "Parquet objects: a default rollover"
    );
    let c = config(serde_json::json!({"bucket": "archive", "rollover": {"max_messages": 1000}}));
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
    let a = c.accumulate().expect("rollover accumulates");
    assert_eq!((a.messages, a.bytes, a.flush_ms), (1000, 64 << 20, 60_000));
    assert!(c
        .describe()
        .contains("rollover at 1000 messages, 67108864 bytes or 60000 ms"));
    let c = config(serde_json::json!({"bucket": "archive",
                                      "rollover": {"max_messages": 10, "max_bytes": 1000}}));
    assert_eq!(
        problems(&c),
        ["rollover.max_bytes: must be between 1048576 and 1073741824, got 1000"]
    );
    for age in [999, 3_600_001] {
        let c = config(serde_json::json!({"bucket": "archive",
                                          "rollover": {"max_messages": 10, "max_age_ms": age}}));
        assert_eq!(
            problems(&c),
            [format!(
                "rollover.max_age_ms: must be between 1000 and 3600000, got {age}"
            )]
        );
    }
    let bad = serde_json::from_value::<S3Config>(
        serde_json::json!({"bucket": "archive", "rollover": {"max_age_ms": 1000}}),
    );
    assert!(bad.is_err(), "max_messages is required");
}

#[test]
fn plain_http_endpoints_need_allow_http() {
    let c = config(serde_json::json!({"bucket": "b01", "endpoint": "http://127.0.0.1:9000"}));
    let p = problems(&c);
    assert!(
        p.iter()
            .any(|m| m.starts_with("endpoint: is plain http") && m.contains("allow_http")),
        "{p:?}"
    );
    let c = config(
        serde_json::json!({"bucket": "b01", "endpoint": "http://127.0.0.1:9000", "allow_http": true}),
    );
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
    let c = config(serde_json::json!({"bucket": "b01", "allow_http": true}));
    assert!(
        problems(&c)[0].starts_with("allow_http:"),
        "{:?}",
        problems(&c)
    );
}

#[test]
fn settings_mistakes_are_named_by_key() {
    for (json, needle) in [
        (serde_json::json!({"bucket": "B"}), "bucket: "),
        (serde_json::json!({"bucket": "ab"}), "bucket: "),
        (
            serde_json::json!({"bucket": "b01", "prefix": "/x"}),
            "prefix: ",
        ),
        (
            serde_json::json!({"bucket": "b01", "prefix": "a//b"}),
            "prefix: ",
        ),
        (
            serde_json::json!({"bucket": "b01", "partition": "{nope}"}),
            "partition: ",
        ),
        (
            serde_json::json!({"bucket": "b01", "partition": "a//b"}),
            "partition: ",
        ),
        (
            serde_json::json!({"bucket": "b01", "endpoint": "ftp://h"}),
            "endpoint: scheme",
        ),
        (
            serde_json::json!({"bucket": "b01", "endpoint": "https://u:p@h"}),
            "endpoint: must not contain",
        ),
        (
            serde_json::json!({"bucket": "b01", "access_key_id_env": "K"}),
            "secret_access_key_env: give the access key id",
        ),
        (
            serde_json::json!({"bucket": "b01", "secret_access_key_file": "/s"}),
            "access_key_id_env: give the access key id",
        ),
        (
            serde_json::json!({"bucket": "b01", "access_key_id_env": "K", "access_key_id_file": "/k", "secret_access_key_env": "S"}),
            "access_key_id_env: give one of",
        ),
        (
            serde_json::json!({"bucket": "b01", "multipart_part_bytes": 1024}),
            "multipart_part_bytes: must be between",
        ),
        (
            serde_json::json!({"bucket": "b01", "connect_timeout_ms": 9000, "request_timeout_ms": 8000}),
            "connect_timeout_ms: must not exceed",
        ),
    ] {
        let p = problems(&config(json.clone()));
        assert!(p.iter().any(|m| m.starts_with(needle)), "{json}: {p:?}");
    }
}

#[test]
fn unknown_keys_are_refused() {
    let r: Result<S3Config, _> =
        serde_json::from_value(serde_json::json!({"bucket": "b01", "rollover": 3}));
    assert!(r.is_err());
}

#[test]
fn describe_names_no_secret_and_the_target_names_the_place() {
    let c = config(serde_json::json!({
        "bucket": "b01", "prefix": "p/q", "endpoint": "https://minio.local:9000",
        "access_key_id_env": "MY_KEY_VAR", "secret_access_key_file": "/run/secret",
    }));
    let d = c.describe();
    assert!(
        d.contains("s3://b01/p/q") && d.contains("https://minio.local:9000"),
        "{d}"
    );
    assert!(
        !d.contains("MY_KEY_VAR") && !d.contains("/run/secret"),
        "{d}"
    );
    assert_eq!(c.target(), "s3:https://minio.local:9000 s3://b01/p/q");
}

#[test]
fn the_default_partition_is_stream_and_publication_date() {
    let t = Template::parse("{stream}/{yyyy}/{mm}/{dd}").unwrap();
    let at = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(); // 2023-11-14 22:13 UTC
    assert_eq!(
        t.render(&envelope_at("a.b", 1, at)),
        ["ORDERS", "2023", "11", "14"]
    );
    let t = Template::parse("x-{subject.2}/{hh}h").unwrap();
    assert_eq!(t.render(&envelope_at("a.b", 1, at)), ["x-b", "22h"]);
    // A missing token, or a folder that would be `..`, is `_`.
    let t = Template::parse("{subject.3}").unwrap();
    assert_eq!(t.render(&envelope_at("a.b", 1, at)), ["_"]);
    assert!(Template::parse("{subject.0}").is_err());
    assert!(Template::parse("{stream").is_err());
    assert!(Template::parse("a}").is_err());
    assert!(Template::parse("..").is_err());
}

#[test]
fn a_refused_partition_names_the_template_and_what_is_wrong() {
    let why = |t: &str| Template::parse(t).unwrap_err().to_string();
    assert_eq!(
        why("a//b"),
        r#""a//b" has an empty folder (a leading, trailing or double `/`)"#
    );
    assert_eq!(why("{stream"), r#""{stream": `{` without `}`"#);
    assert_eq!(why("a}"), r#""a}": `}` without `{`"#);
    assert_eq!(why("a/.."), r#""a/..": `.` and `..` are not folder names"#);
    assert_eq!(
        why("{x}"),
        r#""{x}": unknown placeholder {x}; use {stream}, {yyyy}, {mm}, {dd}, {hh} or {subject.N} (N from 1 to 32)"#
    );
}

#[test]
fn a_gapless_object_is_named_by_its_range_in_stream_order() {
    let t = Template::parse("{stream}").unwrap();
    let batch = [envelope(12), envelope(10), envelope(11)];
    let objects = plan(&batch, &t, "arch/v1", "jsonl.gz").unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(
        objects[0].path.as_ref(),
        "arch/v1/ORDERS/00000000000000000010-00000000000000000012.jsonl.gz"
    );
    assert_eq!(objects[0].members, [1, 2, 0]);
}

#[test]
fn a_batch_with_gaps_gets_a_hash_so_two_sets_never_share_a_key() {
    let a = object_name(&[1, 2, 5, 10]);
    let b = object_name(&[1, 3, 4, 10]);
    assert_ne!(a, b);
    assert!(
        a.starts_with("00000000000000000001-00000000000000000010-"),
        "{a}"
    );
    assert_eq!(a, object_name(&[1, 2, 5, 10]));
    assert_eq!(
        object_name(&[4, 5, 6]),
        "00000000000000000004-00000000000000000006"
    );
}

#[test]
fn a_batch_over_two_partitions_is_two_objects() {
    let t = Template::parse("{subject.1}").unwrap();
    let batch = [
        envelope_at("a.x", 1, OffsetDateTime::UNIX_EPOCH),
        envelope_at("b.x", 2, OffsetDateTime::UNIX_EPOCH),
        envelope_at("a.x", 3, OffsetDateTime::UNIX_EPOCH),
    ];
    let objects = plan(&batch, &t, "", "jsonl").unwrap();
    let keys: Vec<&str> = objects.iter().map(|o| o.path.as_ref()).collect();
    assert_eq!(keys.len(), 2);
    assert!(
        keys[0].starts_with("a/00000000000000000001-00000000000000000003-"),
        "{keys:?}"
    );
    assert_eq!(keys[1], "b/00000000000000000002-00000000000000000002.jsonl");
}

#[test]
fn a_subject_token_that_makes_the_key_too_long_names_its_message() {
    let t = Template::parse("{subject.2}").unwrap();
    let long = format!("a.{}", "x".repeat(MAX_KEY_BYTES));
    let batch = [
        envelope(1),
        envelope_at(&long, 2, OffsetDateTime::UNIX_EPOCH),
    ];
    let err = plan(&batch, &t, "", "jsonl").unwrap_err();
    assert_eq!(err.0, 1);
    assert!(err.1.contains("exceeds"), "{}", err.1);
}

#[test]
fn key_parts_are_escaped_not_split() {
    let t = Template::parse("{subject.2}").unwrap();
    let batch = [envelope_at("a.x/y", 1, OffsetDateTime::UNIX_EPOCH)];
    let objects = plan(&batch, &t, "", "jsonl").unwrap();
    // A `/` in a token stays inside one folder name.
    assert_eq!(objects[0].path.parts().count(), 2);
}

fn round_trip(compression: Compression, take_every: usize) -> Vec<u8> {
    let mut enc = ObjectEncoder::new(compression).unwrap();
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    for i in 0..200u64 {
        enc.push(&envelope(i), "2024-01-01T00:00:00.000000000Z", &mut scratch)
            .unwrap();
        if take_every > 0 && (i as usize).is_multiple_of(take_every) {
            out.extend(enc.take());
        }
    }
    out.extend(enc.finish().unwrap());
    decode(compression, &out).unwrap()
}

#[test]
fn every_compression_round_trips_taken_in_pieces_or_whole() {
    let whole = round_trip(Compression::None, 0);
    assert_eq!(whole.iter().filter(|&&b| b == b'\n').count(), 200);
    for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
        assert_eq!(round_trip(c, 0), whole, "{c:?}");
        assert_eq!(round_trip(c, 7), whole, "{c:?} in pieces");
    }
    assert_eq!(
        Compression::of_name("x/1-2.jsonl.gz"),
        Some(Compression::Gzip)
    );
    assert_eq!(
        Compression::of_name("x/1-2.jsonl.zst"),
        Some(Compression::Zstd)
    );
    assert_eq!(Compression::of_name("x/1-2.jsonl"), Some(Compression::None));
    assert_eq!(Compression::of_name("x/notes.txt"), None);
}

proptest! {
    #[test]
    fn the_same_set_always_has_the_same_name_and_different_sets_differ(
        a in proptest::collection::btree_set(1u64..200, 1..20),
        b in proptest::collection::btree_set(1u64..200, 1..20),
    ) {
        let a: Vec<u64> = a.into_iter().collect();
        let b: Vec<u64> = b.into_iter().collect();
        prop_assert_eq!(object_name(&a), object_name(&a.clone()));
        if a != b {
            prop_assert_ne!(object_name(&a), object_name(&b));
        }
    }

    #[test]
    fn batch_order_never_changes_the_keys(
        seqs in proptest::collection::btree_set(1u64..100, 1..15),
        rotate in 0usize..15,
    ) {
        let t = Template::parse("{stream}").unwrap();
        let sorted: Vec<Envelope> = seqs.iter().map(|&s| envelope(s)).collect();
        let mut shuffled = sorted.clone();
        let n = shuffled.len();
        shuffled.rotate_left(rotate % n);
        let k1: Vec<String> = plan(&sorted, &t, "p", "jsonl").unwrap().iter().map(|o| o.path.to_string()).collect();
        let k2: Vec<String> = plan(&shuffled, &t, "p", "jsonl").unwrap().iter().map(|o| o.path.to_string()).collect();
        prop_assert_eq!(k1, k2);
    }
}

#[test]
fn parquet_objects_take_zstd_by_default_and_refuse_the_other_formats_codecs() {
    let c = config(serde_json::json!({"bucket": "archive", "format": "parquet"}));
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
    assert_eq!(c.extension(), "parquet");
    let o = c.parquet_keys().resolve().unwrap();
    assert_eq!(o.codec, crate::sinks::parquet::Codec::Zstd);
    assert!(c.describe().contains("parquet objects"), "{}", c.describe());
    let c = config(
        serde_json::json!({"bucket": "archive", "format": "parquet", "compression": "gzip"}),
    );
    assert_eq!(
        problems(&c),
        ["compression: Parquet objects take zstd (the default), snappy or none"]
    );
    let c = config(serde_json::json!({"bucket": "archive", "compression": "snappy"}));
    assert!(
        problems(&c)[0].starts_with("compression: snappy is for"),
        "{:?}",
        problems(&c)
    );
    let c = config(serde_json::json!({"bucket": "archive", "row_group_rows": 1000}));
    assert_eq!(
        problems(&c),
        ["row_group_rows: applies to `format: \"parquet\"` only"]
    );
    let c = config(serde_json::json!({"bucket": "archive", "format": "parquet",
        "columns": {"id": "/id", "at": "$published_at"}}));
    assert_eq!(problems(&c).len(), 1, "{:?}", problems(&c));
    assert!(problems(&c)[0].starts_with("column_types.id: column id reads /id"));
}
