//! Tests of the file destination: the pure record encoding, naming and rotation decision,
//! then the sink against real temporary directories (moved, replaced, torn, rotated).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use serde_json::Value;
use time::OffsetDateTime;

use super::append::{commit, BatchFile, StillAtError};
use super::config::FileConfig;
use super::naming::{utc, FileStamp, MAX_COUNTER};
use super::record::{self, PayloadEncoding, FIELDS};
use super::rotation::{rotation_due, Rotation};
use super::FileSink;
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::contract::{Sink, SinkError};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

const T0_NANOS: u64 = 1_700_000_000_123_456_789;

fn published() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(T0_NANOS as i128).unwrap()
}

fn envelope(seq: u64, payload: impl Into<Bytes>) -> Envelope {
    Envelope {
        subject: format!("orders.{seq}"),
        stream: "ORDERS".into(),
        consumer: "sink".into(),
        stream_sequence: seq,
        consumer_sequence: seq + 100,
        delivered: 1,
        published_at: published(),
        headers: vec![("Content-Type".into(), vec!["application/json".into()])],
        message_id: None,
        idempotency_key: format!("ORDERS:{seq}"),
        priority: None,
        lane: None,
        classification: None,
        labels: Vec::new(),
        job_id: None,
        payload: payload.into(),
        clear: None,
    }
}

fn batch(seqs: std::ops::RangeInclusive<u64>) -> Vec<Envelope> {
    seqs.map(|s| envelope(s, format!("{{\"n\":{s}}}")))
        .collect()
}

fn config(dir: &Path) -> FileConfig {
    FileConfig {
        directory: dir.to_string_lossy().into_owned(),
        fsync: true,
        rotate_bytes: 0,
        rotate_interval_ms: 0,
        prefix: "events".into(),
        ..FileConfig::default()
    }
}

fn encode_one(e: &Envelope) -> Vec<u8> {
    let mut out = Vec::new();
    record::encode(e, "2024-01-01T00:00:00.000000000Z", &mut out).unwrap();
    out
}

fn parse_line(line: &[u8]) -> Value {
    serde_json::from_slice(line).unwrap()
}

/// The payload bytes a record stands for.
fn payload_of(record: &Value) -> Vec<u8> {
    let payload = &record["payload"];
    match record["payload_encoding"].as_str().unwrap() {
        "json" => serde_json::to_vec(payload).unwrap(),
        "utf8" => payload.as_str().unwrap().as_bytes().to_vec(),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(payload.as_str().unwrap())
            .unwrap(),
        other => panic!("unknown encoding {other}"),
    }
}

/// The files of `prefix` in `dir`, sorted by name.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| FileStamp::parse("events", n).is_some())
        })
        .collect();
    names.sort();
    names
}

/// Every record of every file, in name order then line order. Checks each file ends
/// with a complete line.
fn records(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for path in files(dir) {
        let bytes = fs::read(&path).unwrap();
        if !bytes.is_empty() {
            assert_eq!(
                bytes.last(),
                Some(&b'\n'),
                "{} ends mid-line",
                path.display()
            );
        }
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            out.push(parse_line(line));
        }
    }
    out
}

fn sequences(records: &[Value]) -> Vec<u64> {
    records
        .iter()
        .map(|r| r["stream_sequence"].as_u64().unwrap())
        .collect()
}

/// A clock the test moves by hand.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn at(nanos: u64) -> TestClock {
        TestClock(Arc::new(AtomicU64::new(nanos)))
    }
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }
    fn sink(&self, config: FileConfig) -> FileSink {
        let me = self.clone();
        FileSink::with_clock(config, Box::new(move || me.now()))
    }
}

fn is_transient(r: &Result<(), SinkError>) -> bool {
    matches!(r, Err(SinkError::Transient { .. }))
}

/// The keys of a JSON object in document order.
struct KeysInOrder(Vec<String>);

impl<'de> serde::Deserialize<'de> for KeysInOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = KeysInOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<KeysInOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(k);
                }
                Ok(KeysInOrder(keys))
            }
        }
        d.deserialize_map(V)
    }
}

// ---------------------------------------------------------------------------------------
// record.rs
// ---------------------------------------------------------------------------------------

#[test]
fn json_payload_is_embedded_as_a_value() {
    let line = encode_one(&envelope(1, r#"{"a":[1,2,{"b":null}],"c":"x\ny"}"#));
    let r = parse_line(&line);
    assert_eq!(r["payload_encoding"], "json");
    assert_eq!(
        r["payload"],
        serde_json::json!({"a": [1, 2, {"b": null}], "c": "x\ny"})
    );
    for scalar in ["42", "true", "null", "\"text\"", " [1] "] {
        let r = parse_line(&encode_one(&envelope(1, scalar)));
        assert_eq!(r["payload_encoding"], "json", "{scalar}");
        assert_eq!(r["payload"], serde_json::from_str::<Value>(scalar).unwrap());
    }
}

#[test]
fn utf8_text_that_is_not_json_is_a_string() {
    for text in [
        "hello world",
        "{\"a\":",
        "  ",
        "naïve ☃ \u{1}",
        "1 2",
        "{\"a\":1}x",
    ] {
        let r = parse_line(&encode_one(&envelope(1, text)));
        assert_eq!(r["payload_encoding"], "utf8", "{text:?}");
        assert_eq!(r["payload"], text);
    }
}

#[test]
fn empty_payload_is_an_empty_utf8_string() {
    let r = parse_line(&encode_one(&envelope(1, Bytes::new())));
    assert_eq!(r["payload_encoding"], "utf8");
    assert_eq!(r["payload"], "");
}

#[test]
fn binary_payload_is_padded_standard_base64() {
    let bytes: Vec<u8> = vec![0xff, 0xfe, 0x00, 0x01, 0xfb];
    let r = parse_line(&encode_one(&envelope(1, bytes.clone())));
    assert_eq!(r["payload_encoding"], "base64");
    assert_eq!(r["payload"], "//4AAfs=");
    assert_eq!(payload_of(&r), bytes);
}

#[test]
fn json_with_invalid_utf8_inside_a_string_is_base64() {
    // serde_json's syntax check alone accepts this; embedding it would corrupt the line.
    let bytes = b"{\"a\":\"\xff\"}".to_vec();
    assert_eq!(PayloadEncoding::of(&bytes), PayloadEncoding::Base64);
    let line = encode_one(&envelope(1, bytes.clone()));
    assert!(std::str::from_utf8(&line).is_ok());
    assert_eq!(payload_of(&parse_line(&line)), bytes);
}

#[test]
fn pretty_printed_json_payload_stays_on_one_line() {
    let value = serde_json::json!({"order": {"id": 7, "lines": [1, 2]}, "note": "a\r\nb"});
    let pretty = serde_json::to_string_pretty(&value).unwrap();
    // Windows line ends, and blank lines around the document.
    let payload = format!("\r\n{}\r\n\n", pretty.replace('\n', "\r\n"));
    assert!(payload.contains('\n'));
    let line = encode_one(&envelope(1, payload));
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(line.last(), Some(&b'\n'));
    assert!(!line.contains(&b'\r'));
    let r = parse_line(&line);
    assert_eq!(r["payload_encoding"], "json");
    assert_eq!(r["payload"], value);
}

#[test]
fn record_has_every_field_in_column_order() {
    let mut e = envelope(42, r#"{"k":1}"#);
    e.delivered = 3;
    e.message_id = Some("order-9".into());
    e.headers = vec![
        ("Nats-Msg-Id".into(), vec!["order-9".into()]),
        ("X-Many".into(), vec!["1".into(), "2".into()]),
    ];
    let written_at = "2024-05-06T07:08:09.000000001Z";
    let mut line = Vec::new();
    record::encode(&e, written_at, &mut line).unwrap();

    let keys: KeysInOrder = serde_json::from_slice(&line).unwrap();
    assert_eq!(keys.0, FIELDS);

    let r = parse_line(&line);
    assert_eq!(r["idempotency_key"], "ORDERS:42");
    assert_eq!(r["stream"], "ORDERS");
    assert_eq!(r["stream_sequence"], 42);
    assert_eq!(r["consumer_sequence"], 142);
    assert_eq!(r["subject"], "orders.42");
    assert_eq!(r["delivered"], 3);
    assert_eq!(r["published_at"], rfc3339(published()));
    assert_eq!(r["published_at"], "2023-11-14T22:13:20.123456789Z");
    assert_eq!(r["written_at"], written_at);
    assert_eq!(r["message_id"], "order-9");
    assert_eq!(r["headers"], e.headers_json());
    assert_eq!(r["payload_encoding"], "json");
    assert_eq!(r["payload"], serde_json::json!({"k": 1}));

    assert_eq!(r["trace_id"], Value::Null, "no traceparent header");

    e.message_id = None;
    let r = parse_line(&encode_one(&e));
    assert_eq!(r["message_id"], Value::Null);
}

#[test]
fn record_holds_the_trace_id_of_a_valid_traceparent_only() {
    let mut e = envelope(7, "x");
    e.headers = vec![(
        "TraceParent".into(),
        vec!["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()],
    )];
    let line = encode_one(&e);
    let r = parse_line(&line);
    assert_eq!(r["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    // Placed right after `labels`, as FIELDS says.
    let text = String::from_utf8(line).unwrap();
    assert!(
        text.contains(
            r#","labels":[],"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","payload_encoding":"#
        ),
        "{text}"
    );
    // An invalid value (uppercase hex) is treated as absent.
    e.headers[0].1 = vec!["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01".into()];
    assert_eq!(parse_line(&encode_one(&e))["trace_id"], Value::Null);
}

#[test]
fn records_append_to_the_reused_buffer() {
    let mut buf = b"previous\n".to_vec();
    record::encode(&envelope(1, "a"), "w", &mut buf).unwrap();
    record::encode(&envelope(2, "b"), "w", &mut buf).unwrap();
    let lines: Vec<&[u8]> = buf.split(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], b"previous");
    assert_eq!(parse_line(lines[1])["stream_sequence"], 1);
    assert_eq!(parse_line(lines[2])["stream_sequence"], 2);
    assert!(lines[3].is_empty());
}

// ---------------------------------------------------------------------------------------
// naming.rs and the rotation decision
// ---------------------------------------------------------------------------------------

fn at(nanos: i128) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap()
}

#[test]
fn names_round_trip_and_sort_by_creation() {
    let stamps = [
        FileStamp {
            created: at(0),
            counter: 0,
        },
        FileStamp {
            created: at(T0_NANOS as i128),
            counter: 0,
        },
        FileStamp {
            created: at(T0_NANOS as i128),
            counter: 1,
        },
        FileStamp {
            created: at(T0_NANOS as i128),
            counter: MAX_COUNTER,
        },
        FileStamp {
            created: at(T0_NANOS as i128 + 1),
            counter: 0,
        },
        FileStamp {
            created: at(T0_NANOS as i128 + 1_000_000_000),
            counter: 0,
        },
        FileStamp {
            created: at(253_402_300_799_999_999_999),
            counter: 3,
        },
    ];
    assert_eq!(
        stamps[1].file_name("events"),
        "events-20231114T221320.123456789Z-000000.jsonl"
    );
    let names: Vec<String> = stamps.iter().map(|s| s.file_name("events")).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for (stamp, name) in stamps.iter().zip(&names) {
        assert_eq!(FileStamp::parse("events", name), Some(*stamp), "{name}");
    }
}

#[test]
fn other_names_are_not_ours() {
    let good = "20231114T221320.123456789Z-000000";
    assert!(FileStamp::parse("events", &format!("events-{good}.jsonl")).is_some());
    assert!(FileStamp::parse("ev-x", &format!("ev-x-{good}.jsonl")).is_some());
    for name in [
        format!("other-{good}.jsonl"),
        format!("events-x-{good}.jsonl"),
        format!("events-{good}.jsonl.tmp"),
        format!("events-{good}.json"),
        format!("events{good}.jsonl"),
        "events-20231314T221320.123456789Z-000000.jsonl".into(),
        "events-20230230T221320.123456789Z-000000.jsonl".into(),
        "events-20231114T251320.123456789Z-000000.jsonl".into(),
        "events-20231114T221320.12345678Z-0000000.jsonl".into(),
        "events-20231114T221320.123456789Z-00000a.jsonl".into(),
        "events-20231114X221320.123456789Z-000000.jsonl".into(),
        "events-2023111éT22132.123456789Z-000000.jsonl".into(),
        "events-+0231114T221320.123456789Z-000000.jsonl".into(),
        "events-.jsonl".into(),
        "events".into(),
        String::new(),
    ] {
        assert_eq!(FileStamp::parse("events", &name), None, "{name}");
    }
    // A longer prefix that starts with ours is someone else's.
    assert_eq!(FileStamp::parse("ev", &format!("ev-x-{good}.jsonl")), None);
}

#[test]
fn next_stamp_counts_up_on_ties_and_clock_steps_back() {
    let t = at(T0_NANOS as i128);
    assert_eq!(
        FileStamp::next(t, None),
        FileStamp {
            created: t,
            counter: 0
        }
    );
    let first = FileStamp::next(t, None);
    let tie = FileStamp::next(t, Some(first));
    assert_eq!(
        tie,
        FileStamp {
            created: t,
            counter: 1
        }
    );
    let back = FileStamp::next(at(0), Some(tie));
    assert_eq!(
        back,
        FileStamp {
            created: t,
            counter: 2
        }
    );
    let later = FileStamp::next(at(T0_NANOS as i128 + 5), Some(back));
    assert_eq!(
        later,
        FileStamp {
            created: at(T0_NANOS as i128 + 5),
            counter: 0
        }
    );
    let full = FileStamp {
        created: t,
        counter: MAX_COUNTER,
    };
    let overflow = FileStamp::next(t, Some(full));
    assert_eq!(
        overflow,
        FileStamp {
            created: at(T0_NANOS as i128 + 1),
            counter: 0
        }
    );
    for (a, b) in [(first, tie), (tie, back), (back, later), (full, overflow)] {
        assert!(a.file_name("p") < b.file_name("p"));
    }
}

#[test]
fn clock_readings_are_clamped_to_fixed_width_years() {
    assert_eq!(utc(UNIX_EPOCH - Duration::from_secs(10)), at(0));
    assert_eq!(
        utc(UNIX_EPOCH + Duration::from_nanos(T0_NANOS)),
        at(T0_NANOS as i128)
    );
    let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
    assert_eq!(utc(far).year(), 9999);
}

#[test]
fn rotation_decision_table() {
    let t = UNIX_EPOCH + Duration::from_secs(1_000);
    let s = Duration::from_secs(1);
    // (size, age, rotate_bytes, rotate_interval_ms) -> expected
    let cases: &[(u64, Duration, u64, u64, Option<Rotation>)] = &[
        (0, 100 * s, 10, 1_000, None),
        (9, Duration::ZERO, 10, 0, None),
        (10, Duration::ZERO, 10, 0, Some(Rotation::Size)),
        (11, Duration::ZERO, 10, 1_000, Some(Rotation::Size)),
        (u64::MAX, 100 * s, 0, 0, None),
        (1, Duration::from_millis(999), 0, 1_000, None),
        (1, s, 0, 1_000, Some(Rotation::Age)),
        (1, 100 * s, 10, 1_000, Some(Rotation::Age)),
        (10, 100 * s, 10, 1_000, Some(Rotation::Size)),
    ];
    for &(size, age, bytes, interval, expected) in cases {
        assert_eq!(
            rotation_due(size, t, t + age, bytes, interval),
            expected,
            "size {size} age {age:?} bytes {bytes} interval {interval}"
        );
    }
    // A clock that stepped back means age zero, not a panic.
    assert_eq!(rotation_due(1, t, t - 10 * s, 0, 1_000), None);
}

// ---------------------------------------------------------------------------------------
// commit: a failed batch leaves nothing behind
// ---------------------------------------------------------------------------------------

/// A real file whose write fails after `allow` bytes or whose sync fails.
struct Faulty {
    file: fs::File,
    allow: usize,
    fail_sync: bool,
}

impl BatchFile for Faulty {
    fn append_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let n = buf.len().min(self.allow);
        self.file.write_all(&buf[..n])?;
        if n < buf.len() {
            return Err(std::io::Error::other("disk full"));
        }
        Ok(())
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        if self.fail_sync {
            return Err(std::io::Error::other("EIO"));
        }
        self.file.sync_data()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        BatchFile::len(&self.file)
    }
    fn still_at(&self, path: &Path) -> Result<(), StillAtError> {
        self.file.still_at(path)
    }
}

fn no_hook() -> impl FnMut(&Path) {
    |_: &Path| {}
}

#[test]
fn a_failed_write_or_sync_cuts_the_batch_back_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.jsonl");
    fs::write(&path, b"{\"kept\":1}\n").unwrap();
    let open = || fs::OpenOptions::new().append(true).open(&path).unwrap();
    let buf = b"{\"a\":1}\n{\"b\":2}\n";

    let mut partial = Faulty {
        file: open(),
        allow: 11,
        fail_sync: false,
    };
    assert!(commit(&mut partial, 11, buf, true, &path, &mut no_hook()).is_err());
    assert_eq!(fs::read(&path).unwrap(), b"{\"kept\":1}\n");

    let mut unsynced = Faulty {
        file: open(),
        allow: usize::MAX,
        fail_sync: true,
    };
    assert!(commit(&mut unsynced, 11, buf, true, &path, &mut no_hook()).is_err());
    assert_eq!(fs::read(&path).unwrap(), b"{\"kept\":1}\n");

    // Without fsync the sync is not attempted.
    assert!(commit(&mut unsynced, 11, buf, false, &path, &mut no_hook()).is_ok());
    let mut whole = open();
    assert!(commit(&mut whole, 27, buf, true, &path, &mut no_hook()).is_ok());
    let mut expected = b"{\"kept\":1}\n".to_vec();
    expected.extend_from_slice(buf);
    expected.extend_from_slice(buf);
    assert_eq!(fs::read(&path).unwrap(), expected);
}

// ---------------------------------------------------------------------------------------
// FileSink against real directories
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn n_envelopes_become_n_lines_with_their_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/events");
    let clock = TestClock::at(T0_NANOS);
    let mut sink = clock.sink(config(&dir));
    assert!(!dir.exists(), "new() does no I/O");
    sink.open().await.unwrap();
    assert!(dir.is_dir());
    sink.write_batch(&batch(1..=10)).await.unwrap();
    sink.write_batch(&batch(11..=25)).await.unwrap();
    sink.health().await.unwrap();

    assert_eq!(files(&dir).len(), 1);
    let records = records(&dir);
    assert_eq!(records.len(), 25);
    for (i, r) in records.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(r["idempotency_key"], format!("ORDERS:{seq}"));
        assert_eq!(r["stream_sequence"], seq);
        assert_eq!(r["payload"], serde_json::json!({ "n": seq }));
        assert_eq!(r["written_at"], "2023-11-14T22:13:20.123456789Z");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn odd_payloads_and_headers_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sink = FileSink::new(config(tmp.path()));
    sink.open().await.unwrap();

    let mut big = Vec::with_capacity(1 << 20);
    let mut x: u32 = 12345;
    while big.len() < 1 << 20 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        big.push((x >> 16) as u8);
    }
    let payloads: Vec<Vec<u8>> = vec![
        vec![0, 1, 2, 255, 254, b'\n', b'\r', b'"'],
        Vec::new(),
        b"caf\xe9 \xc3\x28".to_vec(),
        big,
        "x".repeat(1 << 20).into_bytes(),
        b"plain text with \"quotes\" and \\ and \n newline".to_vec(),
        b"\xef\xbb\xbf{\"bom\":1}".to_vec(),
    ];
    let mut many: Vec<(String, Vec<String>)> = (0..300)
        .map(|i| (format!("X-Header-{i}"), vec![format!("value {i}")]))
        .collect();
    many.push((String::new(), vec![String::new()]));
    many.push((
        "Ünïcødé \"name\"\\".into(),
        vec!["☃".into(), "\u{1}\u{7f}\n".into(), "".into()],
    ));
    many.push(("Nats-Msg-Id".into(), vec!["id-1".into()]));

    let envelopes: Vec<Envelope> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut e = envelope(i as u64 + 1, p.clone());
            e.headers = many.clone();
            e.message_id = Some(format!("id-{i}"));
            e
        })
        .collect();
    sink.write_batch(&envelopes).await.unwrap();

    let records = records(tmp.path());
    assert_eq!(records.len(), payloads.len());
    for ((r, p), e) in records.iter().zip(&payloads).zip(&envelopes) {
        assert_eq!(&payload_of(r), p, "payload of {}", r["idempotency_key"]);
        assert_eq!(r["headers"], e.headers_json());
        assert_eq!(r["message_id"], e.message_id.as_deref().unwrap());
    }
    let encodings: Vec<&str> = records
        .iter()
        .map(|r| r["payload_encoding"].as_str().unwrap())
        .collect();
    assert_eq!(
        encodings,
        ["base64", "utf8", "base64", "base64", "utf8", "utf8", "utf8"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_batch_writes_nothing_and_opens_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    let mut sink = FileSink::new(config(&dir));
    sink.write_batch(&[]).await.unwrap();
    assert!(!dir.exists());
    sink.open().await.unwrap();
    sink.write_batch(&[]).await.unwrap();
    let only = files(&dir);
    assert_eq!(only.len(), 1);
    assert_eq!(fs::metadata(&only[0]).unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn torn_last_line_is_cut_on_open_and_appending_resumes_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=3)).await.unwrap();
    drop(sink);
    let path = files(dir).pop().unwrap();
    let clean_len = fs::metadata(&path).unwrap().len();

    // A crash in the middle of the next batch: one whole line and half of another.
    let mut torn = encode_one(&envelope(4, "{}"));
    let half = encode_one(&envelope(5, "x".repeat(200_000)));
    torn.extend_from_slice(&half[..half.len() / 2]);
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn).unwrap();
    }

    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    let first_line_len = encode_one(&envelope(4, "{}")).len() as u64;
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        clean_len + first_line_len
    );
    sink.write_batch(&batch(5..=6)).await.unwrap();
    assert_eq!(files(dir), vec![path.clone()], "appends to the same file");
    assert_eq!(sequences(&records(dir)), [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_with_only_a_torn_line_is_emptied() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let name = FileStamp::next(at(T0_NANOS as i128), None).file_name("events");
    fs::write(dir.join(&name), b"{\"idempotency_key\":\"torn").unwrap();
    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    assert_eq!(fs::metadata(dir.join(&name)).unwrap().len(), 0);
    sink.write_batch(&batch(1..=2)).await.unwrap();
    assert_eq!(files(dir), vec![dir.join(&name)]);
    assert_eq!(sequences(&records(dir)), [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn open_continues_the_newest_file_of_the_prefix_until_it_is_full() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let old = FileStamp::next(at(1), None);
    let newest = FileStamp::next(at(2), None);
    fs::write(dir.join(old.file_name("events")), b"{\"old\":1}\n").unwrap();
    fs::write(dir.join(newest.file_name("events")), b"{\"new\":1}\n").unwrap();
    fs::write(
        dir.join(FileStamp::next(at(3), None).file_name("other")),
        b"x",
    )
    .unwrap();
    fs::write(dir.join("events-notes.txt"), b"x").unwrap();

    let mut cfg = config(dir);
    cfg.rotate_bytes = 1_000_000;
    let mut sink = FileSink::new(cfg.clone());
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=1)).await.unwrap();
    assert_eq!(files(dir).len(), 2);
    let content = fs::read_to_string(dir.join(newest.file_name("events"))).unwrap();
    assert!(content.starts_with("{\"new\":1}\n{\"idempotency_key\":\"ORDERS:1\""));

    // Once the newest file is at the limit, a restart starts a new one.
    drop(sink);
    cfg.rotate_bytes = 10;
    let mut sink = FileSink::new(cfg);
    sink.open().await.unwrap();
    assert_eq!(files(dir).len(), 3);
    sink.write_batch(&batch(2..=2)).await.unwrap();
    let last = files(dir).pop().unwrap();
    assert_eq!(sequences(&records_of(&last)), [2]);
}

fn records_of(path: &Path) -> Vec<Value> {
    fs::read(path)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(parse_line)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_by_size_keeps_every_line_once_in_name_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cfg = config(dir);
    cfg.rotate_bytes = 2_000;
    let mut sink = FileSink::new(cfg);
    sink.open().await.unwrap();
    for start in (1..=100).step_by(4) {
        sink.write_batch(&batch(start..=start + 3)).await.unwrap();
    }
    let names = files(dir);
    assert!(names.len() > 5, "only {} files", names.len());
    let longest = batch(100..=100).iter().map(|e| encode_one(e).len()).max();
    let longest = longest.unwrap() as u64;
    for path in &names {
        let len = fs::metadata(path).unwrap().len();
        assert!(len > 0);
        // A file is closed at the first batch that reaches the limit.
        assert!(
            len < 2_000 + 4 * longest,
            "{} is {len} bytes",
            path.display()
        );
    }
    assert_eq!(sequences(&records(dir)), (1..=100).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_with_a_frozen_clock_counts_up_in_the_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = TestClock::at(T0_NANOS);
    let mut cfg = config(dir);
    cfg.rotate_bytes = 1;
    let mut sink = clock.sink(cfg);
    sink.open().await.unwrap();
    for seq in 1..=3 {
        sink.write_batch(&batch(seq..=seq)).await.unwrap();
    }
    let names: Vec<String> = files(dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "events-20231114T221320.123456789Z-000000.jsonl",
            "events-20231114T221320.123456789Z-000001.jsonl",
            "events-20231114T221320.123456789Z-000002.jsonl",
        ]
    );
    assert_eq!(sequences(&records(dir)), [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_by_interval_follows_the_injected_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = TestClock::at(T0_NANOS);
    let mut cfg = config(dir);
    cfg.rotate_interval_ms = 1_000;
    let mut sink = clock.sink(cfg.clone());
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    clock.advance(Duration::from_millis(999));
    sink.write_batch(&batch(3..=4)).await.unwrap();
    assert_eq!(files(dir).len(), 1);
    clock.advance(Duration::from_millis(1));
    sink.write_batch(&batch(5..=6)).await.unwrap();
    clock.advance(Duration::from_millis(500));
    sink.write_batch(&batch(7..=8)).await.unwrap();

    let names = files(dir);
    assert_eq!(names.len(), 2);
    assert!(names[1].ends_with("events-20231114T221321.123456789Z-000000.jsonl"));
    assert_eq!(sequences(&records_of(&names[0])), [1, 2, 3, 4]);
    assert_eq!(sequences(&records_of(&names[1])), [5, 6, 7, 8]);
    let written: Vec<Value> = records(dir)
        .iter()
        .map(|r| r["written_at"].clone())
        .collect();
    assert_eq!(written[4], "2023-11-14T22:13:21.123456789Z");
    assert_eq!(written[6], "2023-11-14T22:13:21.623456789Z");

    // After a restart, the age of the continued file counts from its name.
    clock.advance(Duration::from_millis(600));
    drop(sink);
    let mut sink = clock.sink(cfg);
    sink.open().await.unwrap();
    sink.write_batch(&batch(9..=9)).await.unwrap();
    let names = files(dir);
    assert_eq!(names.len(), 3);
    assert_eq!(sequences(&records_of(&names[2])), [9]);
    assert_eq!(sequences(&records(dir)), (1..=9).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_empty_file_is_used_rather_than_rotated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = TestClock::at(T0_NANOS);
    let mut cfg = config(dir);
    cfg.rotate_interval_ms = 1_000;
    let mut sink = clock.sink(cfg);
    sink.open().await.unwrap();
    clock.advance(Duration::from_secs(3_600));
    sink.write_batch(&batch(1..=1)).await.unwrap();
    assert_eq!(files(dir).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn moved_directory_fails_the_batch_and_recovers_when_moved_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    let away = tmp.path().join("away");
    let mut sink = FileSink::new(config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=3)).await.unwrap();

    fs::rename(&dir, &away).unwrap();
    assert!(is_transient(&sink.write_batch(&batch(4..=6)).await));
    assert_eq!(
        sequences(&records(&away)),
        [1, 2, 3],
        "nothing written to the moved file"
    );
    let again = sink.write_batch(&batch(4..=6)).await;
    match &again {
        Err(SinkError::Transient { message }) => {
            assert!(message.contains(&*dir.to_string_lossy()), "{message}")
        }
        other => panic!("expected transient, got {other:?}"),
    }
    assert!(
        !dir.exists(),
        "the directory is not recreated after start-up"
    );
    assert!(is_transient(&sink.health().await));
    assert!(is_transient(&sink.open().await));
    assert!(!dir.exists());

    fs::rename(&away, &dir).unwrap();
    sink.health().await.unwrap();
    sink.write_batch(&batch(4..=6)).await.unwrap();
    assert_eq!(files(&dir).len(), 1);
    assert_eq!(sequences(&records(&dir)), [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_directory_in_place_of_the_original_is_refused() {
    // An unmounted volume leaves its empty mount point at the same path.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    let away = tmp.path().join("away");
    let mut sink = FileSink::new(config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=1)).await.unwrap();

    fs::rename(&dir, &away).unwrap();
    fs::create_dir(&dir).unwrap();
    assert!(is_transient(&sink.write_batch(&batch(2..=2)).await));
    assert!(is_transient(&sink.write_batch(&batch(2..=2)).await));
    assert!(is_transient(&sink.open().await));
    assert!(is_transient(&sink.health().await));
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written to the stand-in"
    );

    fs::remove_dir(&dir).unwrap();
    fs::rename(&away, &dir).unwrap();
    sink.write_batch(&batch(2..=2)).await.unwrap();
    assert_eq!(sequences(&records(&dir)), [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn directory_replaced_by_a_file_is_transient_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    let mut sink = FileSink::new(config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=1)).await.unwrap();

    fs::rename(&dir, tmp.path().join("away")).unwrap();
    fs::write(&dir, b"not a directory").unwrap();
    assert!(is_transient(&sink.open().await));
    assert!(is_transient(&sink.health().await));
    assert!(is_transient(&sink.write_batch(&batch(2..=2)).await));
    assert_eq!(fs::read(&dir).unwrap(), b"not a directory");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_at_the_directory_path_at_start_up_is_misconfigured() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    fs::write(&dir, b"x").unwrap();
    let mut sink = FileSink::new(config(&dir));
    assert!(matches!(
        sink.open().await,
        Err(SinkError::Misconfigured { .. })
    ));
    let mut below = FileSink::new(config(&dir.join("sub")));
    assert!(matches!(
        below.open().await,
        Err(SinkError::Misconfigured { .. })
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_file_fails_the_batch_then_a_new_file_is_started() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    let first = files(dir).pop().unwrap();
    fs::rename(&first, tmp.path().join("moved.txt")).unwrap();

    assert!(is_transient(&sink.write_batch(&batch(3..=4)).await));
    assert!(files(dir).is_empty());
    sink.write_batch(&batch(3..=4)).await.unwrap();
    assert_eq!(sequences(&records(dir)), [3, 4]);
    assert_eq!(
        sequences(&records_of(&tmp.path().join("moved.txt"))),
        [1, 2]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_reports_a_replaced_file_and_recovers_by_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    sink.health().await.unwrap();
    let path = files(dir).pop().unwrap();
    fs::remove_file(&path).unwrap();
    fs::write(&path, b"").unwrap();
    assert!(is_transient(&sink.health().await));
    // The next check opens again: the same directory, so the file there is accepted.
    sink.health().await.unwrap();
    sink.write_batch(&batch(1..=1)).await.unwrap();
    assert_eq!(sequences(&records(dir)), [1]);
}

// ---------------------------------------------------------------------------------------
// Two writers: the directory lock, bytes this writer did not write, files swapped mid-write
// ---------------------------------------------------------------------------------------

#[test]
fn a_failed_batch_is_not_cut_when_someone_else_appended_meanwhile() {
    /// Appends the batch, then another writer appends a line, then the sync fails.
    struct Shared {
        file: fs::File,
        other: fs::File,
    }
    impl BatchFile for Shared {
        fn append_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
            use std::io::Write;
            self.file.write_all(buf)?;
            self.other.write_all(b"{\"other\":\"writer's line\"}\n")
        }
        fn sync_data(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::other("EIO"))
        }
        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
        fn len(&self) -> std::io::Result<u64> {
            BatchFile::len(&self.file)
        }
        fn still_at(&self, path: &Path) -> Result<(), StillAtError> {
            self.file.still_at(path)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.jsonl");
    fs::write(&path, b"{\"kept\":1}\n").unwrap();
    let open = || fs::OpenOptions::new().append(true).open(&path).unwrap();
    let mut shared = Shared {
        file: open(),
        other: open(),
    };
    let buf = b"{\"a\":1}\n";
    assert!(commit(&mut shared, 11, buf, true, &path, &mut no_hook()).is_err());
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        text.ends_with("{\"other\":\"writer's line\"}\n"),
        "the other writer's line is not cut: {text:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sink_on_the_same_directory_and_prefix_is_refused_with_the_holder_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events");
    let mut first = FileSink::new(config(&dir));
    first.open().await.unwrap();
    first.write_batch(&batch(1..=2)).await.unwrap();

    let mut second = FileSink::new(config(&dir));
    match second.open().await {
        Err(SinkError::Transient { message }) => {
            assert!(message.contains(&*dir.to_string_lossy()), "{message}");
            assert!(
                message.contains(&format!("pid {}", std::process::id())),
                "{message}"
            );
        }
        other => panic!("expected a transient refusal, got {other:?}"),
    }
    // The refused sink wrote nothing and cut nothing.
    assert!(is_transient(&second.write_batch(&batch(9..=9)).await));
    assert_eq!(sequences(&records(&dir)), [1, 2]);

    // Another prefix in the same directory is another lock.
    let mut cfg = config(&dir);
    cfg.prefix = "audit".into();
    let mut audit = FileSink::new(cfg);
    audit.open().await.unwrap();

    // Once the holder is gone, the second one opens and continues the file.
    drop(first);
    second.open().await.unwrap();
    second.write_batch(&batch(3..=3)).await.unwrap();
    assert_eq!(sequences(&records(&dir)), [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bytes_appended_by_someone_else_are_never_cut_and_the_next_batch_goes_to_a_new_file() {
    let tmp = tempfile::tempdir().unwrap();
    let events = tmp.path().join("events");
    let dir = events.as_path();
    let mut sink = FileSink::new(config(dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    let first = files(dir).pop().unwrap();
    let foreign = b"{\"idempotency_key\":\"another writer, mid-write";
    let append = |bytes: &[u8]| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&first).unwrap();
        f.write_all(bytes).unwrap();
    };
    append(foreign);

    // While running: the size is not what this writer left, so it does not append there.
    sink.write_batch(&batch(3..=4)).await.unwrap();
    assert!(fs::read(&first).unwrap().ends_with(foreign));
    assert_eq!(files(dir).len(), 2);
    assert_eq!(sequences(&records_of(&files(dir)[1])), [3, 4]);

    // At a reopen after a failure: the torn tail is not this writer's, so it is not cut.
    let second = files(dir).pop().unwrap();
    let away = tmp.path().join("away");
    let moved = away.join(second.file_name().unwrap());
    fs::rename(dir, &away).unwrap();
    assert!(is_transient(&sink.write_batch(&batch(5..=5)).await));
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&moved).unwrap();
        f.write_all(foreign).unwrap();
    }
    fs::rename(&away, dir).unwrap();
    sink.write_batch(&batch(5..=5)).await.unwrap();
    assert!(fs::read(&second).unwrap().ends_with(foreign));
    let names = files(dir);
    assert_eq!(names.len(), 3);
    assert_eq!(sequences(&records_of(&names[2])), [5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_unlinked_between_sync_and_commit_fails_the_batch_which_goes_to_a_fresh_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut sink = FileSink::new(config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    let unlinked = Arc::new(AtomicU64::new(0));
    let count = unlinked.clone();
    sink.set_after_sync(Box::new(move |path: &Path| {
        if count.fetch_add(1, Ordering::SeqCst) == 0 {
            fs::remove_file(path).unwrap();
        }
    }));

    let failed = sink.write_batch(&batch(3..=4)).await;
    match &failed {
        Err(SinkError::Transient { message }) => assert!(message.contains("deleted"), "{message}"),
        other => panic!("the batch must not be committed, got {other:?}"),
    }
    assert!(files(&dir).is_empty());
    sink.write_batch(&batch(3..=4)).await.unwrap();
    assert_eq!(unlinked.load(Ordering::SeqCst), 2);
    assert_eq!(files(&dir).len(), 1);
    assert_eq!(sequences(&records(&dir)), [3, 4]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_replaced_between_sync_and_commit_fails_the_batch_and_the_stand_in_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut sink = FileSink::new(config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    let stand_in = b"{\"stand\":\"in\"}\n";
    let done = Arc::new(AtomicU64::new(0));
    let once = done.clone();
    let moved = tmp.path().join("moved.jsonl.bak");
    let moved_to = moved.clone();
    sink.set_after_sync(Box::new(move |path: &Path| {
        if once.fetch_add(1, Ordering::SeqCst) == 0 {
            fs::rename(path, &moved_to).unwrap();
            fs::write(path, stand_in).unwrap();
        }
    }));

    match sink.write_batch(&batch(3..=4)).await {
        Err(SinkError::Transient { message }) => assert!(message.contains("replaced"), "{message}"),
        other => panic!("the batch must not be committed, got {other:?}"),
    }
    // The failed batch is cut back out of the moved file.
    assert_eq!(sequences(&records_of(&moved)), [1, 2]);
    sink.write_batch(&batch(3..=4)).await.unwrap();
    let names = files(&dir);
    assert_eq!(names.len(), 2);
    assert_eq!(fs::read(&names[0]).unwrap(), stand_in);
    assert_eq!(sequences(&records_of(&names[1])), [3, 4]);
}

// ---------------------------------------------------------------------------
// format: "parquet"
// ---------------------------------------------------------------------------

fn parquet_config(dir: &Path) -> FileConfig {
    FileConfig {
        format: crate::sinks::parquet::Format::Parquet,
        rotate_bytes: FileConfig::default().rotate_bytes,
        ..config(dir)
    }
}

fn parquet_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".events.lock"))
        .collect();
    names.sort();
    names
}

#[test]
fn parquet_settings_name_the_keys_of_the_other_format() {
    use crate::sinks::settings::DestinationSettings;
    let dir = Path::new("d");
    let mut c = parquet_config(dir);
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    c.rotate_interval_ms = 60_000;
    c.rotate_bytes = 4096;
    let keys: Vec<String> = c.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["rotate_bytes", "rotate_interval_ms"]);
    let mut c = config(dir);
    c.rollover = Some(crate::sinks::s3::config::RolloverConfig {
        max_messages: 100,
        max_age_ms: 1000,
        max_bytes: 1 << 20,
    });
    c.compression = Some(crate::sinks::parquet::Codec::Snappy);
    let keys: Vec<String> = c.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["compression", "rollover"]);
    assert_eq!(
        c.accumulate(),
        None,
        "JSON Lines files never gather batches"
    );
    c.format = crate::sinks::parquet::Format::Parquet;
    c.rotate_bytes = 128 * 1024 * 1024;
    assert!(c.problems().is_empty(), "{:?}", c.problems());
    assert_eq!(
        c.accumulate().map(|a| (a.messages, a.bytes, a.flush_ms)),
        Some((100, 1 << 20, 1000))
    );
    assert!(c
        .describe()
        .contains("a file per 100 messages, 1048576 bytes or 1000 ms"));
    assert!(!c.rolls_over_by_default(), "it has a rollover of its own");
    c.rollover = None;
    assert_eq!(c.accumulate(), None);
    assert!(c.rolls_over_by_default());
    assert!(c.describe().contains("default rollover"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parquet_batch_is_one_file_named_by_its_sequences_and_a_rewrite_replaces_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=3)).await.unwrap();
    sink.write_batch(&batch(4..=5)).await.unwrap();
    // The same messages again (a redelivery after a crash before the ACK).
    sink.write_batch(&batch(1..=3)).await.unwrap();
    let names = parquet_files(&dir);
    assert_eq!(
        names,
        [
            "events-00000000000000000001-00000000000000000003.parquet",
            "events-00000000000000000004-00000000000000000005.parquet",
        ]
    );
    let rows =
        crate::sinks::parquet::read::rows(std::fs::read(dir.join(&names[0])).unwrap().into())
            .unwrap();
    assert_eq!(rows.len(), 3, "rewritten, not appended");
    assert_eq!(
        crate::sinks::file::columnar::stored_keys(&dir, "events", "ORDERS").unwrap(),
        Some(5)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_temporary_file_left_by_a_crash_is_removed_at_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    std::fs::create_dir_all(&dir).unwrap();
    let left = dir.join(".events-00000000000000000001-00000000000000000009.parquet.tmp");
    std::fs::write(&left, b"PAR1 half").unwrap();
    let other = dir.join(".other-00000000000000000001-00000000000000000009.parquet.tmp");
    std::fs::write(&other, b"not ours").unwrap();
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.open().await.unwrap();
    assert!(!left.exists(), "this prefix's temporary file is gone");
    assert!(other.exists(), "another prefix's is left alone");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parquet_value_that_does_not_fit_refuses_that_message_and_leaves_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let mut c = parquet_config(&dir);
    c.columns = Some([("n".to_string(), "/n".to_string())].into_iter().collect());
    c.column_types = Some(
        [("n".to_string(), crate::sinks::parquet::ColumnType::Int64)]
            .into_iter()
            .collect(),
    );
    let mut sink = FileSink::new(c);
    sink.open().await.unwrap();
    let mut b = batch(1..=3);
    b[1] = envelope(2, "{broken".to_string());
    match sink.write_batch(&b).await {
        Err(SinkError::Permanent { index, message }) => {
            assert_eq!(index, Some(1));
            assert!(message.contains("sequence 2"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(parquet_files(&dir).is_empty(), "{:?}", parquet_files(&dir));
    sink.write_batch(&[b[0].clone(), b[2].clone()])
        .await
        .unwrap();
    assert_eq!(parquet_files(&dir).len(), 1);
}

/// `seqs` delivered `delivered` times.
fn again(seqs: &[u64], delivered: u64) -> Vec<Envelope> {
    seqs.iter()
        .map(|&s| Envelope {
            delivered,
            ..envelope(s, format!("{{\"n\":{s}}}"))
        })
        .collect()
}

/// Every stream sequence in the directory's Parquet files, one per row.
fn parquet_rows(dir: &Path) -> Vec<u64> {
    let mut seqs = Vec::new();
    for name in parquet_files(dir) {
        let data = std::fs::read(dir.join(&name)).unwrap();
        if let Ok(Some(s)) = crate::sinks::parquet::read::sequences(data.into()) {
            seqs.extend(s);
        }
    }
    seqs.sort_unstable();
    seqs
}

fn already(outcomes: &crate::sinks::Written) -> Vec<usize> {
    match outcomes {
        crate::sinks::Written::Batch(Ok(())) => Vec::new(),
        crate::sinks::Written::Each(o) => o
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, crate::sinks::Outcome::AlreadyStored))
            .map(|(i, _)| i)
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redelivered_messages_a_parquet_file_holds_are_committed_without_a_second_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=10)).await.unwrap();
    // A crash before the ACKs: 6..10 come back, cut with new messages.
    let mut b = again(&[6, 7, 8, 9, 10], 2);
    b.extend(batch(11..=15));
    assert_eq!(already(&sink.write(&b).await), [0, 1, 2, 3, 4]);
    // Every one of a batch held: no file at all.
    assert_eq!(already(&sink.write(&again(&[3, 1, 2], 3)).await), [0, 1, 2]);
    assert_eq!(
        parquet_files(&dir),
        [
            "events-00000000000000000001-00000000000000000010.parquet",
            "events-00000000000000000011-00000000000000000015.parquet",
        ]
    );
    assert_eq!(parquet_rows(&dir), (1..=15).collect::<Vec<_>>());
    // A file with gaps is read: 22 is in it, 23 is not.
    sink.write_batch(&again(&[20, 22, 24], 1)).await.unwrap();
    let mut b = again(&[23, 22], 2);
    b.extend(again(&[25], 1));
    assert_eq!(already(&sink.write(&b).await), [1]);
    assert!(
        dir.join(format!(
            "events-{}.parquet",
            crate::sinks::util::archive::object_name(&[23, 25])
        ))
        .exists(),
        "named after what was written: {:?}",
        parquet_files(&dir)
    );
    // A message twice in one batch: one row, both committed.
    let b = [again(&[30], 1), again(&[30], 2)].concat();
    assert_eq!(already(&sink.write(&b).await), [1]);
    let mut expected: Vec<u64> = (1..=15).chain([20, 22, 23, 24, 25, 30]).collect();
    expected.sort_unstable();
    assert_eq!(parquet_rows(&dir), expected, "each message once");
}

/// A nats-server killed and restarted can roll its consumer state back and send messages
/// a killed process had written as delivery 1 again; a replay writes messages the sink's
/// consumer later delivers as first deliveries. Every message is checked against what the
/// directory holds, whatever its delivery count.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_delivery_already_in_a_file_is_found_there_and_not_written_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let mut first = FileSink::new(parquet_config(&dir));
    first.open().await.unwrap();
    first.write_batch(&batch(1..=10)).await.unwrap();
    first.write_batch(&again(&[20, 22], 1)).await.unwrap();
    drop(first);
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.open().await.unwrap();
    let b = again(&[8, 9, 10, 11, 12, 13, 22, 21], 1);
    assert_eq!(already(&sink.write(&b).await), [0, 1, 2, 6]);
    // Written by this process: found without listing again.
    assert_eq!(already(&sink.write(&again(&[13, 21, 14], 1)).await), [0, 1]);
    let mut expected: Vec<u64> = (1..=14).chain([20, 21, 22]).collect();
    expected.sort_unstable();
    assert_eq!(parquet_rows(&dir), expected, "each once");
}

/// A stream deleted and created again under the same name numbers its messages from 1
/// again: files written before it was created hold the old stream's messages, not its.
#[tokio::test(flavor = "multi_thread")]
async fn files_written_before_the_stream_was_created_hold_none_of_its_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let mut old = FileSink::new(parquet_config(&dir));
    old.open().await.unwrap();
    old.write_batch(&batch(1..=5)).await.unwrap();
    drop(old);
    let created = std::time::SystemTime::now() + Duration::from_secs(1);
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.stream_created(created);
    sink.open().await.unwrap();
    assert_eq!(
        already(&sink.write(&batch(1..=3)).await),
        Vec::<usize>::new()
    );
    assert_eq!(parquet_files(&dir).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_file_with_an_archive_name_holds_nothing_and_the_message_is_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    let name = |seqs: &[u64]| {
        format!(
            "events-{}.parquet",
            crate::sinks::util::archive::object_name(seqs)
        )
    };
    let mut first = FileSink::new(parquet_config(&dir));
    first.open().await.unwrap();
    first.write_batch(&batch(50..=52)).await.unwrap();
    first.write_batch(&again(&[60, 62], 1)).await.unwrap();
    drop(first);
    // Not Parquet at all; and a real file renamed to another set's name.
    std::fs::write(dir.join(name(&[40, 42, 44])), b"PAR1 not really PAR1").unwrap();
    std::fs::rename(dir.join(name(&[60, 62])), dir.join(name(&[60, 61, 63]))).unwrap();
    // A name this sink's prefix does not own is not looked at.
    std::fs::write(
        dir.join("other-00000000000000000070-00000000000000000070.parquet"),
        b"x",
    )
    .unwrap();
    let mut sink = FileSink::new(parquet_config(&dir));
    sink.open().await.unwrap();
    let b = again(&[42, 61], 2);
    assert_eq!(sink.write(&b).await, crate::sinks::Written::Batch(Ok(())));
    assert!(dir.join(name(&[42, 61])).exists());
    // Written now: held. 51 is held by its own file, 70 by none of this prefix's.
    assert_eq!(already(&sink.write(&again(&[70, 51, 42], 2)).await), [1, 2]);
    assert!(dir.join(name(&[70])).exists());
}

/// The file sink as the daemon builds it: told its stream before it opens.
fn attached(config: FileConfig) -> FileSink {
    let mut sink = FileSink::new(config);
    sink.attach(&crate::sinks::Feed {
        sink: "s".into(),
        stream: "ORDERS".into(),
    });
    sink
}

/// What a crash between the fdatasync and the ACKs, a broker that rolls its consumer state
/// back, or a replay brings back — as redeliveries or as first deliveries — is found in
/// the JSON Lines files and committed without a second line, also by the next process.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_already_in_a_json_lines_file_is_committed_without_a_second_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut first = attached(config(dir));
    first.open().await.unwrap();
    first.write_batch(&batch(1..=10)).await.unwrap();
    assert_eq!(already(&first.write(&again(&[9, 10, 11], 2)).await), [0, 1]);
    drop(first);
    let mut sink = attached(config(dir));
    sink.open().await.unwrap();
    let b = [again(&[12, 3, 11], 1), again(&[12], 2)].concat();
    assert_eq!(already(&sink.write(&b).await), [1, 2, 3]);
    let mut seqs = sequences(&records(dir));
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>(), "each message once");
}

/// A closed file's sequences are sealed beside it, so the next start reads the seal, not
/// the file; a file with gaps is read (from its seal) only when a message falls in its
/// range.
#[tokio::test(flavor = "multi_thread")]
async fn rotation_seals_each_closed_file_and_the_next_start_trusts_the_seals() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cfg = config(dir);
    cfg.rotate_bytes = 4_096;
    let mut sink = attached(cfg.clone());
    sink.open().await.unwrap();
    for start in (1..=200).step_by(10) {
        let b: Vec<u64> = (start..start + 10).filter(|s| s % 7 != 0).collect();
        sink.write_batch(&again(&b, 1)).await.unwrap();
    }
    drop(sink);
    let names = files(dir);
    assert!(names.len() > 3, "{names:?}");
    let sealed = names
        .iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            dir.join(super::held::seal_name(name)).exists()
        })
        .count();
    assert_eq!(
        sealed,
        names.len() - 1,
        "every file but the current one is sealed"
    );
    let mut sink = attached(cfg);
    sink.open().await.unwrap();
    let b = again(&[7, 8, 14, 15, 197, 201], 1);
    assert_eq!(already(&sink.write(&b).await), [1, 3, 4]);
    let mut seqs = sequences(&records(dir));
    seqs.sort_unstable();
    let expected: Vec<u64> = (1..=201)
        .filter(|s| s % 7 != 0 || *s == 7 || *s == 14)
        .collect();
    assert_eq!(seqs, expected);
}

/// A stream deleted and created again numbers its messages from 1: a JSON Lines file
/// last written before it was created is neither continued nor counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_json_lines_file_older_than_the_stream_is_not_continued_and_holds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut old = attached(config(dir));
    old.open().await.unwrap();
    old.write_batch(&batch(1..=5)).await.unwrap();
    drop(old);
    let mut sink = attached(config(dir));
    sink.stream_created(SystemTime::now() + Duration::from_secs(1));
    sink.open().await.unwrap();
    assert_eq!(
        already(&sink.write(&batch(1..=3)).await),
        Vec::<usize>::new()
    );
    let names = files(dir);
    assert_eq!(names.len(), 2);
    assert_eq!(sequences(&records_of(&names[1])), [1, 2, 3]);
}
