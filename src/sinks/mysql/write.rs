//! The MySQL/MariaDB write path: a batch as one bulk execution of the one-row `INSERT`
//! (MariaDB 10.2.7+), or as multi-row prepared statements (MySQL, `bulk: false`, or after
//! MariaDB refused a bulk execution); several commands inside one transaction when the
//! batch is over one command's budget. See [`super::sink`] for why.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Statement, TxOpts, Value};
use time::OffsetDateTime;

use super::classify::{classify, Rows};
use super::encode;
use super::schema;
use crate::envelope::Envelope;
use crate::sinks::contract::SinkError;
use crate::sinks::database::cells::parse_documents;
use crate::sinks::database::columns::TablePlan;
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::util::Phase;

/// A live connection and the plan checked on it.
pub struct Live {
    pub(super) conn: Conn,
    pub(super) plan: TablePlan,
    /// Most bytes of values in one statement.
    pub(super) max_bytes: usize,
    /// The one-row insert, prepared at connect: what a bulk execution repeats.
    pub(super) one_row: Statement,
    /// Batches go as bulk executions of `one_row` (MariaDB 10.2.7+, until it refuses one).
    pub(super) bulk: bool,
}

/// MariaDB's refusal of a bulk execution under statement-based binary logging
/// (`ER_BINLOG_NON_SUPPORTED_BULK`): the batch is written again as multi-row statements.
const BULK_REFUSED: u16 = 4033;

/// Whether a server whose `@@version` is `version` executes bulk commands: MariaDB from
/// 10.2.7 (MySQL has no bulk command; the driver would run the rows one by one).
pub(crate) fn takes_bulk(version: &str) -> bool {
    if !version.contains("MariaDB") {
        return false;
    }
    // A replication-compatible prefix ("5.5.5-10.11.6-MariaDB") comes before the real one.
    let mut numbers: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0))
        .take(6)
        .collect();
    if numbers.starts_with(&[5, 5, 5]) && numbers.len() >= 6 {
        numbers.drain(..3);
    }
    matches!(numbers.as_slice(), [major, minor, patch, ..] if (*major, *minor, *patch) >= (10, 2, 7))
}

/// Writes and commits one batch on `live`.
pub(super) async fn write_batch(
    live: &mut Live,
    table: &str,
    batch: &[Envelope],
    mode: WriteMode,
) -> Result<(), SinkError> {
    let written_at = OffsetDateTime::now_utc();
    if live.bulk {
        let (rows, sizes) = encode_rows(&live.plan, batch, written_at)?;
        match write_bulk(live, rows, &sizes).await {
            Err(WriteFailure::BulkRefused) => {
                tracing::warn!(table = %table, "mysql refused a bulk execution (error 4033, statement-based binary logging); writing multi-row statements from now on");
                live.bulk = false;
            }
            Err(WriteFailure::Sink(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
    let (rows, sizes) = encode_rows(&live.plan, batch, written_at)?;
    write_multi_row(live, table, rows, &sizes, mode).await
}

/// Each message's row of parameters and its approximate size in a statement; a message
/// whose content cannot be sent is refused with its batch index.
fn encode_rows(
    plan: &TablePlan,
    batch: &[Envelope],
    written_at: OffsetDateTime,
) -> Result<(Vec<Vec<Value>>, Vec<usize>), SinkError> {
    let refused = |index: usize, why: String| SinkError::Permanent {
        index: Some(index),
        message: format!("mysql cannot store the message at batch index {index}: {why}"),
    };
    let docs = parse_documents(batch, plan).map_err(|e| refused(e.index, e.to_string()))?;
    let mut rows = Vec::with_capacity(batch.len());
    for (i, e) in batch.iter().enumerate() {
        let doc = docs.get(i).and_then(Option::as_ref);
        rows.push(
            encode::row(plan, e, doc, written_at).map_err(|err| refused(i, err.to_string()))?,
        );
    }
    let sizes = rows
        .iter()
        .map(|r| r.iter().map(encode::size).sum())
        .collect();
    Ok((rows, sizes))
}

/// Why a write failed: the sink's error, or a bulk execution the server refused as such.
enum WriteFailure {
    Sink(SinkError),
    BulkRefused,
}

fn classify_write(e: mysql_async::Error, rows: Option<Rows>) -> WriteFailure {
    match &e {
        mysql_async::Error::Server(s) if s.code == BULK_REFUSED => WriteFailure::BulkRefused,
        _ => WriteFailure::Sink(classify(&e, Phase::Write, rows)),
    }
}

/// The batch as bulk executions of the one-row insert: one in autocommit, or several (a
/// batch over the byte budget) inside one transaction.
async fn write_bulk(
    live: &mut Live,
    rows: Vec<Vec<Value>>,
    sizes: &[usize],
) -> Result<(), WriteFailure> {
    let chunks = schema::chunks(sizes, usize::MAX, live.max_bytes);
    let mut values = rows.into_iter();
    if let [(offset, len)] = chunks.as_slice() {
        let part = values.by_ref().take(*len).map(Params::Positional);
        let rows = Rows {
            offset: *offset,
            len: *len,
        };
        return live
            .conn
            .exec_batch(&live.one_row, part)
            .await
            .map_err(|e| classify_write(e, Some(rows)));
    }
    let mut tx = live
        .conn
        .start_transaction(TxOpts::default())
        .await
        .map_err(|e| classify_write(e, None))?;
    for (offset, len) in &chunks {
        let part: Vec<Params> = values.by_ref().take(*len).map(Params::Positional).collect();
        if let Err(e) = tx.exec_batch(&live.one_row, part).await {
            let err = classify_write(
                e,
                Some(Rows {
                    offset: *offset,
                    len: *len,
                }),
            );
            let _ = tx.rollback().await;
            return Err(err);
        }
    }
    tx.commit().await.map_err(|e| classify_write(e, None))
}

/// The batch as multi-row prepared statements: one in autocommit, or several inside one
/// transaction.
async fn write_multi_row(
    live: &mut Live,
    table: &str,
    rows: Vec<Vec<Value>>,
    sizes: &[usize],
    mode: WriteMode,
) -> Result<(), SinkError> {
    let width = live.plan.columns.len().max(1);
    let chunks = schema::chunks(sizes, schema::MAX_PLACEHOLDERS / width, live.max_bytes);
    let mut values = rows.into_iter();
    let mut statements = Vec::with_capacity(chunks.len());
    for (offset, len) in &chunks {
        let params: Vec<Value> = values.by_ref().take(*len).flatten().collect();
        let sql = schema::insert_sql(table, &live.plan, *len, mode);
        statements.push((
            Rows {
                offset: *offset,
                len: *len,
            },
            sql,
            params,
        ));
    }
    let db = |e: mysql_async::Error, rows: Option<Rows>| classify(&e, Phase::Write, rows);
    if statements.len() == 1 {
        // One statement in autocommit: it commits as a whole before it returns.
        if let Some((rows, sql, params)) = statements.pop() {
            live.conn
                .exec_drop(sql, Params::Positional(params))
                .await
                .map_err(|e| db(e, Some(rows)))?;
        }
        return Ok(());
    }
    let mut tx = live
        .conn
        .start_transaction(TxOpts::default())
        .await
        .map_err(|e| db(e, None))?;
    for (rows, sql, params) in statements {
        if let Err(e) = tx.exec_drop(sql, Params::Positional(params)).await {
            let err = db(e, Some(rows));
            let _ = tx.rollback().await;
            return Err(err);
        }
    }
    tx.commit().await.map_err(|e| db(e, None))
}
