//! After a pipeline pass: did the destination receive exactly the messages of the stream,
//! and did the consumer end with nothing pending? A benchmark that lost or left a message
//! fails instead of reporting a rate.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;

use super::BenchError;
use crate::config::{DestinationConfig, SinkSpec};

/// Checks the destination and the consumer; returns a one-line description on success.
pub async fn run(
    js: &jetstream::Context,
    stream: &str,
    spec: &SinkSpec,
    destination: Option<&DestinationConfig>,
    expected: u64,
) -> Result<String, BenchError> {
    let mut state = (u64::MAX, usize::MAX);
    // ACKs are asynchronous: give the server a moment to apply the last ones.
    for _ in 0..50 {
        let info = js
            .get_stream(stream)
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?
            .consumer_info(&spec.source.consumer)
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?;
        state = (info.num_pending, info.num_ack_pending);
        if state == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if state != (0, 0) {
        return Err(BenchError::Lost(format!(
            "consumer {} ended with {} pending and {} ack-pending",
            spec.source.consumer, state.0, state.1
        )));
    }
    let keys = match destination {
        None => return Ok("consumer 0 pending / 0 ack-pending (nothing stored)".into()),
        Some(DestinationConfig::Sqlite(c)) => sqlite_keys(Path::new(&c.path), &c.table, stream)?,
        Some(DestinationConfig::File(c)) => file_keys(Path::new(&c.directory), stream)?,
        #[allow(unreachable_patterns)]
        Some(other) => {
            return Ok(format!(
                "consumer 0 pending / 0 ack-pending ({} rows not counted by bench)",
                other.kind()
            ))
        }
    };
    if keys != expected {
        return Err(BenchError::Lost(format!(
            "destination holds {keys} distinct idempotency keys of stream {stream}, expected {expected}"
        )));
    }
    Ok(format!(
        "{keys} distinct keys stored, consumer 0 pending / 0 ack-pending"
    ))
}

fn sqlite_keys(path: &Path, table: &str, stream: &str) -> Result<u64, BenchError> {
    let fail =
        |e: rusqlite::Error| BenchError::Destination(format!("reading {}: {e}", path.display()));
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(fail)?;
    let sql = format!(
        "SELECT COUNT(DISTINCT idempotency_key) FROM \"{}\" WHERE stream = ?1",
        table.replace('"', "\"\"")
    );
    conn.query_row(&sql, [stream], |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(fail)
}

fn file_keys(dir: &Path, stream: &str) -> Result<u64, BenchError> {
    #[derive(serde::Deserialize)]
    struct Line {
        idempotency_key: String,
        stream: String,
    }
    let fail =
        |e: std::io::Error| BenchError::Destination(format!("reading {}: {e}", dir.display()));
    let mut keys = HashSet::new();
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(fail)?;
        for line in text.lines() {
            if let Ok(l) = serde_json::from_str::<Line>(line) {
                if l.stream == stream {
                    keys.insert(l.idempotency_key);
                }
            }
        }
    }
    Ok(keys.len() as u64)
}
