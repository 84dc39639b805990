//! After a pipeline pass: did the destination receive exactly the messages of the stream,
//! and did the consumer end with nothing pending? A benchmark that lost or left a message
//! fails instead of reporting a rate.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;

use super::error::BenchError;
use crate::config::{DestinationConfig, SinkSpec};

/// The verdict on a destination whose column mapping leaves its keys uncountable.
const NOT_COUNTED_MAPPING: &str = "consumer 0 pending / 0 ack-pending (the destination was not \
     counted: its column mapping stores no idempotency_key or no stream)";

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
        Some(DestinationConfig::File(c)) if c.format == crate::sinks::parquet::Format::Parquet => {
            let dir = Path::new(&c.directory);
            match crate::sinks::file::columnar::stored_keys(dir, &c.prefix, stream)
                .map_err(BenchError::Destination)?
            {
                Some(n) => n,
                None => return Ok(NOT_COUNTED_MAPPING.into()),
            }
        }
        Some(DestinationConfig::File(c)) => file_keys(Path::new(&c.directory), stream)?,
        Some(other) => match database_keys(other, stream).await? {
            Some(n) => n,
            None => {
                let why = match other {
                    DestinationConfig::Postgres(_) | DestinationConfig::Mysql(_) => {
                        "its column mapping stores no idempotency_key or no stream"
                    }
                    _ => "jetsink does not read this destination back",
                };
                return Ok(format!(
                    "consumer 0 pending / 0 ack-pending (the {} destination was not counted: \
                     {why})",
                    other.kind()
                ));
            }
        },
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

/// Counts through the destination's own connection code (TLS, passwords, the table it
/// writes), so the check reads exactly where the pass wrote.
async fn database_keys(
    destination: &DestinationConfig,
    stream: &str,
) -> Result<Option<u64>, BenchError> {
    let mut sink = crate::sinks::build(destination);
    let fail = |e: crate::sinks::SinkError| {
        BenchError::Destination(format!(
            "counting the keys of stream {stream} in the {} destination: {e}",
            destination.kind()
        ))
    };
    sink.open().await.map_err(fail)?;
    sink.stored_keys(stream).await.map_err(fail)
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

/// Counts distinct keys of `stream` line by line, remembering stream sequences in a
/// bitset: a 1,000,000-message check must not inflate the peak RSS of the next run.
fn file_keys(dir: &Path, stream: &str) -> Result<u64, BenchError> {
    use std::io::BufRead;
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        stream: &'a str,
        stream_sequence: u64,
    }
    let fail =
        |e: std::io::Error| BenchError::Destination(format!("reading {}: {e}", dir.display()));
    let mut seen: Vec<u64> = Vec::new();
    let mut count = 0u64;
    let mut line = String::new();
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let mut reader = std::io::BufReader::new(std::fs::File::open(&path).map_err(fail)?);
        loop {
            line.clear();
            if reader.read_line(&mut line).map_err(fail)? == 0 {
                break;
            }
            let Ok(l) = serde_json::from_str::<Line<'_>>(&line) else {
                continue;
            };
            if l.stream != stream {
                continue;
            }
            let (word, bit) = ((l.stream_sequence / 64) as usize, l.stream_sequence % 64);
            if seen.len() <= word {
                seen.resize(word + 1, 0);
            }
            if seen[word] & (1 << bit) == 0 {
                seen[word] |= 1 << bit;
                count += 1;
            }
        }
    }
    Ok(count)
}
