//! Unit tests of the `exec` destination: settings checks, exit classification, output
//! bounding (proptest), and real children (`/bin/sh`, `/bin/cat`).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::capture::Bounded;
use super::classify::{classify, ended, Ended, Verdict};
use super::config::ExecConfig;
use super::sink::ExecSink;
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};
use crate::sinks::contract::{Outcome, Sink, SinkError, Written};
use crate::sinks::settings::DestinationSettings;

fn cfg(command: &[&str]) -> ExecConfig {
    serde_json::from_value(serde_json::json!({ "command": command })).unwrap()
}

fn job(payload: &str, seq: u64) -> Envelope {
    normalize(
        "jobs.run",
        Delivery {
            stream: "JOBS",
            consumer: "w",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published: time::OffsetDateTime::UNIX_EPOCH,
        },
        vec![("Nats-Msg-Id", "j-1")],
        bytes::Bytes::from(payload.to_string()),
        IdempotencyKey::StreamSequence,
    )
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = cfg(&["/bin/true"]);
    assert_eq!(c.timeout_ms, 60_000);
    assert_eq!(c.concurrency, 4);
    assert_eq!(c.max_output_bytes, 65_536);
    assert_eq!(c.transient_exit_codes, vec![75]);
    assert!(c.problems().is_empty());
}

#[test]
fn bad_settings_are_named_by_key() {
    let mut c = cfg(&["true"]);
    c.timeout_ms = 0;
    c.concurrency = 0;
    c.transient_exit_codes = vec![0, 75, 256];
    c.env = BTreeMap::from([
        ("JETSINK_X".to_string(), "1".to_string()),
        ("A=B".to_string(), "1".to_string()),
    ]);
    c.pass_env = vec!["PATH".into(), "1X".into()];
    c.working_dir = Some("rel".into());
    let keys: Vec<String> = c.problems().into_iter().map(|(k, _)| k).collect();
    for k in [
        "command[0]",
        "timeout_ms",
        "concurrency",
        "transient_exit_codes[0]",
        "transient_exit_codes[2]",
        "env.JETSINK_X",
        "env.A=B",
        "pass_env[1]",
        "working_dir",
    ] {
        assert!(keys.contains(&k.to_string()), "{k} missing from {keys:?}");
    }
    assert!(!keys.contains(&"transient_exit_codes[1]".to_string()));
    assert!(!cfg(&[]).problems().is_empty());
}

#[test]
fn exit_codes_are_classified() {
    let t = [75, 69];
    assert_eq!(classify(Ended::Exited(0), &t, 10), Verdict::Committed);
    assert!(matches!(
        classify(Ended::Exited(75), &t, 10),
        Verdict::Later(_)
    ));
    assert!(matches!(
        classify(Ended::Exited(69), &t, 10),
        Verdict::Later(_)
    ));
    assert!(matches!(
        classify(Ended::Exited(1), &t, 10),
        Verdict::Refused(_)
    ));
    assert!(matches!(
        classify(Ended::Exited(75), &[], 10),
        Verdict::Refused(_)
    ));
    assert!(matches!(
        classify(Ended::Signalled(9), &t, 10),
        Verdict::Refused(_)
    ));
    assert!(matches!(
        classify(Ended::Signalled(11), &t, 10),
        Verdict::Refused(_)
    ));
    for stop in [1, 2, 15] {
        assert!(
            matches!(classify(Ended::Signalled(stop), &[], 10), Verdict::Later(_)),
            "signal {stop} is a stop, never a refusal"
        );
    }
    assert!(matches!(
        classify(Ended::Stopped, &[], 10),
        Verdict::Later(_)
    ));
    match classify(Ended::TimedOut, &t, 1500) {
        Verdict::Refused(m) => assert!(m.contains("1500 ms"), "{m}"),
        v => panic!("{v:?}"),
    }
    assert_eq!(ended(Some(3), None), Ended::Exited(3));
    assert_eq!(ended(None, Some(15)), Ended::Signalled(15));
}

proptest! {
    #[test]
    fn only_exit_zero_commits_and_only_listed_codes_are_later(
        code in -1i32..300, sig in 1i32..64, listed in proptest::collection::vec(1i32..256, 0..5)
    ) {
        let v = classify(Ended::Exited(code), &listed, 1);
        prop_assert_eq!(v == Verdict::Committed, code == 0);
        prop_assert_eq!(matches!(v, Verdict::Later(_)), code != 0 && listed.contains(&code));
        let stop = [1, 2, 15].contains(&sig);
        prop_assert_eq!(matches!(classify(Ended::Signalled(sig), &listed, 1), Verdict::Later(_)), stop);
        prop_assert_eq!(matches!(classify(Ended::Signalled(sig), &listed, 1), Verdict::Refused(_)), !stop);
    }

    #[test]
    fn output_keeps_a_prefix_within_the_bound_and_counts_everything(
        text in "\\PC{0,200}", cuts in proptest::collection::vec(0usize..200, 0..6), max in 0usize..120
    ) {
        let bytes = text.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        cuts.push(0);
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let mut b = Bounded::new(max);
        for w in cuts.windows(2) {
            b.push(&bytes[w[0]..w[1]]);
        }
        prop_assert_eq!(b.total(), bytes.len() as u64);
        let out = b.finish();
        prop_assert!(out.text.len() <= max);
        prop_assert!(text.starts_with(&out.text));
        prop_assert_eq!(out.truncated, bytes.len() > max);
        if !out.truncated {
            prop_assert_eq!(&out.text, &text);
        } else {
            // Only an incomplete last character is dropped.
            prop_assert!(max - out.text.len() < 4);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_children_commit_retry_refuse_and_time_out() {
    let script = "read -r what; case $what in ok) printf 'out:%s:%s' \"$JETSINK_SEQUENCE\" \"$HOME\";; later) exit 75;; bad) exit 3;; slow) sleep 30 & wait;; esac";
    let mut c = cfg(&["/bin/sh", "-c", script]);
    c.timeout_ms = 1000;
    c.concurrency = 4;
    let mut sink = ExecSink::new(c);
    sink.open().await.unwrap();
    let batch = vec![
        job("ok\n", 1),
        job("later\n", 2),
        job("bad\n", 3),
        job("slow\n", 4),
    ];
    let Written::Each(out) = sink.write(&batch).await else {
        panic!("the exec worker answers per message")
    };
    assert_eq!(out.len(), 4);
    match &out[0] {
        // A clean environment: HOME is not passed.
        Outcome::Committed { output: Some(o) } => assert_eq!(o.text, "out:1:"),
        o => panic!("{o:?}"),
    }
    assert!(matches!(out[1], Outcome::Later { .. }), "{:?}", out[1]);
    assert!(
        matches!(out[2], Outcome::Failed(SinkError::Permanent { .. })),
        "{:?}",
        out[2]
    );
    match &out[3] {
        Outcome::Failed(SinkError::Permanent { message, .. }) => {
            assert!(message.contains("timeout_ms"), "{message}")
        }
        o => panic!("{o:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn large_output_is_cut_and_the_rest_drained() {
    let mut c = cfg(&["/bin/cat"]);
    c.max_output_bytes = 10;
    let mut sink = ExecSink::new(c);
    sink.open().await.unwrap();
    let big = "x".repeat(1 << 20);
    let Written::Each(out) = sink.write(&[job(&big, 1)]).await else {
        panic!("per message")
    };
    match &out[0] {
        Outcome::Committed { output: Some(o) } => {
            assert_eq!(o.text, "xxxxxxxxxx");
            assert!(o.truncated);
        }
        o => panic!("{o:?}"),
    }
}

#[tokio::test]
async fn a_missing_program_is_misconfigured_at_open() {
    let mut sink = ExecSink::new(cfg(&["/nonexistent/jetsink-worker"]));
    assert!(matches!(
        sink.open().await,
        Err(SinkError::Misconfigured { .. })
    ));
    let mut sink = ExecSink::new(cfg(&["/etc"]));
    assert!(matches!(
        sink.open().await,
        Err(SinkError::Misconfigured { .. })
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_traceparent_is_passed_as_the_opentelemetry_variables() {
    let script = "printf '%s|%s|%s' \"${TRACEPARENT-unset}\" \"${TRACESTATE-unset}\" \"${JETSINK_TRACE_ID-unset}\"";
    let mut c = cfg(&["/bin/sh", "-c", script]);
    // A configured TRACESTATE must not be paired with a message's own trace.
    c.env = BTreeMap::from([("TRACESTATE".to_string(), "configured=1".to_string())]);
    let mut sink = ExecSink::new(c);
    sink.open().await.unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = job("", 1);
    traced.headers.push(("traceparent".into(), vec![tp.into()]));
    let mut with_state = job("", 2);
    with_state
        .headers
        .push(("TraceParent".into(), vec![tp.into()]));
    with_state
        .headers
        .push(("tracestate".into(), vec!["vendor=abc".into()]));
    let mut invalid = job("", 3);
    invalid
        .headers
        .push(("traceparent".into(), vec![tp.to_uppercase()]));
    let plain = job("", 4);
    let Written::Each(out) = sink.write(&[traced, with_state, invalid, plain]).await else {
        panic!("the exec worker answers per message")
    };
    let texts: Vec<String> = out
        .iter()
        .map(|o| match o {
            Outcome::Committed { output: Some(o) } => o.text.clone(),
            o => panic!("{o:?}"),
        })
        .collect();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    assert_eq!(
        texts,
        [
            format!("{tp}|unset|{trace_id}"),
            format!("{tp}|vendor=abc|{trace_id}"),
            "unset|configured=1|unset".to_string(),
            "unset|configured=1|unset".to_string(),
        ]
    );
}
