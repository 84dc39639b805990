//! Everything one fault matrix test runs against, started for the destinations it covers:
//! the source nats-server behind a proxy that can hold ACKs, a second nats-server holding
//! the republish target stream, moto behind a proxy that can take it away, a PostgreSQL
//! and a MySQL database of its own, the HTTP receiver, the exec script, and the one
//! multi-sink config of jetsink with every destination a sink of its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use serde_json::{json, Value};

use super::databases::MyDatabase;
use super::proxy::Proxy;
use super::receiver::{self, Receiver};
use super::sinks::{Dest, Mode};
use super::{DLQ, STREAM, TARGET};
use crate::common::moto::{key_files, Moto};
use crate::common::pg::PgDatabase;
use crate::common::*;

/// The exec sink's script: exit 75 (try later) while the flag file `outage` exists, else
/// record the run (`<idempotency key> <delivery>`) in `runs`. It leaves its stdin unread.
const EXEC_SCRIPT: &str = r#"if [ -e "$FM_DIR/outage" ]; then
  echo "$JETSINK_IDEMPOTENCY_KEY" >> "$FM_DIR/tempfail"
  exit 75
fi
echo "$JETSINK_IDEMPOTENCY_KEY $JETSINK_DELIVERED" >> "$FM_DIR/runs"
"#;

/// One test's servers, directory and config.
pub struct World {
    pub dests: Vec<Dest>,
    pub mode: Mode,
    /// Messages the test publishes.
    pub n: u64,
    pub server: NatsServer,
    /// In front of `server`: jetsink connects here.
    pub nats_proxy: Proxy,
    /// The test's own connection to `server`, not through the proxy.
    pub js: jetstream::Context,
    pub target: Option<NatsServer>,
    pub moto: Option<Moto>,
    /// In front of `moto`: jetsink's S3 endpoint.
    pub s3_proxy: Option<Proxy>,
    pub pg: Option<PgDatabase>,
    pub my: Option<MyDatabase>,
    pub receiver: Option<Arc<Receiver>>,
    receiver_url: String,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    /// The daemon's `/metrics` address.
    pub listen: String,
}

/// Messages per test: `JETSINK_FAULT_MATRIX_MESSAGES` (the soak's), else 2,000.
pub fn messages() -> u64 {
    std::env::var("JETSINK_FAULT_MATRIX_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

impl World {
    pub async fn new(dests: Vec<Dest>, mode: Mode) -> World {
        let server = NatsServer::start();
        let nats_proxy = Proxy::nats(server.port).await;
        let js = server.js().await;
        create_stream(&js, STREAM, "fm.>").await;
        create_stream(&js, DLQ, "fmdlq.>").await;
        let has = |d: Dest| dests.contains(&d);
        let target = if has(Dest::Nats) {
            let t = NatsServer::start();
            create_target_stream(&t.js().await, TARGET, "copy.>", |_| {}).await;
            Some(t)
        } else {
            None
        };
        let (moto, s3_proxy) = if dests.iter().any(|d| d.is_s3()) {
            let moto = Moto::start();
            moto.create_bucket("fm-jsonl");
            moto.create_bucket("fm-parquet");
            let proxy = Proxy::tcp(moto.port()).await;
            (Some(moto), Some(proxy))
        } else {
            (None, None)
        };
        let pg = match has(Dest::Postgres) {
            true => Some(PgDatabase::create("fm").await),
            false => None,
        };
        let my = match has(Dest::Mysql) {
            true => Some(MyDatabase::create("fm").await),
            false => None,
        };
        let (receiver, receiver_url) = match has(Dest::Http) {
            true => {
                let (r, url) = receiver::start().await;
                (Some(r), url)
            }
            false => (None, String::new()),
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("exec")).unwrap();
        std::fs::write(dir.path().join("exec/run.sh"), EXEC_SCRIPT).unwrap();
        let mut world = World {
            dests,
            mode,
            n: messages(),
            server,
            nats_proxy,
            js,
            target,
            moto,
            s3_proxy,
            pg,
            my,
            receiver,
            receiver_url,
            config: dir.path().join("jetsink.json"),
            dir,
            listen: format!("127.0.0.1:{}", free_port()),
        };
        world.write_config();
        world
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write_config(&mut self) {
        let mut sinks = serde_json::Map::new();
        for d in &self.dests {
            sinks.insert(d.sink().into(), self.mode.sink(*d, self.destination(*d)));
        }
        let cfg = json!({
            "nats": {"servers": [self.nats_proxy.url("nats")], "connect_timeout_ms": 2000,
                     "reconnect_delay_max_ms": 500},
            "http": {"listen": self.listen},
            "logging": {"level": "info"},
            "sinks": sinks,
        });
        std::fs::write(&self.config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    }

    fn destination(&self, d: Dest) -> Value {
        let at = |rel: &str| self.path(rel).to_string_lossy().into_owned();
        match d {
            Dest::Sqlite => json!({"type": "sqlite", "path": at("data/sqlite/fm.db"),
                                   "table": "events"}),
            Dest::Jsonl => json!({"type": "file", "directory": at("data/jsonl")}),
            Dest::ParquetFile => json!({"type": "file", "directory": at("data/parquet"),
                                        "format": "parquet"}),
            Dest::S3Jsonl => self.s3("fm-jsonl", json!({})),
            Dest::S3Parquet => self.s3("fm-parquet", json!({"format": "parquet"})),
            Dest::Postgres => json!({"type": "postgres", "host": "127.0.0.1", "port": 5432,
                                     "user": "postgres", "table": "events",
                                     "database": self.pg.as_ref().map(|p| p.name.clone())}),
            Dest::Mysql => json!({"type": "mysql", "host": "127.0.0.1", "port": 3306,
                                  "user": "root", "table": "events",
                                  "database": self.my.as_ref().map(|m| m.name.clone())}),
            Dest::Nats => json!({"type": "nats", "stream": TARGET, "subject": "copy.{subject}",
                                 "servers": [self.target.as_ref().map(|t| t.url())],
                                 "request_timeout_ms": 1000, "reconnect_delay_max_ms": 500}),
            Dest::Http => json!({"type": "http", "url": self.receiver_url,
                                 "allow_insecure_http": true, "mode": "batch",
                                 "connect_timeout_ms": 500, "request_timeout_ms": 2000}),
            Dest::Exec => json!({"type": "exec", "command": ["/bin/sh", at("exec/run.sh")],
                                 "concurrency": 16, "env": {"FM_DIR": at("exec")}}),
        }
    }

    fn s3(&self, bucket: &str, extra: Value) -> Value {
        let (id, secret) = key_files(self.dir.path());
        let endpoint = self.s3_proxy.as_ref().map(|p| p.url("http"));
        let mut d = json!({"type": "s3", "bucket": bucket, "prefix": "archive",
                           "endpoint": endpoint, "allow_http": true,
                           "access_key_id_file": id, "secret_access_key_file": secret,
                           "connect_timeout_ms": 500, "request_timeout_ms": 5000});
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        d
    }

    /// Starts jetsink on the config.
    pub fn start(&self) -> Daemon {
        Daemon::start(&self.config, self.dir.path())
    }

    /// The sum over every label set of each sink's series `name` on the daemon's
    /// `/metrics` (0 while it does not answer).
    pub async fn sink_metric(&self, name: &str) -> BTreeMap<Dest, f64> {
        let url = format!("http://{}/metrics", self.listen);
        let text = http(reqwest::Method::GET, &url)
            .await
            .map(|(_, t)| t)
            .unwrap_or_default();
        let mut out = BTreeMap::new();
        for d in &self.dests {
            let label = format!("sink=\"{}\"", d.sink());
            let n = text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            out.insert(*d, n);
        }
        out
    }

    /// The target stream's context (the republish sink's server).
    pub async fn target_js(&self) -> Option<jetstream::Context> {
        match &self.target {
            Some(t) => Some(t.js().await),
            None => None,
        }
    }

    /// `jetsink replay` of `dest`'s sink over `from..=to`: (exit code, output).
    pub async fn replay(&self, dest: Dest, from: u64, to: u64) -> (i32, String) {
        let args: Vec<String> = [
            "replay",
            "--config",
            &self.config.to_string_lossy(),
            "--sink",
            dest.sink(),
            "--from-seq",
            &from.to_string(),
            "--to-seq",
            &to.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let dir = self.dir.path().join(format!("replay-{}", dest.sink()));
        std::fs::create_dir_all(&dir).unwrap();
        // Each in a directory of its own: `jetsink_within` keeps its output files there.
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, out, err) = jetsink_within(&refs, &dir, Duration::from_secs(120))
                .unwrap_or((-1, String::new(), "replay did not end within 120 s".into()));
            (code, format!("{out}{err}"))
        })
        .await
        .unwrap()
    }
}
