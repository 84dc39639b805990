//! Round trips of the encryption stage over envelopes: binding, tampering, unknown keys,
//! rotation, header sealing.

use bytes::Bytes;

use super::cipher::OpenError;
use super::keys::{KeyRing, KEY_LEN};
use super::stage::Encryption;
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};

fn ring(keys: &[(&str, u8)], active: &str) -> KeyRing {
    KeyRing::new(
        keys.iter().map(|(id, b)| (id.to_string(), [*b; KEY_LEN])),
        active,
    )
    .unwrap()
}

fn message(seq: u64, payload: &'static [u8]) -> Envelope {
    normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "c",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published: time::OffsetDateTime::UNIX_EPOCH,
        },
        [("Authorization", "Bearer s3cret"), ("X-Trace", "t1")],
        Bytes::from_static(payload),
        IdempotencyKey::StreamSequence,
    )
}

fn enc(r: KeyRing) -> Encryption {
    Encryption::new(r, vec!["authorization".into()], Vec::new())
}

#[test]
fn a_sealed_payload_holds_no_plaintext_and_opens_to_the_original() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut e = message(7, b"{\"card\":\"4111-1111\"}");
    stage.seal(&mut e).unwrap();
    assert_eq!(e.payload_encoding(), Some("aes256gcm-v1"));
    assert!(!e.payload.windows(4).any(|w| w == b"4111"));
    assert_eq!(&e.clear_payload()[..], b"{\"card\":\"4111-1111\"}");
    let clear = stage
        .open_payload("ORDERS", 7, "orders.new", &e.payload)
        .unwrap();
    assert_eq!(clear, b"{\"card\":\"4111-1111\"}");
}

#[test]
fn listed_headers_are_sealed_and_others_stay_clear() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut e = message(7, b"x");
    stage.seal(&mut e).unwrap();
    let auth = &e
        .headers
        .iter()
        .find(|(n, _)| n == "Authorization")
        .unwrap()
        .1[0];
    assert!(!auth.contains("s3cret"));
    let trace = &e.headers.iter().find(|(n, _)| n == "X-Trace").unwrap().1[0];
    assert_eq!(trace, "t1");
    let opened = stage
        .open_header(("ORDERS", 7, "orders.new"), "Authorization", 0, auth)
        .unwrap();
    assert_eq!(opened.as_deref(), Some("Bearer s3cret"));
    assert_eq!(e.clear_headers()[0].1[0], "Bearer s3cret");
}

#[test]
fn a_payload_moved_to_another_message_or_stream_fails_to_open() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut e = message(7, b"secret");
    stage.seal(&mut e).unwrap();
    for (stream, seq, subject) in [
        ("ORDERS", 8, "orders.new"),
        ("OTHER", 7, "orders.new"),
        ("ORDERS", 7, "orders.old"),
    ] {
        let err = stage
            .open_payload(stream, seq, subject, &e.payload)
            .unwrap_err();
        assert!(matches!(err, OpenError::Authentication { .. }), "{err}");
        assert!(
            err.to_string().contains(&format!("sequence {seq}")),
            "{err}"
        );
    }
}

#[test]
fn a_flipped_bit_anywhere_fails_to_open() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut e = message(7, b"secret");
    stage.seal(&mut e).unwrap();
    for i in 0..e.payload.len() {
        let mut bytes = e.payload.to_vec();
        bytes[i] ^= 0x01;
        assert!(
            stage
                .open_payload("ORDERS", 7, "orders.new", &bytes)
                .is_err(),
            "bit flipped at byte {i} went unnoticed"
        );
    }
}

#[test]
fn an_unknown_key_id_fails_naming_the_id() {
    let writer = enc(ring(&[("old", 1)], "old"));
    let reader = enc(ring(&[("new", 2)], "new"));
    let mut e = message(7, b"secret");
    writer.seal(&mut e).unwrap();
    let err = reader
        .open_payload("ORDERS", 7, "orders.new", &e.payload)
        .unwrap_err();
    assert_eq!(err, OpenError::UnknownKey("old".into()));
    assert!(err.to_string().contains("`old`"));
}

#[test]
fn after_rotation_values_sealed_with_either_key_open() {
    let before = enc(ring(&[("a", 1)], "a"));
    let after = enc(ring(&[("a", 1), ("b", 2)], "b"));
    let mut old = message(1, b"one");
    let mut new = message(2, b"two");
    before.seal(&mut old).unwrap();
    after.seal(&mut new).unwrap();
    assert_eq!(
        after
            .open_payload("ORDERS", 1, "orders.new", &old.payload)
            .unwrap(),
        b"one"
    );
    assert_eq!(
        after
            .open_payload("ORDERS", 2, "orders.new", &new.payload)
            .unwrap(),
        b"two"
    );
    assert_eq!(
        super::sealed::Sealed::parse(&new.payload).unwrap().key_id,
        "b"
    );
}

#[test]
fn nonces_differ_per_message() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut x = message(1, b"same");
    let mut y = message(1, b"same");
    stage.seal(&mut x).unwrap();
    stage.seal(&mut y).unwrap();
    assert_ne!(x.payload, y.payload);
}

#[test]
fn subjects_outside_the_filter_stay_clear() {
    let stage = Encryption::new(ring(&[("a", 1)], "a"), Vec::new(), vec!["pay.>".into()]);
    let mut e = message(1, b"clear");
    stage.seal(&mut e).unwrap();
    assert_eq!(e.payload_encoding(), None);
    assert_eq!(&e.payload[..], b"clear");
}

#[test]
fn a_dead_letter_copy_of_an_encrypted_message_carries_the_clear_payload_and_headers() {
    let stage = enc(ring(&[("a", 1)], "a"));
    let mut e = message(7, b"{\"card\":\"4111\"}");
    stage.seal(&mut e).unwrap();
    let cfg = crate::config::dead_letter::DeadLetterConfig {
        subject: "dlq.{sink}".into(),
        ..Default::default()
    };
    let copy = crate::dlq::copy::build(
        &cfg,
        "s",
        &e,
        "permanent",
        "refused",
        "destination",
        time::OffsetDateTime::UNIX_EPOCH,
    );
    assert_eq!(&copy.payload[..], b"{\"card\":\"4111\"}");
    assert_eq!(
        copy.headers.get("Authorization").map(|v| v.as_str()),
        Some("Bearer s3cret")
    );
}

fn on(subject: &str, seq: u64) -> Envelope {
    let mut e = message(seq, b"{\"x\":1}");
    e.subject = subject.to_string();
    e
}

fn key_id_of(e: &Envelope) -> String {
    super::sealed::Sealed::parse(&e.payload).unwrap().key_id
}

#[test]
fn key_rules_choose_the_key_by_subject_first_match_wins_else_the_active_key() {
    use super::stage::KeyRule;
    let rule = |subjects: &[&str], key_id: &str| KeyRule {
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        key_id: key_id.into(),
    };
    let stage = enc(ring(&[("a", 1), ("eu", 2), ("de", 3)], "a"))
        .with_rules(vec![
            rule(&["pay.eu.de.*"], "de"),
            rule(&["pay.eu.>", "refund.eu.>"], "eu"),
            rule(&["pay.eu.fr"], "de"),
        ])
        .unwrap();
    for (subject, want) in [
        ("pay.eu.de.x", "de"),
        ("pay.eu.fr", "eu"),
        ("refund.eu.x", "eu"),
        ("pay.us.x", "a"),
    ] {
        assert_eq!(stage.key_id_for(subject), want, "{subject}");
        let mut e = on(subject, 3);
        stage.seal(&mut e).unwrap();
        assert_eq!(key_id_of(&e), want, "{subject}");
        let clear = stage
            .open_payload("ORDERS", 3, subject, &e.payload)
            .unwrap();
        assert_eq!(clear, b"{\"x\":1}");
        let auth = &e
            .headers
            .iter()
            .find(|(n, _)| n == "Authorization")
            .unwrap()
            .1[0];
        assert_eq!(
            stage
                .open_header(("ORDERS", 3, subject), "Authorization", 0, auth)
                .unwrap()
                .as_deref(),
            Some("Bearer s3cret")
        );
    }
}

#[test]
fn a_key_rule_naming_a_key_outside_the_ring_is_refused() {
    use super::stage::{KeyRule, UnknownRuleKey};
    let err = enc(ring(&[("a", 1)], "a"))
        .with_rules(vec![KeyRule {
            subjects: vec!["x.>".into()],
            key_id: "b".into(),
        }])
        .unwrap_err();
    assert_eq!(
        err,
        UnknownRuleKey {
            index: 0,
            key_id: "b".into()
        }
    );
}

/// Counts calls and hands out distinct bytes.
struct Counting(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicUsize);

impl super::NonceSource for Counting {
    fn fill(&self, out: &mut [u8]) -> Result<(), super::SealError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for chunk in out.chunks_mut(8) {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            chunk.copy_from_slice(&n.to_be_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}

#[test]
fn a_batch_draws_its_nonces_in_one_call_and_every_value_gets_its_own() {
    let source = std::sync::Arc::new(Counting(Default::default(), Default::default()));
    struct Shared(std::sync::Arc<Counting>);
    impl super::NonceSource for Shared {
        fn fill(&self, out: &mut [u8]) -> Result<(), super::SealError> {
            self.0.fill(out)
        }
    }
    let stage = Encryption::with_nonces(
        ring(&[("a", 1)], "a"),
        Vec::new(),
        Vec::new(),
        Box::new(Shared(source.clone())),
    );
    let mut batch: Vec<Envelope> = (1..=100).map(|i| on("pay.x", i)).collect();
    let mut sealer = stage.sealer(batch.iter());
    let n = batch.len();
    for (i, e) in batch.iter_mut().enumerate() {
        stage.seal_with(e, &mut sealer, n - i).unwrap();
    }
    assert_eq!(source.1.load(std::sync::atomic::Ordering::Relaxed), 1);
    let nonces: std::collections::HashSet<[u8; 12]> = batch
        .iter()
        .map(|e| super::sealed::Sealed::parse(&e.payload).unwrap().nonce)
        .collect();
    assert_eq!(nonces.len(), 100);
    for e in &batch {
        let clear = stage
            .open_payload("ORDERS", e.stream_sequence, "pay.x", &e.payload)
            .unwrap();
        assert_eq!(clear, b"{\"x\":1}");
    }
}

#[test]
fn a_failing_generator_leaves_the_message_unsealed_and_says_so() {
    struct Broken;
    impl super::NonceSource for Broken {
        fn fill(&self, _: &mut [u8]) -> Result<(), super::SealError> {
            Err(super::SealError::Random)
        }
    }
    let stage = Encryption::with_nonces(
        ring(&[("a", 1)], "a"),
        Vec::new(),
        Vec::new(),
        Box::new(Broken),
    );
    let mut e = on("pay.x", 1);
    assert_eq!(stage.seal(&mut e), Err(super::SealError::Random));
    assert_eq!(e.payload_encoding(), None);
}
