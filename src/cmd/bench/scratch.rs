//! Where `jetsink bench --config --sink` writes, so a measurement never touches what the
//! configured sink writes to nor sets off what its destination does: a database into a
//! scratch table beside the configured one (dropped after), files and SQLite into a
//! temporary directory the bench creates for the pass (mode 0700, removed after), S3 into
//! a scratch prefix of the bucket. A destination whose writes act on the world — an
//! `exec` command, an HTTP endpoint, a NATS stream others read — and a job-queue sink
//! (its results go to clients waiting for them) are refused with the reason and what to
//! measure instead: there is no scratch copy of a side effect. Pure but for creating the
//! directory.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::error::BenchError;
use crate::config::{DestinationConfig, SinkSpec};

/// Why `spec` cannot be measured without side effects, and what to measure instead;
/// `None` when it can.
pub fn refusal(spec: &SinkSpec) -> Option<String> {
    let why = if spec.results.is_some() {
        "is in job-queue mode (`results`): bench would run each message as a job and \
         publish its result to the results stream clients wait on; measure a copy of the \
         sink without `results` in a config of its own, or the pipeline alone with \
         `jetsink bench --destination none`"
    } else {
        match &spec.destination {
            DestinationConfig::Exec(_) => {
                "writes to an exec destination: bench would run its command once per \
                 message, with the bench's made-up payloads; time the command itself, or \
                 measure the pipeline alone with `jetsink bench --destination none`"
            }
            DestinationConfig::Http(_) => {
                "writes to an http destination: bench would send its made-up messages to \
                 the configured endpoint, and bench measures only what it can write without \
                 side effects; run a copy of the sink against a test endpoint with `jetsink \
                 run` and read jetsink_sink_write_seconds, or measure the pipeline alone with \
                 `jetsink bench --destination none`"
            }
            DestinationConfig::Nats(_) => {
                "writes to a nats destination: bench would publish its made-up messages \
                 into a stream others read, and bench measures only what it can write \
                 without side effects; run a copy of the sink against a scratch stream with \
                 `jetsink run` and read jetsink_sink_write_seconds, or measure the pipeline \
                 alone with `jetsink bench --destination none`"
            }
            _ => return None,
        }
    };
    Some(format!("sink {} {why}", spec.name))
}

/// What a pass made only for itself, to remove after it.
#[derive(Debug)]
pub enum Place {
    /// Written where the config says: nothing to remove.
    Nothing,
    /// A temporary directory the bench created.
    Directory(PathBuf),
    /// A scratch table, dropped through the destination writing it.
    Table(Box<DestinationConfig>),
    /// A scratch prefix of a bucket (`bucket`, `prefix`), left for the operator: the
    /// bench does not delete objects.
    Prefix(String, String),
}

/// Creates the temporary directory of pass `tag` of run `run` on `stream`: new, mode 0700,
/// never an existing directory or a link someone put at the name.
pub fn own_directory(stream: &str, run: usize, tag: &str) -> Result<PathBuf, BenchError> {
    let dir = std::env::temp_dir().join(format!("jetsink-bench-{stream}-{run}-{tag}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| BenchError::Destination(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The last component of `path`, or `fallback` when it has none.
fn name_of(path: &str, fallback: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| fallback.to_string())
}

/// The configured sink's destination moved to scratch for pass `tag` of run `run` on
/// `stream` (its table named `table`), and what to remove after. A destination without a
/// scratch place is refused ([`refusal`]) before any pass runs, so it errors here too.
pub fn place(
    spec: &SinkSpec,
    stream: &str,
    run: usize,
    tag: &str,
    table: &str,
) -> Result<(DestinationConfig, Place), BenchError> {
    if let Some(why) = refusal(spec) {
        return Err(BenchError::Refused(why));
    }
    Ok(match &spec.destination {
        DestinationConfig::File(c) => {
            let dir = own_directory(stream, run, tag)?;
            let mut c = c.clone();
            c.directory = dir
                .join(name_of(&c.directory, "files"))
                .to_string_lossy()
                .into_owned();
            (DestinationConfig::File(c), Place::Directory(dir))
        }
        DestinationConfig::Sqlite(c) => {
            let dir = own_directory(stream, run, tag)?;
            let mut c = c.clone();
            c.path = dir
                .join(name_of(&c.path, "bench.db"))
                .to_string_lossy()
                .into_owned();
            (DestinationConfig::Sqlite(c), Place::Directory(dir))
        }
        DestinationConfig::S3(c) => {
            let mut c = c.clone();
            let scratch = format!("jetsink-bench/{}-{tag}", stream.to_lowercase());
            c.prefix = if c.prefix.is_empty() {
                scratch
            } else {
                format!("{}/{scratch}", c.prefix)
            };
            let left = Place::Prefix(c.bucket.clone(), c.prefix.clone());
            (DestinationConfig::S3(c), left)
        }
        other => match other.with_scratch_table(table) {
            Some(d) => (d.clone(), Place::Table(Box::new(d))),
            None => (other.clone(), Place::Nothing),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(destination: serde_json::Value, results: bool) -> SinkSpec {
        let mut sink = serde_json::json!({
            "source": {"stream": "S", "consumer": "c"},
            "destination": destination
        });
        if results {
            sink["results"] = serde_json::json!({"stream": "R", "subject_prefix": "r"});
            sink["source"]["subjects"] = serde_json::json!(["jobs.x"]);
        }
        let cfg = serde_json::json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"a": sink}
        });
        let mut c = crate::config::Config::from_json_str(&cfg.to_string()).expect("valid");
        c.sinks.remove(0)
    }

    #[test]
    fn sinks_with_side_effects_are_refused_saying_why_and_what_instead() {
        let exec = spec(
            serde_json::json!({"type": "exec", "command": ["/bin/true"]}),
            false,
        );
        let why = refusal(&exec).expect("refused");
        assert!(
            why.starts_with("sink a writes to an exec destination"),
            "{why}"
        );
        assert!(why.contains("--destination none"), "{why}");
        assert!(matches!(
            place(&exec, "JETSINK_BENCH_1_2_R1", 1, "pipeline", "t"),
            Err(BenchError::Refused(_))
        ));
        let http = spec(
            serde_json::json!({"type": "http", "url": "http://127.0.0.1:9/x", "allow_insecure_http": true}),
            false,
        );
        assert!(refusal(&http)
            .expect("refused")
            .contains("test endpoint with `jetsink run`"));
        let nats = spec(
            serde_json::json!({"type": "nats", "servers": ["nats://127.0.0.1:4222"], "stream": "OUT", "subject": "out.x"}),
            false,
        );
        assert!(refusal(&nats)
            .expect("refused")
            .contains("scratch stream with `jetsink run`"));
        let file = spec(
            serde_json::json!({"type": "file", "directory": "out"}),
            false,
        );
        assert_eq!(refusal(&file), None);
    }

    #[test]
    fn files_and_sqlite_go_to_a_directory_of_their_own_and_s3_to_a_scratch_prefix() {
        let stream = format!("JETSINK_BENCH_{}_7_R1", std::process::id());
        let file = spec(
            serde_json::json!({"type": "file", "directory": "out/ev"}),
            false,
        );
        let (d, left) = place(&file, &stream, 1, "pipeline", "t").unwrap();
        let Place::Directory(dir) = left else {
            panic!("no directory: {left:?}")
        };
        assert!(d
            .target()
            .contains(&dir.join("ev").to_string_lossy().into_owned()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // The name is taken now: a second pass never reuses (or follows) it.
        assert!(own_directory(&stream, 1, "pipeline").is_err());
        std::fs::remove_dir(&dir).unwrap();

        let sqlite = spec(
            serde_json::json!({"type": "sqlite", "path": "data/x.db"}),
            false,
        );
        let (d, left) = place(&sqlite, &stream, 2, "pipeline", "t").unwrap();
        let Place::Directory(dir) = left else {
            panic!("no directory: {left:?}")
        };
        assert!(d
            .target()
            .contains(&dir.join("x.db").to_string_lossy().into_owned()));
        std::fs::remove_dir(&dir).unwrap();

        let s3 = spec(
            serde_json::json!({"type": "s3", "bucket": "bench-b", "prefix": "archive/orders"}),
            false,
        );
        let (_, left) = place(&s3, "JETSINK_BENCH_1_2_R1", 1, "pipeline", "t").unwrap();
        match left {
            Place::Prefix(bucket, prefix) => {
                assert_eq!(bucket, "bench-b");
                assert_eq!(
                    prefix,
                    "archive/orders/jetsink-bench/jetsink_bench_1_2_r1-pipeline"
                );
            }
            other => panic!("no prefix: {other:?}"),
        }
    }
}
