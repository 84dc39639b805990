//! The two ways a batch reaches the table, each committing as a whole or not at all: one
//! `INSERT ... SELECT FROM unnest(...)` in autocommit, or from `copy_threshold` rows binary
//! `COPY` into the session's staging table and one `INSERT ... SELECT` from it in an
//! explicit transaction; and the empty write that checks the privileges at open.

use futures::SinkExt;
use time::OffsetDateTime;
use tokio_postgres::{Client, Statement};

use super::classify::classify;
use super::connection::Conn;
use super::encode::{copy_data, documents, encode, ColumnData, Refused};
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
    match (&conn.copy, use_copy) {
        (Some((copy, from_stage)), true) => {
            let data = copy_data(&encoded, &conn.wires).map_err(refused)?;
            let tx = conn.client.transaction().await.map_err(db)?;
            let sink = tx.copy_in::<_, bytes::Bytes>(copy).await.map_err(db)?;
            futures::pin_mut!(sink);
            let mut data = data.freeze();
            while !data.is_empty() {
                let chunk = data.split_to(data.len().min(COPY_CHUNK));
                sink.as_mut().feed(chunk).await.map_err(db)?;
            }
            sink.as_mut().finish().await.map_err(db)?;
            tx.execute(from_stage, &[]).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
        }
        _ => {
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                encoded.columns.iter().map(|c| c.as_param()).collect();
            // One statement in autocommit: it commits as a whole before it returns.
            conn.client
                .execute(&conn.insert, &params)
                .await
                .map_err(db)?;
        }
    }
    Ok(())
}
