//! Writing one batch into the SQLite table: multi-row `INSERT` statements in one
//! `IMMEDIATE` transaction, the per-batch text buffers that keep a row free of allocations,
//! and, when a statement is refused, finding the row that fails on its own so the runner
//! can isolate it without bisecting.

use rusqlite::{Connection, TransactionBehavior};
use time::OffsetDateTime;

use super::classify::classify;
use super::schema;
use crate::envelope::{rfc3339, write_rfc3339, Envelope, RFC3339_LEN};
use crate::sinks::contract::SinkError;

/// Rows per INSERT statement: one statement per row costs a step and a reset each; a
/// multi-row statement amortizes them (16 parameters a row stays far below SQLite's limit).
/// 16 rows cut the instructions of a 50,000-message drain by 14 % against 1 row.
pub(crate) const ROWS_PER_STATEMENT: usize = 16;

/// Per-batch text buffers, reused so a row costs no allocation.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// INSERT statements by row count and shape (shared columns or not), built once per
    /// table (formatting one per statement cost a fifth of the sink's CPU).
    statements: std::collections::HashMap<(usize, bool), String>,
    /// `published_at` of every row, fixed width.
    times: String,
    /// `headers` JSON of every row, back to back.
    headers: Vec<u8>,
    /// End offset of each row's headers in `headers`.
    header_ends: Vec<usize>,
    /// `labels` JSON of every row, back to back.
    labels: Vec<u8>,
    /// End offset of each row's labels in `labels`.
    label_ends: Vec<usize>,
}

impl Scratch {
    fn fill(&mut self, batch: &[Envelope]) {
        self.times.clear();
        self.headers.clear();
        self.header_ends.clear();
        self.labels.clear();
        self.label_ends.clear();
        for e in batch {
            write_rfc3339(e.published_at, &mut self.times);
            e.write_headers_json(&mut self.headers);
            self.header_ends.push(self.headers.len());
            if e.labels.is_empty() {
                self.labels.extend_from_slice(b"[]");
            } else {
                // Serializing strings into a Vec<u8> cannot fail.
                let _ = serde_json::to_writer(&mut self.labels, &e.labels);
            }
            self.label_ends.push(self.labels.len());
        }
    }

    fn time(&self, i: usize) -> &str {
        &self.times[i * RFC3339_LEN..(i + 1) * RFC3339_LEN]
    }

    fn json<'a>(buf: &'a [u8], ends: &[usize], i: usize) -> &'a str {
        let start = if i == 0 { 0 } else { ends[i - 1] };
        // serde_json writes UTF-8; an error here would be a bug, stored as empty JSON.
        std::str::from_utf8(&buf[start..ends[i]]).unwrap_or("{}")
    }
}

/// Inserts the batch in one transaction and commits it. On error the transaction is
/// dropped, which rolls it back.
pub(super) fn insert_batch(
    conn: &mut Connection,
    table: &str,
    batch: &[Envelope],
    scratch: &mut Scratch,
) -> Result<(), SinkError> {
    let written_at = rfc3339(OffsetDateTime::now_utc());
    scratch.fill(batch);
    // IMMEDIATE takes the write lock up front, so a competing writer is waited for under
    // busy_timeout instead of failing mid-batch.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| classify(&e, None))?;
    // One statement per chunk size, taken from the cache once per batch, not once per
    // chunk: the cache's lookup and return cost more than a row's binding.
    let mut statement: Option<((usize, bool), rusqlite::CachedStatement<'_>)> = None;
    for (c, chunk) in batch.chunks(ROWS_PER_STATEMENT).enumerate() {
        let first = c * ROWS_PER_STATEMENT;
        let shape = (chunk.len(), shares_columns(chunk));
        if statement.as_ref().is_none_or(|(s, _)| *s != shape) {
            // Return the previous statement to the cache before taking the next.
            drop(statement.take());
            let sql = scratch
                .statements
                .entry(shape)
                .or_insert_with(|| schema::insert_rows_sql(table, shape.0, shape.1));
            let stmt = tx.prepare_cached(sql).map_err(|e| classify(&e, None))?;
            statement = Some((shape, stmt));
        }
        let Some((_, stmt)) = statement.as_mut() else {
            return Err(SinkError::transient(
                "sqlite insert statement is not prepared",
            ));
        };
        for (r, e) in chunk.iter().enumerate() {
            let row = Row {
                r,
                i: first + r,
                shared: shape.1 && r > 0,
            };
            bind_row(stmt, row, e, &written_at, scratch)
                .map_err(|err| classify(&err, Some(first + r)))?;
        }
        if let Err(err) = stmt.raw_execute() {
            // A failed statement is undone alone (SQLite's default ABORT): find the row
            // that fails by itself, so the runner can isolate it without bisecting.
            let index = find_refused_row(&tx, table, chunk, first, &written_at, scratch);
            return Err(classify(&err, index));
        }
    }
    drop(statement);
    tx.commit().map_err(|e| classify(&e, None))
}

/// Whether every row of `chunk` has the same [`schema::SHARED_COLUMNS`] values (the commit
/// time is one per batch), so a statement can bind them once.
fn shares_columns(chunk: &[Envelope]) -> bool {
    chunk.split_first().is_some_and(|(head, rest)| {
        rest.iter()
            .all(|e| e.stream == head.stream && e.lane == head.lane)
    })
}

/// Where an envelope goes in a multi-row statement.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// The row of the statement.
    r: usize,
    /// The envelope's position in the batch.
    i: usize,
    /// The row takes the [`schema::SHARED_COLUMNS`] from the first row's parameters, so
    /// they are not bound for it.
    shared: bool,
}

/// Binds envelope `e` as row `row.r` of a multi-row statement.
fn bind_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
    row: Row,
    e: &Envelope,
    written_at: &str,
    scratch: &Scratch,
) -> rusqlite::Result<()> {
    let base = row.r * schema::COLUMNS.len();
    let p = |k: usize| base + k;
    let i = row.i;
    stmt.raw_bind_parameter(p(1), &e.idempotency_key)?;
    if !row.shared {
        stmt.raw_bind_parameter(p(2), &e.stream)?;
        stmt.raw_bind_parameter(p(8), written_at)?;
        stmt.raw_bind_parameter(p(12), &e.lane)?;
    }
    stmt.raw_bind_parameter(p(3), e.stream_sequence)?;
    stmt.raw_bind_parameter(p(4), e.consumer_sequence)?;
    stmt.raw_bind_parameter(p(5), &e.subject)?;
    stmt.raw_bind_parameter(p(6), e.delivered)?;
    stmt.raw_bind_parameter(p(7), scratch.time(i))?;
    stmt.raw_bind_parameter(p(9), &e.message_id)?;
    stmt.raw_bind_parameter(
        p(10),
        Scratch::json(&scratch.headers, &scratch.header_ends, i),
    )?;
    stmt.raw_bind_parameter(p(11), &e.priority)?;
    stmt.raw_bind_parameter(p(13), &e.classification)?;
    stmt.raw_bind_parameter(
        p(14),
        Scratch::json(&scratch.labels, &scratch.label_ends, i),
    )?;
    stmt.raw_bind_parameter(p(15), e.trace_id())?;
    stmt.raw_bind_parameter(p(16), &e.payload[..])
}

/// Re-runs a refused chunk one row at a time inside a savepoint that is rolled back, and
/// returns the batch position of the first row that fails on its own.
fn find_refused_row(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    chunk: &[Envelope],
    first: usize,
    written_at: &str,
    scratch: &Scratch,
) -> Option<usize> {
    if tx.execute_batch("SAVEPOINT jetsink_probe").is_err() {
        return None;
    }
    let sql = schema::insert_rows_sql(table, 1, false);
    let mut found = None;
    if let Ok(mut stmt) = tx.prepare_cached(&sql) {
        for (r, e) in chunk.iter().enumerate() {
            let row = Row {
                r: 0,
                i: first + r,
                shared: false,
            };
            let failed = bind_row(&mut stmt, row, e, written_at, scratch)
                .and_then(|()| stmt.raw_execute())
                .is_err();
            if failed {
                found = Some(first + r);
                break;
            }
        }
    }
    let _ = tx.execute_batch("ROLLBACK TO jetsink_probe; RELEASE jetsink_probe");
    found
}
