//! The `s3` destination against a real S3-compatible server (moto, started by each test on
//! a free loopback port): objects listed and read back hold every message exactly once,
//! one record each, across a SIGKILL mid-drain; gzip objects round trip; a batch larger
//! than one part is uploaded in parts; a store that is down holds the batch without ACKing
//! and drains when it is back; a bucket that disappears holds the batch as misconfigured,
//! naming the sink and the bucket; bad credentials stop start-up with exit 78; an
//! encrypted sink's records decrypt. With `rollover`, objects hold several batches, each
//! message once; a partial buffer is written by its age; a SIGKILL with a buffer held loses
//! nothing after a restart; a SIGTERM hands the buffer back and the next start writes it.
//!
//! moto (tests/common/moto.rs): `JETSINK_TEST_MOTO_SERVER`, else `.ci/venv/bin/moto_server`
//! or `.ci/venv-s3/bin/moto_server` in the repository, else `moto_server` on PATH.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::moto::{destination, Moto};
use common::*;
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};

use jetsink::sinks::s3::config::Compression;
use jetsink::sinks::s3::encode::decode;

/// Every object under the bucket: (key, e-tag, records).
async fn objects(store: &Arc<dyn ObjectStore>) -> Vec<(String, String, Vec<Value>)> {
    let metas: Vec<_> = store.list(None).collect().await;
    let mut out = Vec::new();
    for meta in metas {
        let meta = meta.expect("list");
        let key = meta.location.to_string();
        let compression = Compression::of_name(&key).expect("a jetsink object name");
        let body = store
            .get(&meta.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        let text = decode(compression, &body).expect("decode");
        let records = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("a JSON record per line"))
            .collect();
        out.push((key, meta.e_tag.unwrap_or_default(), records));
    }
    out
}

async fn distinct_stored(store: &Arc<dyn ObjectStore>) -> (HashSet<String>, usize) {
    let all = objects(store).await;
    let records: Vec<Value> = all.into_iter().flat_map(|(_, _, r)| r).collect();
    (distinct_keys(&records), records.len())
}

/// The consumer exists and has nothing pending or unacknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn every_message_is_stored_once_by_key_across_a_sigkill_in_gzip_objects_read_back() {
    const N: usize = 20_000;
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("kill-test");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "S3KILL", "s3kill.>").await;
    let cfg = config(
        &server,
        "S3KILL",
        "s3kill.>",
        destination(
            &moto,
            dir.path(),
            "kill-test",
            json!({"compression": "gzip"}),
        ),
        json!({"batch_size": 250}),
    );
    let path = write_config(dir.path(), &cfg);
    publish_n(&js, "s3kill.x", N).await;
    let store = moto.store("kill-test");

    let mut daemon = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(60),
        "some objects are stored",
        || async { store.list(None).next().await.is_some() },
    )
    .await;
    daemon.kill();
    let (pending, _) = consumer_state(&js, "S3KILL", "jetsink").await;
    assert!(
        pending > 0,
        "the SIGKILL came after the drain: nothing tested"
    );

    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(120), "the stream is drained", || {
        drained(&js, "S3KILL")
    })
    .await;
    daemon.stop_cleanly();

    let all = objects(&store).await;
    let mut keys = HashSet::new();
    let mut records = 0;
    for (key, _, recs) in &all {
        assert!(
            key.starts_with("archive/S3KILL/") && key.ends_with(".jsonl.gz"),
            "{key}"
        );
        // The name is the range it holds.
        let name = key.rsplit('/').next().unwrap();
        let range: Vec<u64> = name
            .trim_end_matches(".jsonl.gz")
            .split('-')
            .take(2)
            .map(|n| n.parse().unwrap())
            .collect();
        let seqs: Vec<u64> = recs
            .iter()
            .map(|r| r["stream_sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs.first(), Some(&range[0]), "{key}");
        assert_eq!(seqs.last(), Some(&range[1]), "{key}");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key} in stream order"
        );
        for r in recs {
            assert_eq!(r["stream"], "S3KILL");
            assert_eq!(r["payload_encoding"], "json");
            keys.insert(r["idempotency_key"].as_str().unwrap().to_string());
            records += 1;
        }
    }
    assert_eq!(
        keys.len(),
        N,
        "every message, once by key, across {} objects",
        all.len()
    );
    assert_eq!(
        records, N,
        "one record per message: the ones delivered again after the SIGKILL were found in their objects"
    );
    println!(
        "{} objects, {records} records, {} distinct keys",
        all.len(),
        keys.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_larger_than_one_part_is_uploaded_in_parts_and_reads_back_whole() {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("parts-test");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "S3PARTS", "s3parts.>").await;
    // 1,000 messages of ~7 KB: one batch of ~7 MB, over the 5 MiB part size.
    let cfg = config(
        &server,
        "S3PARTS",
        "s3parts.>",
        destination(
            &moto,
            dir.path(),
            "parts-test",
            json!({"multipart_part_bytes": 5 * 1024 * 1024}),
        ),
        json!({"batch_size": 1000, "max_batch_bytes": 16 * 1024 * 1024}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    for i in 0..1000 {
        let mut s = String::with_capacity(7000);
        while s.len() < 7000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            s.push_str(&format!("{seed:016x}"));
        }
        js.publish(
            "s3parts.x",
            format!("{{\"i\":{i},\"blob\":\"{s}\"}}").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "the stream is drained", || {
        drained(&js, "S3PARTS")
    })
    .await;
    daemon.stop_cleanly();
    let store = moto.store("parts-test");
    let all = objects(&store).await;
    let multipart: Vec<_> = all.iter().filter(|(_, tag, _)| tag.contains('-')).collect();
    assert!(
        !multipart.is_empty(),
        "a multipart object has an e-tag `<md5>-<parts>`: {:?}",
        all.iter()
            .map(|(k, t, r)| (k, t, r.len()))
            .collect::<Vec<_>>()
    );
    let (keys, _) = distinct_stored(&store).await;
    assert_eq!(keys.len(), 1000);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_is_down_holds_the_batch_without_acking_and_drains_when_back() {
    let server = NatsServer::start();
    let mut moto = Moto::start();
    moto.create_bucket("down-test");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "S3DOWN", "s3down.>").await;
    let mut cfg = config(
        &server,
        "S3DOWN",
        "s3down.>",
        destination(&moto, dir.path(), "down-test", json!({})),
        json!({"batch_size": 20, "retry": {"initial_backoff_ms": 200, "max_backoff_ms": 1000}}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    publish_n(&js, "s3down.x", 40).await;
    eventually(
        Duration::from_secs(30),
        "the first messages are ACKed",
        || drained(&js, "S3DOWN"),
    )
    .await;

    moto.kill();
    publish_n(&js, "s3down.x", 30).await;
    assert_batch_held(&js, &daemon, "S3DOWN", 30).await;
    let transient = "jetsink_sink_errors_total{class=\"transient\",sink=\"main\"}";
    assert!(
        metric_value(&listen, transient).await.unwrap_or(0.0) > 0.0,
        "the outage counts as transient"
    );

    // moto keeps nothing across a restart: an empty store with the bucket again.
    moto.restart();
    moto.create_bucket("down-test");
    eventually(Duration::from_secs(60), "the held messages drain", || {
        drained(&js, "S3DOWN")
    })
    .await;
    daemon.stop_cleanly();
    let (keys, _) = distinct_stored(&moto.store("down-test")).await;
    let expected: HashSet<String> = (41..=70).map(|s| format!("S3DOWN:{s}")).collect();
    assert!(
        expected.is_subset(&keys),
        "missing: {:?}",
        expected.difference(&keys).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bucket_is_held_as_misconfigured_naming_the_sink_and_bucket() {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("gone-bucket");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "S3GONE", "s3gone.>").await;
    let cfg = config(
        &server,
        "S3GONE",
        "s3gone.>",
        destination(&moto, dir.path(), "gone-bucket", json!({})),
        json!({"batch_size": 10, "retry": {"initial_backoff_ms": 200, "max_backoff_ms": 1000}}),
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the sink runs", || async {
        daemon.log_text().contains("sink running")
    })
    .await;
    // The bucket goes away while the sink runs (it is still empty).
    moto.delete_bucket("gone-bucket");
    publish_n(&js, "s3gone.x", 10).await;
    let series = "jetsink_sink_errors_total{class=\"misconfigured\",sink=\"main\"}";
    eventually(
        Duration::from_secs(30),
        "misconfigured errors are counted",
        || async { metric_value(&listen, series).await.unwrap_or(0.0) >= 2.0 },
    )
    .await;
    let log = daemon.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("NoSuchBucket"))
        .unwrap_or_else(|| panic!("no NoSuchBucket line:\n{log}"));
    assert!(
        // The class is in the metric above; the line names the sink, bucket and cause.
        line.contains("sink=main")
            && line.contains("s3://gone-bucket/")
            && line.contains("HTTP 404"),
        "{line}"
    );
    let (pending, ack_pending) = consumer_state(&js, "S3GONE", "jetsink").await;
    assert_eq!(
        pending as usize + ack_pending,
        10,
        "nothing ACKed while the bucket is missing"
    );
    assert!(ack_pending > 0, "the batch is held, not released");

    moto.create_bucket("gone-bucket");
    eventually(
        Duration::from_secs(30),
        "the batch drains once the bucket is back",
        || drained(&js, "S3GONE"),
    )
    .await;
    daemon.stop_cleanly();
    let (keys, _) = distinct_stored(&moto.store("gone-bucket")).await;
    assert_eq!(keys.len(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_credentials_stop_start_up_with_exit_78_naming_the_sink_and_bucket() {
    let server = NatsServer::start();
    // moto checking every request's credentials: it knows no access key.
    let moto = Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &server,
        "S3AUTH",
        "s3auth.>",
        destination(&moto, dir.path(), "auth-bucket", json!({})),
        json!({}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    let status = daemon.wait_exit(Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(78),
        "{}",
        daemon.log_text()
    );
    let log = daemon.log_text();
    assert!(
        log.contains("sink main")
            && log.contains("s3://auth-bucket")
            && log.contains("403 InvalidAccessKeyId")
            && log.contains("misconfigured"),
        "{log}"
    );
    assert!(
        !log.contains("not-a-real-secret"),
        "the secret is never logged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_encrypted_sinks_records_hold_no_plaintext_and_decrypt() {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("enc-bucket");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "S3ENC", "s3enc.>").await;
    let key = dir.path().join("a.key");
    let (code, out, err) = jetsink(&["keygen", "--out", key.to_str().unwrap()], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    let mut cfg = config(
        &server,
        "S3ENC",
        "s3enc.>",
        destination(&moto, dir.path(), "enc-bucket", json!({})),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["encryption"] =
        json!({"active_key": "a", "keys": [{"id": "a", "file": key}]});
    let path = write_config(dir.path(), &cfg);
    for i in 0..10 {
        js.publish(
            "s3enc.x",
            format!("{{\"card\":\"4111-1111-1111-1111\",\"i\":{i}}}").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the stream is drained", || {
        drained(&js, "S3ENC")
    })
    .await;
    daemon.stop_cleanly();

    let all = objects(&moto.store("enc-bucket")).await;
    let mut lines = String::new();
    for (_, _, records) in &all {
        for r in records {
            assert_eq!(r["payload_encoding"], "aes256gcm-v1", "{r}");
            lines.push_str(&r.to_string());
            lines.push('\n');
        }
    }
    assert!(!lines.contains("4111-1111"), "no plaintext in the objects");
    let input = dir.path().join("records.jsonl");
    std::fs::write(&input, &lines).unwrap();
    let (code, out, err) = jetsink(
        &[
            "decrypt",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "main",
            input.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{err}");
    let clear: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(clear.len(), 10);
    for r in &clear {
        assert_eq!(r["payload"]["card"], "4111-1111-1111-1111", "{r}");
    }
}

/// One rollover test's world: a private server, moto with one bucket, the stream
/// `<STREAM>` on `<stream>.>`, and the config of an s3 sink reading it in batches of 100
/// with `rollover` (written, not started).
struct Rollover {
    /// Kept running for the test's length.
    _server: NatsServer,
    moto: Moto,
    dir: tempfile::TempDir,
    js: async_nats::jetstream::Context,
    stream: &'static str,
    bucket: &'static str,
    cfg: Value,
    listen: String,
}

impl Rollover {
    async fn new(stream: &'static str, bucket: &'static str, rollover: Value) -> Rollover {
        let server = NatsServer::start();
        let moto = Moto::start();
        moto.create_bucket(bucket);
        let dir = tempfile::tempdir().unwrap();
        let js = server.js().await;
        let subject = format!("{}.>", stream.to_lowercase());
        create_stream(&js, stream, &subject).await;
        let cfg = config(
            &server,
            stream,
            &subject,
            destination(&moto, dir.path(), bucket, json!({"rollover": rollover})),
            json!({"batch_size": 100}),
        );
        let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
        Rollover {
            _server: server,
            moto,
            dir,
            js,
            stream,
            bucket,
            cfg,
            listen,
        }
    }

    /// Publishes `n` messages to the stream.
    async fn publish(&self, n: usize) {
        publish_n(&self.js, &format!("{}.x", self.stream.to_lowercase()), n).await;
    }

    /// Starts a daemon on the config as it is now.
    fn start(&self) -> Daemon {
        Daemon::start(&write_config(self.dir.path(), &self.cfg), self.dir.path())
    }

    /// The value of one of the sink's rollover metrics (`buffered`, `flushes_total{...}`).
    async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.listen, &format!("jetsink_rollover_{series}"))
            .await
            .unwrap_or(-1.0)
    }

    fn store(&self) -> Arc<dyn ObjectStore> {
        self.moto.store(self.bucket)
    }

    /// The consumer's (num_pending, num_ack_pending), once jetsink has created it.
    async fn consumer_state(&self) -> Option<(u64, usize)> {
        let info = self
            .js
            .get_stream(self.stream)
            .await
            .ok()?
            .consumer_info("jetsink")
            .await
            .ok()?;
        Some((info.num_pending, info.num_ack_pending))
    }

    /// Waits until the stream is drained (within `secs`).
    async fn drained(&self, secs: u64) {
        eventually(Duration::from_secs(secs), "the stream is drained", || {
            drained(&self.js, self.stream)
        })
        .await;
    }

    /// Starts again with a one-second `max_age_ms`, so what is left is written at once,
    /// waits for the drain and stops cleanly.
    async fn restart_and_drain(&mut self) {
        self.cfg["sinks"]["main"]["destination"]["rollover"]["max_age_ms"] = json!(1000);
        let mut daemon = self.start();
        // Running first: with nothing left to drain, the SIGTERM below would otherwise
        // reach a process that has not yet installed its handler.
        daemon
            .wait_for_log(Duration::from_secs(30), "sink running")
            .await;
        self.drained(30).await;
        daemon.stop_cleanly();
    }

    /// The number of records in each stored object.
    async fn object_sizes(&self) -> Vec<usize> {
        objects(&self.store())
            .await
            .iter()
            .map(|(_, _, r)| r.len())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rollover_writes_several_batches_per_object_each_message_once_and_drains() {
    const N: usize = 3_000;
    // An hour's age, so every flush of the first run is a full one however slowly the
    // pulls come (with a one-second age, a loaded machine let the timer flush a part
    // of the buffer first). 3,000 is three buffers of 1,000; whatever a short pull leaves
    // over stays buffered, and the restart below writes it.
    let mut r = Rollover::new(
        "S3ROLL",
        "roll-test",
        json!({"max_messages": 1000, "max_age_ms": 3_600_000}),
    )
    .await;
    r.publish(N).await;
    let mut daemon = r.start();
    let store = r.store();
    // The first run's final state: everything delivered, every object it flushed
    // uploaded and counted, every message either in an uploaded object or buffered, and
    // what is not acknowledged exactly what the buffer holds. Each part is read in every
    // round, so a flush caught midway (its buffer emptied, its object not yet listed or
    // counted) only means another round; a lost or doubled message never gets here.
    eventually(
        Duration::from_secs(120),
        "every message delivered, and either in an uploaded object or buffered",
        || async {
            let Some((pending, ack_pending)) = r.consumer_state().await else {
                return false;
            };
            let flushes = r
                .metric("flushes_total{reason=\"full\",sink=\"main\"}")
                .await
                + r.metric("flushes_total{reason=\"timer\",sink=\"main\"}")
                    .await;
            let sizes = r.object_sizes().await;
            let buffered = r.metric("buffered{sink=\"main\"}").await;
            pending == 0
                && buffered == ack_pending as f64
                && flushes == sizes.len() as f64
                && sizes.iter().sum::<usize>() as f64 + buffered == N as f64
        },
    )
    .await;
    let full = r
        .metric("flushes_total{reason=\"full\",sink=\"main\"}")
        .await;
    let timer = r
        .metric("flushes_total{reason=\"timer\",sink=\"main\"}")
        .await;
    let buffered = r.metric("buffered{sink=\"main\"}").await as usize;
    let sizes = r.object_sizes().await;
    daemon.stop_cleanly();

    assert_eq!(timer, 0.0, "no flush by the timer within the hour");
    assert_eq!(
        full,
        sizes.len() as f64,
        "one object per full flush: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|&n| n > 900 && n <= 1000),
        "a full flush holds more than max_messages - batch_size (900), so each object \
         holds the messages of at least ten pulls, and never more than 1000: {sizes:?}"
    );
    assert_eq!(
        sizes.iter().sum::<usize>() + buffered,
        N,
        "every message is in an object or in the buffer: {sizes:?} + {buffered}"
    );
    assert!(
        full >= 2.0,
        "3000 messages need at least two full buffers: {sizes:?}"
    );
    r.restart_and_drain().await;
    let (keys, records) = distinct_stored(&store).await;
    assert_eq!((keys.len(), records), (N, N), "each message stored once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partial_rollover_buffer_is_written_as_one_object_when_its_age_is_reached() {
    let r = Rollover::new(
        "S3RTIME",
        "roll-timer",
        json!({"max_messages": 1000, "max_age_ms": 1000}),
    )
    .await;
    r.publish(250).await;
    let mut daemon = r.start();
    let store = r.store();
    eventually(Duration::from_secs(20), "an object appears", || async {
        store.list(None).next().await.is_some()
    })
    .await;
    r.drained(10).await;
    let timer = r
        .metric("flushes_total{reason=\"timer\",sink=\"main\"}")
        .await;
    let buffered = r.metric("buffered{sink=\"main\"}").await;
    daemon.stop_cleanly();
    assert_eq!(
        r.object_sizes().await,
        [250],
        "one object of the whole partial buffer"
    );
    assert_eq!((timer, buffered), (1.0, 0.0), "one flush, by the timer");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_while_the_rollover_buffer_holds_messages_loses_none_after_restart() {
    const N: usize = 1_250;
    // A minute's age: the 250 after the first full object wait in the buffer.
    let mut r = Rollover::new(
        "S3RKILL",
        "roll-kill",
        json!({"max_messages": 1000, "max_age_ms": 60_000}),
    )
    .await;
    r.publish(N).await;
    let mut daemon = r.start();
    let store = r.store();
    eventually(
        Duration::from_secs(20),
        "messages held after a full object",
        || async {
            r.metric("buffered{sink=\"main\"}").await > 0.0
                && store.list(None).next().await.is_some()
        },
    )
    .await;
    daemon.kill();
    let (_, stored_before) = distinct_stored(&store).await;
    assert!(
        stored_before < N,
        "the SIGKILL came after everything was stored"
    );
    r.restart_and_drain().await;
    let (keys, records) = distinct_stored(&store).await;
    assert_eq!(keys.len(), N, "every message stored, {records} records");
    assert_eq!(records, N, "each once");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_a_partial_rollover_buffer_back_and_the_next_start_writes_it() {
    let mut r = Rollover::new(
        "S3RTERM",
        "roll-term",
        json!({"max_messages": 1000, "max_age_ms": 60_000}),
    )
    .await;
    // AckWait is a minute too: only the NAK at shutdown lets the next start have the
    // messages before then.
    r.cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(60_000);
    r.publish(250).await;
    let mut daemon = r.start();
    eventually(Duration::from_secs(20), "250 buffered", || async {
        r.metric("buffered{sink=\"main\"}").await == 250.0
    })
    .await;
    daemon.stop_cleanly();
    assert!(
        daemon
            .log_text()
            .contains("handing back the rollover buffer"),
        "{}",
        daemon.log_text()
    );
    let store = r.store();
    assert!(store.list(None).next().await.is_none(), "nothing written");

    r.restart_and_drain().await;
    assert_eq!(r.object_sizes().await, [250], "written once, as one object");
    let (keys, _) = distinct_stored(&store).await;
    assert_eq!(keys.len(), 250);
}

#[test]
fn validate_refuses_a_rollover_the_consumer_cannot_carry_or_beside_the_shuffler() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:1"]},
        "sinks": {"main": {
            "source": {"stream": "S", "subjects": "s.>", "consumer": "c", "max_ack_pending": 1000},
            "delivery": {"batch_size": 100, "shuffle": {"buffer": 100}},
            "destination": {"type": "s3", "bucket": "archive",
                            "rollover": {"max_messages": 1000, "max_age_ms": 500}}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    let text = format!("{out}{err}");
    assert_eq!(code, 78, "{text}");
    for needle in [
        "sinks.main.destination.rollover.max_age_ms: must be between 1000 and 3600000, got 500",
        "sinks.main.destination.rollover: cannot be combined with sinks.main.delivery.shuffle",
        "sinks.main.destination.rollover.max_messages: consumer max_ack_pending is 1000",
        "sinks.main.source.max_ack_pending",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
}
