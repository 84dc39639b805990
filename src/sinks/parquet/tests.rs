//! Round trips through the encoder and the reader: what is written is what the envelopes
//! hold, with the documented types; a value that does not fit refuses its message by
//! batch position and nothing else. The independent readers (pyarrow, DuckDB) check the
//! same files in `tests/parquet_archive.rs`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::read::{is_parquet, rows, stream_keys};
use super::settings::{ColumnType, Format, Keys, Layout, Options};
use super::{Codec, EncodeError, Encoder};
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};

fn envelope(seq: u64, payload: &str, headers: &[(&str, &str)]) -> Envelope {
    normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "c",
            stream_sequence: seq,
            consumer_sequence: seq + 100,
            delivered: 1,
            published: OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789)
                .unwrap(),
        },
        headers.iter().copied(),
        Bytes::from(payload.to_string()),
        IdempotencyKey::StreamSequence,
    )
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn options(layout: Layout, rows: usize) -> Arc<Options> {
    Arc::new(Options {
        codec: Codec::Zstd,
        row_group_rows: rows,
        layout,
    })
}

fn encode(batch: &[Envelope], options: Arc<Options>) -> Result<Bytes, EncodeError> {
    let mut enc = Encoder::new(Vec::new(), options)?;
    let members: Vec<usize> = (0..batch.len()).collect();
    let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    for group in members.chunks(enc.rows_per_group()) {
        enc.write_group(batch, group, at)?;
    }
    Ok(Bytes::from(enc.finish()?))
}

fn read(bytes: Bytes) -> Vec<serde_json::Map<String, Value>> {
    rows(bytes)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn the_jetsink_layout_round_trips_every_field_in_row_groups() {
    let mut batch = vec![
        envelope(
            1,
            "{\"n\":1}",
            &[("Nats-Msg-Id", "m1"), ("Trace", "a"), ("Trace", "b")],
        ),
        envelope(2, "\u{0}binary", &[]),
        envelope(3, "", &[("X", "1"), ("traceparent", TRACEPARENT)]),
    ];
    batch[1].labels = vec!["red".into(), "blue".into()];
    batch[1].priority = Some("high".into());
    let bytes = encode(&batch, options(Layout::Default, 2)).unwrap();
    assert!(is_parquet(&bytes));
    let rows = read(bytes);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["idempotency_key"], "ORDERS:1");
    assert_eq!(rows[0]["stream_sequence"], 1);
    assert_eq!(rows[0]["consumer_sequence"], 101);
    assert_eq!(rows[0]["published_at"], "2023-11-14T22:13:20.123456000Z");
    assert_eq!(rows[0]["written_at"], "2027-01-15T08:00:00.000000000Z");
    assert_eq!(rows[0]["message_id"], "m1");
    assert_eq!(
        rows[0]["headers"],
        json!({"Nats-Msg-Id": ["m1"], "Trace": ["a", "b"]})
    );
    assert_eq!(rows[0]["labels"], json!([]));
    assert_eq!(rows[0]["payload"], "eyJuIjoxfQ==");
    assert_eq!(rows[1]["headers"], json!({}));
    assert_eq!(rows[1]["message_id"], Value::Null);
    assert_eq!(rows[1]["priority"], "high");
    assert_eq!(rows[1]["labels"], json!(["red", "blue"]));
    assert_eq!(rows[2]["payload"], "");
    assert_eq!(
        rows[2]["headers"],
        json!({"X": ["1"], "traceparent": [TRACEPARENT]})
    );
    assert_eq!(rows[2]["trace_id"], TRACE_ID);
    assert_eq!(rows[0]["trace_id"], Value::Null, "no traceparent header");
    let mut keys = HashSet::new();
    let bytes = encode(&batch, options(Layout::Default, 100)).unwrap();
    assert!(stream_keys(bytes.clone(), "ORDERS", &mut keys).unwrap());
    assert_eq!(keys.len(), 3);
    assert!(stream_keys(bytes, "OTHER", &mut keys).unwrap());
    assert_eq!(keys.len(), 3, "another stream's keys are not counted");
}

fn mapped(columns: &[(&str, &str)], types: &[(&str, ColumnType)]) -> Layout {
    let columns: BTreeMap<String, String> = columns
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let types: BTreeMap<String, ColumnType> =
        types.iter().map(|(a, t)| (a.to_string(), *t)).collect();
    Keys {
        format: Format::Parquet,
        columns: Some(&columns),
        column_types: Some(&types),
        ..Keys::default()
    }
    .resolve()
    .unwrap()
    .layout
}

#[test]
fn a_mapping_writes_typed_columns_from_json_payloads() {
    let layout = mapped(
        &[
            ("key", "$idempotency_key"),
            ("stream", "$stream"),
            ("id", "/order/id"),
            ("total", "/order/total"),
            ("paid", "/paid"),
            ("day", "/day"),
            ("at", "$published_at"),
            ("body", "$payload"),
            ("doc", "/order"),
            ("trace", "$trace_id"),
        ],
        &[
            ("id", ColumnType::Int64),
            ("total", ColumnType::Double),
            ("paid", ColumnType::Boolean),
            ("day", ColumnType::Date),
            ("doc", ColumnType::Json),
        ],
    );
    let batch = vec![
        envelope(
            1,
            r#"{"order":{"id":7,"total":19.5},"paid":true,"day":"2026-11-30"}"#,
            &[],
        ),
        envelope(
            2,
            r#"{"order":{"id":"8"}}"#,
            &[("traceparent", TRACEPARENT)],
        ),
    ];
    let bytes = encode(&batch, options(layout, 100)).unwrap();
    let rows = read(bytes.clone());
    assert_eq!(rows[0]["id"], 7);
    assert_eq!(rows[0]["total"], 19.5);
    assert_eq!(rows[0]["paid"], true);
    assert_eq!(rows[0]["doc"], r#"{"id":7,"total":19.5}"#);
    assert_eq!(rows[0]["at"], "2023-11-14T22:13:20.123456000Z");
    assert!(
        rows[0]["day"].as_str().unwrap().contains("2026-11-30"),
        "{}",
        rows[0]["day"]
    );
    assert_eq!(rows[1]["id"], 8, "a numeric string fits an int64 column");
    assert_eq!(rows[1]["total"], Value::Null, "a missing value is null");
    assert_eq!(rows[0]["trace"], Value::Null, "no traceparent: null");
    assert_eq!(rows[1]["trace"], TRACE_ID);
    let mut keys = HashSet::new();
    assert!(stream_keys(bytes, "ORDERS", &mut keys).unwrap());
    assert_eq!(keys.len(), 2);
}

#[test]
fn a_payload_that_is_not_json_or_a_value_that_does_not_fit_refuses_that_message() {
    let layout = mapped(&[("id", "/id")], &[("id", ColumnType::Int64)]);
    let batch = vec![
        envelope(1, r#"{"id":1}"#, &[]),
        envelope(2, r#"{"id":2}"#, &[]),
        envelope(3, "{not json", &[]),
    ];
    match encode(&batch, options(layout.clone(), 100)) {
        Err(EncodeError::Refused { index, message }) => {
            assert_eq!(index, 2);
            assert!(message.contains("is not JSON"), "{message}");
            assert!(!message.contains("not json"), "no content: {message}");
        }
        other => panic!("{other:?}"),
    }
    let batch = vec![
        envelope(1, r#"{"id":1}"#, &[]),
        envelope(2, r#"{"id":"x"}"#, &[]),
    ];
    match encode(&batch, options(layout, 1)) {
        Err(EncodeError::Refused { index, message }) => {
            assert_eq!(index, 1);
            assert_eq!(message, "column id: the value of /id is not an integer");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_mapping_without_the_key_or_stream_cannot_be_counted() {
    let layout = mapped(&[("s", "$subject")], &[]);
    let bytes = encode(&[envelope(1, "x", &[])], options(layout, 100)).unwrap();
    assert!(!stream_keys(bytes, "ORDERS", &mut HashSet::new()).unwrap());
}

mod generated {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_envelopes_round_trip_their_keys_headers_and_payloads(
            payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..30),
            header in "[A-Za-z-]{1,8}",
            value in "\\PC{0,12}",
            rows in 1usize..8,
        ) {
            let batch: Vec<Envelope> = payloads
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut e = envelope(i as u64 + 1, "", &[(header.as_str(), value.as_str())]);
                    e.payload = Bytes::from(p.clone());
                    e
                })
                .collect();
            let bytes = encode(&batch, options(Layout::Default, rows)).unwrap();
            let read = read(bytes);
            prop_assert_eq!(read.len(), batch.len());
            for (r, e) in read.iter().zip(&batch) {
                prop_assert_eq!(r["idempotency_key"].as_str(), Some(e.idempotency_key.as_str()));
                let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &e.payload);
                prop_assert_eq!(r["payload"].as_str(), Some(b64.as_str()));
                prop_assert_eq!(&r["headers"], &e.headers_json());
            }
        }

        #[test]
        fn any_bytes_are_refused_or_read_without_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = rows(Bytes::from(data.clone()));
            let _ = stream_keys(Bytes::from(data), "S", &mut HashSet::new());
        }
    }
}
