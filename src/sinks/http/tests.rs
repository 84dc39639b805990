//! Unit tests of the `http` destination's pure parts: settings checks, batch keys and
//! bodies. Status classification and `Retry-After` are tested beside their code
//! (`classify.rs`); the sink against a real server in `tests/http_destination.rs`.

use bytes::Bytes;
use proptest::prelude::*;
use time::OffsetDateTime;

use super::body::{batch_body, batch_key, message_body};
use super::config::{BatchFormat, HttpConfig};
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};
use crate::sinks::file::record;
use crate::sinks::settings::DestinationSettings;

fn config(json: serde_json::Value) -> HttpConfig {
    serde_json::from_value(json).unwrap()
}

fn keys(c: &HttpConfig) -> Vec<String> {
    c.problems().into_iter().map(|(k, _)| k).collect()
}

fn problems(c: &HttpConfig) -> Vec<String> {
    c.problems()
        .into_iter()
        .map(|(k, m)| format!("{k}: {m}"))
        .collect()
}

#[test]
fn an_https_url_with_defaults_is_valid() {
    let c = config(serde_json::json!({"url": "https://ingest.example.com/v1/events"}));
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
    assert_eq!(c.idempotency_header, "Idempotency-Key");
    assert_eq!(c.concurrency, 16);
    assert_eq!(c.request_timeout_ms, 30_000);
}

#[test]
fn plain_http_needs_allow_insecure_http() {
    let c = config(serde_json::json!({"url": "http://127.0.0.1:8080/in"}));
    let p = problems(&c);
    assert!(
        p.iter()
            .any(|m| m.starts_with("url: is plain http") && m.contains("allow_insecure_http")),
        "{p:?}"
    );
    let c =
        config(serde_json::json!({"url": "http://127.0.0.1:8080/in", "allow_insecure_http": true}));
    assert!(problems(&c).is_empty(), "{:?}", problems(&c));
}

#[test]
fn url_scheme_host_and_credentials_are_checked() {
    for (url, needle) in [
        ("ftp://h/x", "scheme must be https"),
        ("not a url", "not a URL"),
        ("https://user:pw@h/x", "must not contain a user or password"),
    ] {
        let p = problems(&config(serde_json::json!({ "url": url })));
        assert!(
            p.iter()
                .any(|m| m.starts_with("url: ") && m.contains(needle)),
            "{url}: {p:?}"
        );
        // The password itself never appears in a message.
        assert!(p.iter().all(|m| !m.contains("pw@")), "{p:?}");
    }
}

#[test]
fn tls_settings_need_https_and_come_in_pairs() {
    let c = config(serde_json::json!({
        "url": "http://h/x", "allow_insecure_http": true,
        "tls": {"client_cert_file": "c.pem"}
    }));
    let k = keys(&c);
    assert!(k.contains(&"tls".to_string()), "{k:?}");
    let p = problems(&c);
    assert!(
        p.iter().any(|m| m == "tls: applies to https URLs only"),
        "{p:?}"
    );
    assert!(p.iter().any(|m| m.contains("client_key_file")), "{p:?}");
}

#[test]
fn header_names_and_values_are_checked_at_their_key() {
    let c = config(serde_json::json!({
        "url": "https://h/x",
        "headers": {"X-Ok": "yes", "Bad Name": "v", "X-Line": "a\nb", "content-type": "text/plain", "idempotency-key": "k"},
        "secret_headers": {"Authorization": {"env": "TOKEN"}, "X-Both": {"env": "A", "file": "/f"}, "X-Ok": {"file": "/f"}}
    }));
    let p = problems(&c);
    for needle in [
        "headers.Bad Name: not a valid header name",
        "headers.X-Line: value must be visible ASCII",
        "headers.content-type: is set by jetsink",
        "headers.idempotency-key: is set by jetsink",
        "secret_headers.X-Both: give exactly one of `env`",
        "secret_headers.X-Ok: is also in `headers`",
    ] {
        assert!(p.iter().any(|m| m.starts_with(needle)), "{needle}: {p:?}");
    }
    assert!(
        !p.iter()
            .any(|m| m.starts_with("secret_headers.Authorization")),
        "{p:?}"
    );
    assert!(!p.iter().any(|m| m.starts_with("headers.X-Ok")), "{p:?}");
}

#[test]
fn describe_names_headers_but_never_their_values_or_the_query() {
    let c = config(serde_json::json!({
        "url": "https://h:8443/in?token=SECRETQ",
        "headers": {"X-Tenant": "VISIBLE-BUT-UNPRINTED"},
        "secret_headers": {"Authorization": {"env": "SECRET_ENV_NAME"}}
    }));
    let d = c.describe();
    assert_eq!(
        d,
        "http POST https://h:8443/in (batch, ndjson; headers: X-Tenant, Authorization)"
    );
    assert_eq!(c.target(), "http:POST https://h:8443/in");
}

#[test]
fn timeouts_and_bounds_are_checked() {
    let c = config(serde_json::json!({
        "url": "https://h/x", "connect_timeout_ms": 50, "request_timeout_ms": 4_000_000,
        "concurrency": 0, "max_response_bytes": 1u64 << 40, "retry_after_max_ms": 700_000
    }));
    let k = keys(&c);
    for key in [
        "connect_timeout_ms",
        "request_timeout_ms",
        "concurrency",
        "max_response_bytes",
        "retry_after_max_ms",
    ] {
        assert!(k.contains(&key.to_string()), "{key}: {k:?}");
    }
    let c = config(
        serde_json::json!({"url": "https://h/x", "connect_timeout_ms": 9_000, "request_timeout_ms": 5_000}),
    );
    let p = problems(&c);
    assert!(
        p.iter()
            .any(|m| m.starts_with("connect_timeout_ms: must not exceed request_timeout_ms")),
        "{p:?}"
    );
}

#[test]
fn unknown_keys_are_refused() {
    let r: Result<HttpConfig, _> =
        serde_json::from_value(serde_json::json!({"url": "https://h/x", "timeout": 5}));
    assert!(r.is_err());
}

fn envelope(stream: &str, seq: u64, payload: &'static [u8]) -> Envelope {
    normalize(
        "orders.new",
        Delivery {
            stream,
            consumer: "c",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published: OffsetDateTime::UNIX_EPOCH,
        },
        [],
        Bytes::from_static(payload),
        IdempotencyKey::StreamSequence,
    )
}

#[test]
fn batch_key_is_stream_lowest_highest_and_count() {
    let batch = [
        envelope("S", 7, b"1"),
        envelope("S", 3, b"2"),
        envelope("S", 9, b"3"),
    ];
    assert_eq!(batch_key(&batch), "S:3-9:3");
    assert_eq!(batch_key(&batch[1..2]), "S:3-3:1");
}

proptest! {
    #[test]
    fn batch_key_ignores_order_and_tells_parts_apart(
        seqs in proptest::collection::btree_set(1u64..1_000_000, 1..40),
        rotate in 0usize..40,
    ) {
        let sorted: Vec<Envelope> = seqs.iter().map(|s| envelope("S", *s, b"x")).collect();
        let mut shuffled = sorted.clone();
        let n = shuffled.len();
        shuffled.rotate_left(rotate % n);
        prop_assert_eq!(batch_key(&sorted), batch_key(&shuffled));
        if n > 1 {
            // The halves of a split batch never reuse the whole batch's key.
            let (a, b) = sorted.split_at(n / 2);
            prop_assert_ne!(batch_key(a), batch_key(&sorted));
            prop_assert_ne!(batch_key(b), batch_key(&sorted));
            prop_assert_ne!(batch_key(a), batch_key(b));
        }
    }
}

#[test]
fn bodies_are_the_file_destination_records() {
    let batch = [
        envelope("S", 1, b"{\"a\":1}"),
        envelope("S", 2, b"\xff\x00"),
    ];
    let mut lines = Vec::new();
    for e in &batch {
        record::encode(e, "2024-01-01T00:00:00.000000000Z", &mut lines).unwrap();
    }
    let (nd, ct) = batch_body(
        &batch,
        BatchFormat::Ndjson,
        "2024-01-01T00:00:00.000000000Z",
    )
    .unwrap();
    assert_eq!(ct, "application/x-ndjson");
    assert_eq!(nd, lines);

    let (arr, ct) = batch_body(
        &batch,
        BatchFormat::JsonArray,
        "2024-01-01T00:00:00.000000000Z",
    )
    .unwrap();
    assert_eq!(ct, "application/json");
    let parsed: Vec<serde_json::Value> = serde_json::from_slice(&arr).unwrap();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0]["idempotency_key"], "S:1");
    assert_eq!(parsed[0]["payload"]["a"], 1);
    assert_eq!(parsed[1]["payload_encoding"], "base64");
    let first_line: serde_json::Value =
        serde_json::from_slice(lines.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(parsed[0], first_line);

    let (one, ct) = message_body(&batch[0], "2024-01-01T00:00:00.000000000Z").unwrap();
    assert_eq!(ct, "application/json");
    assert!(!one.ends_with(b"\n"));
    let one: serde_json::Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(one, first_line);
}
