//! The ways a batch reaches the table, each committing as a whole or not at all: binary
//! `COPY` straight into the table in autocommit (`direct_copy`), falling back to the
//! multi-row `INSERT` when the table refuses it; one `INSERT ... SELECT FROM unnest(...)`
//! in autocommit; or from `copy_threshold` rows binary `COPY` into the session's staging
//! table and one `INSERT ... SELECT` from it in an explicit transaction; and the empty
//! write that checks the privileges at open.

use futures::SinkExt;
use time::OffsetDateTime;
use tokio_postgres::{Client, Statement};

use super::classify::classify;
use super::connection::Conn;
use super::encode::{copy_data, documents, encode, reads_as_int8, ColumnData, Refused};
use super::schema::Wire;
use crate::envelope::Envelope;
use crate::sinks::contract::SinkError;
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::util::Phase;

/// Size of the `COPY` data messages a batch is sent in.
const COPY_CHUNK: usize = 1 << 20;

/// Runs the insert with empty arrays: no row is written, but the executor checks the
/// table privileges the real writes need.
pub(super) async fn dry_run(
    client: &Client,
    insert: &Statement,
    wires: &[Wire],
) -> Result<u64, tokio_postgres::Error> {
    let columns: Vec<ColumnData<'_>> = wires.iter().map(|w| ColumnData::empty(*w)).collect();
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        columns.iter().map(|c| c.as_param()).collect();
    client.execute(insert, &params).await
}

/// Writes and commits one batch on `conn`.
pub(super) async fn write_batch(
    conn: &mut Conn,
    batch: &[Envelope],
    mode: WriteMode,
    copy_threshold: u32,
) -> Result<(), SinkError> {
    let written_at = OffsetDateTime::now_utc();
    let refused = |r: Refused| SinkError::Permanent {
        index: Some(r.index),
        message: format!(
            "postgres cannot store the message at batch index {}: {}",
            r.index, r.message
        ),
    };
    let docs = documents(batch, &conn.plan).map_err(refused)?;
    let encoded = encode(
        batch,
        &docs,
        &conn.plan,
        &conn.wires,
        written_at,
        mode == WriteMode::Upsert,
    )
    .map_err(refused)?;
    // A statement that wrote one message can name it.
    let single = (batch.len() == 1).then_some(0);
    let db = |e: tokio_postgres::Error| classify(&e, Phase::Write, single);
    let use_copy = copy_threshold > 0 && encoded.rows >= copy_threshold as usize;
    let mut forgo = false;
    // The COPY data, built once for both COPY paths.
    let mut data = None;
    let direct = conn.direct.as_ref().filter(|(_, direct_wires)| {
        encoded.rows >= 2
            && encoded
                .columns
                .iter()
                .zip(direct_wires)
                .zip(&conn.wires)
                .all(|((column, direct), wire)| direct == wire || reads_as_int8(column))
    });
    if let Some((direct, direct_wires)) = direct {
        let rows = copy_data(&encoded, direct_wires).map_err(refused)?.freeze();
        if *direct_wires == conn.wires {
            data = Some(rows.clone());
        }
        let copied = match conn.client.copy_in(direct).await {
            Ok(sink) => feed(sink, rows).await,
            Err(e) => Err(e),
        };
        match copied {
            Ok(()) => return Ok(()),
            // The server refused the rows, most often because one is stored already (a
            // redelivery): the multi-row INSERT below skips those and says what else is
            // wrong. Nothing of the COPY remains: it was one statement in autocommit.
            Err(e) if e.code().is_some() => {
                let code = e.code().map(|c| c.code()).unwrap_or_default();
                match after_refused_copy(code) {
                    AfterCopy::Insert => {}
                    AfterCopy::InsertFromNowOn => {
                        tracing::warn!(sqlstate = code, "postgres refused COPY into the table; this connection writes with INSERT from now on");
                        forgo = true;
                    }
                    AfterCopy::Fail => return Err(db(e)),
                }
            }
            Err(e) => return Err(db(e)),
        }
    }
    let written = match (&conn.copy, use_copy) {
        (Some((copy, from_stage)), true) => {
            let rows = match data {
                Some(rows) => rows,
                None => copy_data(&encoded, &conn.wires).map_err(refused)?.freeze(),
            };
            staged(&mut conn.client, copy, from_stage, rows).await
        }
        _ => {
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                encoded.columns.iter().map(|c| c.as_param()).collect();
            // One statement in autocommit: it commits as a whole before it returns.
            conn.client.execute(&conn.insert, &params).await.map(drop)
        }
    };
    drop(encoded);
    if forgo {
        conn.direct = None;
    }
    written.map_err(db)
}

/// Binary `COPY` of `data` into the staging table and one `INSERT ... SELECT` from it, in
/// one transaction.
async fn staged(
    client: &mut Client,
    copy: &Statement,
    from_stage: &Statement,
    data: bytes::Bytes,
) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    feed(tx.copy_in(copy).await?, data).await?;
    tx.execute(from_stage, &[]).await?;
    tx.commit().await
}

/// Sends `data` into a started `COPY ... FROM STDIN`, in 1 MiB messages, and ends it.
async fn feed(
    sink: tokio_postgres::CopyInSink<bytes::Bytes>,
    mut data: bytes::Bytes,
) -> Result<(), tokio_postgres::Error> {
    futures::pin_mut!(sink);
    while !data.is_empty() {
        let chunk = data.split_to(data.len().min(COPY_CHUNK));
        sink.as_mut().feed(chunk).await?;
    }
    sink.as_mut().finish().await.map(drop)
}

/// What follows a direct `COPY` the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterCopy {
    /// The rows were refused (SQLSTATE classes 22 and 23), most often one that is stored
    /// already: the multi-row INSERT writes the batch, skipping those, or names what else
    /// is wrong with it.
    Insert,
    /// The table cannot be filled by `COPY` (a view, a feature it lacks): the INSERT writes
    /// this batch and every later one on the connection.
    InsertFromNowOn,
    /// The server failed (a timeout, a lost connection, a full disk): the error is the
    /// batch's, classified like the INSERT's would be.
    Fail,
}

/// What follows a direct `COPY` refused with `sqlstate`.
pub(super) fn after_refused_copy(sqlstate: &str) -> AfterCopy {
    match sqlstate {
        "42809" | "0A000" => AfterCopy::InsertFromNowOn,
        s if s.starts_with("22") || s.starts_with("23") => AfterCopy::Insert,
        _ => AfterCopy::Fail,
    }
}
