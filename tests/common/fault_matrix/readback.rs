//! Reads back what each destination of the fault matrix holds, as raw copies: every row of
//! every table, file and object, every line of every JSON Lines file, every message of the
//! republish target stream, every record the HTTP receiver accepted, every run of the exec
//! script — repeats kept, so a message written twice counts twice. Parquet is read by
//! pyarrow, not by jetsink's own reader.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::databases::pg_sequences;
use super::sinks::Dest;
use super::world::World;
use super::{STREAM, TARGET};
use crate::common::{header_value, read_ordered, stored, test_python};
use jetsink::sinks::s3::config::Compression;
use jetsink::sinks::s3::encode::decode;

/// What a destination holds: the stream sequence of each raw copy, where each copy is
/// when the destination can say (its file or object and delivery count: which write made
/// a second copy), and anything that is not a well-formed copy of a message of the source
/// stream.
#[derive(Debug, Default)]
pub struct Copies {
    pub seqs: Vec<u64>,
    /// Beside `seqs`, or empty.
    pub origins: Vec<String>,
    pub problems: Vec<String>,
}

impl Copies {
    fn push(&mut self, seq: u64, origin: String) {
        self.seqs.push(seq);
        self.origins.push(origin);
    }
}

impl World {
    /// Every raw copy `d` holds, read by readers independent of jetsink.
    pub async fn copies(&self, d: Dest) -> Copies {
        let plain = |seqs: Vec<u64>| Copies {
            seqs,
            ..Copies::default()
        };
        match d {
            Dest::ParquetFile => pyarrow(&self.path("data/parquet")),
            Dest::S3Parquet => {
                let local = self.path("s3-parquet-download");
                let _ = std::fs::remove_dir_all(&local);
                for (key, body) in self.objects("fm-parquet").await {
                    let path = local.join(&key);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(&path, &body).unwrap();
                }
                pyarrow(&local)
            }
            Dest::Sqlite => plain(sqlite_sequences(&self.path("data/sqlite/fm.db"))),
            Dest::Jsonl => jsonl(&self.path("data/jsonl")),
            Dest::S3Jsonl => {
                let mut out = Copies::default();
                for (key, body) in self.objects("fm-jsonl").await {
                    let Some(c) = Compression::of_name(&key) else {
                        out.problems
                            .push(format!("object {key}: not a jetsink name"));
                        continue;
                    };
                    let text = decode(c, &body).unwrap_or_default();
                    jsonl_records(&text, &key, &mut out);
                }
                out
            }
            Dest::Postgres => plain(pg_sequences(self.pg.as_ref().unwrap()).await),
            Dest::Mysql => plain(self.my.as_ref().unwrap().sequences().await),
            Dest::Nats => self.republished().await,
            Dest::Http => {
                let r = self.receiver.as_ref().unwrap();
                Copies {
                    seqs: r.accepted(),
                    problems: r.problems(),
                    ..Copies::default()
                }
            }
            Dest::Exec => exec_runs(&self.path("exec/runs")),
        }
    }

    /// Every object of `bucket`: (key, body), read from moto directly.
    async fn objects(&self, bucket: &str) -> Vec<(String, bytes::Bytes)> {
        let store: Arc<dyn ObjectStore> = self.moto.as_ref().unwrap().store(bucket);
        let metas: Vec<_> = store.list(None).collect().await;
        let mut out = Vec::new();
        for meta in metas {
            let meta = meta.expect("list the bucket on moto");
            let got = store
                .get(&meta.location)
                .await
                .expect("get an object from moto");
            let body = got.bytes().await.expect("read an object from moto");
            out.push((meta.location.to_string(), body));
        }
        out
    }

    /// The source sequence of every copy in the target stream.
    async fn republished(&self) -> Copies {
        let mut out = Copies::default();
        let Some(js) = self.target_js().await else {
            return out;
        };
        let count = stored(&js, TARGET).await as usize;
        for m in read_ordered(&js, TARGET, count).await {
            let h = |name: &str| header_value(&m, name);
            match (h("Jetsink-Source-Stream"), h("Jetsink-Source-Sequence")) {
                (Some(s), Some(seq)) if s == STREAM => match seq.parse() {
                    Ok(seq) => out.push(
                        seq,
                        format!(
                            "target sequence {}",
                            m.info().map(|i| i.stream_sequence).unwrap_or(0)
                        ),
                    ),
                    Err(_) => out.problems.push(format!("copy with sequence {seq:?}")),
                },
                other => out.problems.push(format!("copy with source {other:?}")),
            }
        }
        out
    }
}

fn sqlite_sequences(db: &Path) -> Vec<u64> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
    let Ok(mut stmt) = conn.prepare("SELECT stream_sequence FROM events") else {
        return Vec::new();
    };
    stmt.query_map([], |r| r.get::<_, i64>(0))
        .map(|rows| rows.flatten().map(|s| s as u64).collect())
        .unwrap_or_default()
}

/// The records of every `.jsonl` file in `dir`.
fn jsonl(dir: &Path) -> Copies {
    let mut out = Copies::default();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    for f in files {
        let text = std::fs::read(&f).unwrap_or_default();
        jsonl_records(&text, &f.display().to_string(), &mut out);
    }
    out
}

/// The records of one JSON Lines text: each line must be a record of the source stream.
fn jsonl_records(text: &[u8], name: &str, out: &mut Copies) {
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let record: serde_json::Value = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(_) => {
                out.problems
                    .push(format!("{name}: a line that is not JSON"));
                continue;
            }
        };
        match record["stream_sequence"].as_u64() {
            Some(seq) if record["idempotency_key"] == format!("{STREAM}:{seq}").as_str() => {
                out.push(seq, format!("{name} delivered {}", record["delivered"]))
            }
            _ => out.problems.push(format!("{name}: record {record}")),
        }
    }
}

/// The rows of every Parquet file under `dir`, read by pyarrow.
fn pyarrow(dir: &Path) -> Copies {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parquet_sequences.py");
    let out = std::process::Command::new(test_python())
        .arg(script)
        .arg(dir)
        .output()
        .expect("run python (pip install pyarrow into .ci/venv: see .ci/run)");
    assert!(
        out.status.success(),
        "parquet_sequences.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let mut copies = Copies::default();
    let origins = read["origins"].as_array().unwrap();
    for (s, origin) in read["sequences"].as_array().unwrap().iter().zip(origins) {
        match s.as_u64() {
            Some(seq) => copies.push(seq, origin.as_str().unwrap_or("").to_string()),
            None => copies.problems.push(format!("a row with sequence {s}")),
        }
    }
    copies
}

/// The exec script's record of its runs: `<key> <delivery>` per line.
fn exec_runs(path: &Path) -> Copies {
    let mut out = Copies::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let (key, delivered) = line.split_once(' ').unwrap_or((line, "?"));
        match key.strip_prefix(&format!("{STREAM}:")).map(str::parse) {
            Some(Ok(seq)) => out.push(seq, format!("a run, delivery {delivered}")),
            _ => out.problems.push(format!("run {line:?}")),
        }
    }
    out
}
