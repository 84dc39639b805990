//! The MySQL/MariaDB [`Dialect`]: connection options, the table check at open, and the
//! write path. The connection lifecycle around it is
//! [`DatabaseSink`](crate::sinks::database::DatabaseSink)'s; the default table is created
//! only at the first open.
//!
//! On MariaDB 10.2.7 and later a batch is one bulk execution (`COM_STMT_BULK_EXECUTE`) of
//! the one-row `INSERT ... ON DUPLICATE KEY UPDATE` prepared at connect: every row in one
//! command, committed in autocommit as one statement. On MySQL (and on a MariaDB that
//! refuses bulk operations, error 4033 under statement-based binary logging) it is one
//! multi-row prepared statement (cached per row count by the driver). Either way a batch
//! too big for one command (a quarter of `max_allowed_packet`, or 65,535 placeholders for
//! a multi-row statement) is split into several inside one explicit transaction. The
//! server names the failing row of many data errors (in a bulk execution too), which
//! becomes the index the runner isolates; otherwise the runner bisects.
//!
//! Why bulk: a multi-row statement of 500 rows carries 3,500 placeholders, and the driver
//! parses its text and looks it up in the statement cache on every execution, and keeps a
//! prepared statement with 3,500 parameter definitions per distinct row count; the bulk
//! command reuses one seven-parameter statement.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Params, Statement, TxOpts, Value};
use time::OffsetDateTime;

use super::catalog::{read_columns, read_keys};
use super::classify::{classify, Rows};
use super::config::{MysqlConfig, MysqlPayloadType};
use super::encode;
use super::schema;
use super::tls;
use super::upgrade;
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, SinkError};
use crate::sinks::database::cells::parse_documents;
use crate::sinks::database::columns::{
    plan_table, Family, Field, Mapping, Source, TableColumn, TablePlan, UniqueKey,
};
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::locate::Query;
use crate::sinks::database::util::{read_password, Phase};
use crate::sinks::database::{database_settings, DatabaseSink, Dialect};

/// Prepared statements the driver keeps per connection: with multi-row statements one per
/// distinct row count; bulk executions use the one-row statement alone.
const STATEMENT_CACHE: usize = 64;

database_settings!(MysqlConfig);

/// The MySQL / MariaDB destination: a [`DatabaseSink`] speaking MySQL.
pub type MysqlSink = DatabaseSink<Mysql>;

/// MySQL's half of the database sink.
pub struct Mysql {
    config: MysqlConfig,
    /// The quoted table name.
    table_sql: String,
}

/// A live connection and the plan checked on it.
pub struct Live {
    conn: Conn,
    plan: TablePlan,
    /// Most bytes of values in one statement.
    max_bytes: usize,
    /// The one-row insert, prepared at connect: what a bulk execution repeats.
    one_row: Statement,
    /// Batches go as bulk executions of `one_row` (MariaDB 10.2.7+, until it refuses one).
    bulk: bool,
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
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    // A replication-compatible prefix ("5.5.5-10.11.6-MariaDB") comes before the real one.
    let mut numbers: Vec<u32> = parts.by_ref().take(6).collect();
    if numbers.starts_with(&[5, 5, 5]) && numbers.len() >= 6 {
        numbers.drain(..3);
    }
    matches!(numbers.as_slice(), [major, minor, patch, ..] if (*major, *minor, *patch) >= (10, 2, 7))
}

impl Mysql {
    fn opts(&self) -> Result<Opts, SinkError> {
        let c = &self.config;
        let mut b = match &c.url {
            Some(url) => OptsBuilder::from_opts(Opts::from_url(url).map_err(|e| {
                SinkError::Misconfigured {
                    message: format!("url is not a MySQL connection URL: {e}"),
                }
            })?),
            None => OptsBuilder::default()
                .ip_or_hostname(c.host.as_deref().unwrap_or("127.0.0.1"))
                .tcp_port(c.port.unwrap_or(3306))
                .user(Some(c.user.as_deref().unwrap_or("root")))
                .db_name(c.database.as_deref()),
        };
        if let Some(pw) = read_password(c.password_env.as_deref(), c.password_file.as_deref())? {
            b = b.pass(Some(pw));
        }
        if c.tls.enabled {
            // The driver would otherwise move a loopback connection to the server's Unix
            // socket, which carries no TLS: no client certificate, and not what was asked.
            b = b
                .ssl_opts(Some(tls::ssl_opts(&c.tls)?))
                .prefer_socket(false);
        }
        Ok(b.stmt_cache_size(STATEMENT_CACHE)
            .init(schema::SESSION_INIT.to_vec())
            .into())
    }

    /// [`Dialect::probe`] on a connection: the table, its keys, the insert prepared.
    async fn probe_on(&self, conn: &mut Conn, mapping: &Mapping) -> Result<Probe, SinkError> {
        let db = |e: mysql_async::Error| classify(&e, Phase::Open, None);
        let columns = read_columns(conn, &self.config.table).await.map_err(db)?;
        if columns.is_empty() {
            let default_layout = self.config.columns.is_none();
            if default_layout && self.config.auto_create {
                Ok(Probe::WouldCreate(format!("table {}", self.config.table)))
            } else {
                Err(SinkError::Misconfigured {
                    message: format!(
                        "table {} does not exist (or the user may not see it){}",
                        self.config.table,
                        if default_layout {
                            " and auto_create is false"
                        } else {
                            "; with `columns` the table must be created beforehand"
                        }
                    ),
                })
            }
        } else {
            let keys = read_keys(conn, &self.config.table).await.map_err(db)?;
            // Columns added to the layout since are added by open (see `upgrade`).
            let missing = upgrade::missing_added(&self.config, &columns);
            let plan = self.plan(&mapping.without(&missing), &columns, &keys)?;
            // Preparing checks the INSERT (and UPDATE) privileges and writes nothing.
            let sql = schema::insert_sql(&self.table_sql, &plan, 1, self.config.mode);
            conn.prep(sql).await.map_err(db)?;
            if !missing.is_empty() {
                return Ok(Probe::WouldCreate(format!(
                    "columns {} of table {}",
                    missing.join(", "),
                    self.config.table
                )));
            }
            Ok(Probe::Ready(format!(
                "table {} fits and this user may write it",
                self.config.table
            )))
        }
    }

    /// The plan for writing `mapping` into the table, which fits it and `payload_type`.
    fn plan(
        &self,
        mapping: &Mapping,
        columns: &[TableColumn],
        keys: &[UniqueKey],
    ) -> Result<TablePlan, SinkError> {
        let plan = plan_table(mapping, columns, keys, true).map_err(|problem| {
            SinkError::Misconfigured {
                message: format!("table {} cannot be used: {problem}", self.config.table),
            }
        })?;
        self.check_payload_type(&plan)?;
        Ok(plan)
    }

    fn check_payload_type(&self, plan: &TablePlan) -> Result<(), SinkError> {
        let Some(wanted) = self.config.payload_type else {
            return Ok(());
        };
        let Some(col) = plan.columns.iter().find(|c| {
            c.name.eq_ignore_ascii_case("payload") && c.source == Source::Field(Field::Payload)
        }) else {
            return Ok(());
        };
        let fits = match wanted {
            MysqlPayloadType::Blob => col.family == Family::Bytes,
            MysqlPayloadType::Json => col.family == Family::Json,
        };
        if fits {
            Ok(())
        } else {
            Err(SinkError::Misconfigured {
                message: format!(
                    "table {}: payload_type is {} but the payload column is {}",
                    self.config.table,
                    match wanted {
                        MysqlPayloadType::Blob => "blob",
                        MysqlPayloadType::Json => "json",
                    },
                    col.type_name
                ),
            })
        }
    }
}

/// Writes and commits one batch on `live`.
async fn write_batch(
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
            other => return other.map_err(WriteFailure::into_sink_error),
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
            encode::row(&plan.columns, e, doc, written_at)
                .map_err(|err| refused(i, err.to_string()))?,
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

impl WriteFailure {
    fn into_sink_error(self) -> SinkError {
        match self {
            WriteFailure::Sink(e) => e,
            WriteFailure::BulkRefused => {
                SinkError::transient("mysql refused a bulk execution (error 4033)".to_string())
            }
        }
    }
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

impl Dialect for Mysql {
    type Config = MysqlConfig;
    type Conn = Live;
    const WRITE_GRACE: Duration = Duration::ZERO;
    const NAME: &'static str = "mysql";

    fn new(config: MysqlConfig) -> Mysql {
        Mysql {
            table_sql: schema::quote_ident(&config.table),
            config,
        }
    }

    async fn connect(&self, mapping: &Mapping, phase: Phase) -> Result<Live, SinkError> {
        let db = |e: mysql_async::Error| classify(&e, phase, None);
        let mut conn = Conn::new(self.opts()?).await.map_err(db)?;
        let (flush, packet, version): (Option<String>, u64, String) = conn
            .query_first(
                "SELECT CAST(@@innodb_flush_log_at_trx_commit AS CHAR), @@max_allowed_packet, @@version",
            )
            .await
            .map_err(db)?
            .unwrap_or((None, 16 << 20, String::new()));
        if phase == Phase::Open && flush.as_deref().is_some_and(|f| f != "1") {
            tracing::warn!(destination = %self.config.target(), "innodb_flush_log_at_trx_commit is not 1: a server crash can lose commits jetsink has already ACKed");
        }
        let max_bytes = usize::try_from(packet / 4)
            .unwrap_or(4 << 20)
            .clamp(64 << 10, 16 << 20);

        let mut columns = read_columns(&mut conn, &self.config.table)
            .await
            .map_err(db)?;
        if columns.is_empty() {
            let default_layout = self.config.columns.is_none();
            if phase == Phase::Write {
                return Err(SinkError::transient(format!(
                    "table {} disappeared after it was opened (or the user lost every \
                     privilege on it); restore it (jetsink does not re-create it)",
                    self.config.table
                )));
            }
            if !(default_layout && self.config.auto_create) {
                return Err(SinkError::Misconfigured {
                    message: format!(
                        "table {} does not exist (or the user may not see it){}",
                        self.config.table,
                        if default_layout {
                            " and auto_create is false"
                        } else {
                            "; with `columns` the table must be created beforehand"
                        }
                    ),
                });
            }
            let payload = self.config.payload_type.unwrap_or_default();
            conn.query_drop(schema::create_table_sql(&self.config.table, payload))
                .await
                .map_err(db)?;
            tracing::info!(table = %self.config.table, "created mysql table");
            columns = read_columns(&mut conn, &self.config.table)
                .await
                .map_err(db)?;
        }
        let keys = read_keys(&mut conn, &self.config.table).await.map_err(db)?;
        // Planned without the columns the layout gained since first, so a table that
        // cannot be written anyway is refused before anything alters it.
        let missing = upgrade::missing_added(&self.config, &columns);
        let mut plan = self.plan(&mapping.without(&missing), &columns, &keys)?;
        let lock_wait_s = self.config.statement_timeout_ms.div_ceil(1000).max(1);
        if !missing.is_empty()
            && upgrade::add_columns(&mut conn, &self.table_sql, &missing, lock_wait_s, phase)
                .await?
        {
            columns = read_columns(&mut conn, &self.config.table)
                .await
                .map_err(db)?;
            plan = self.plan(mapping, &columns, &keys)?;
        }
        // Preparing the statement checks the table and the INSERT (and UPDATE) privileges.
        let sql = schema::insert_sql(&self.table_sql, &plan, 1, self.config.mode);
        let one_row = conn.prep(sql).await.map_err(db)?;
        Ok(Live {
            conn,
            plan,
            max_bytes,
            one_row,
            bulk: self.config.bulk && takes_bulk(&version),
        })
    }

    async fn probe(&self, mapping: &Mapping) -> Result<Probe, SinkError> {
        let db = |e: mysql_async::Error| classify(&e, Phase::Open, None);
        let mut conn = Conn::new(self.opts()?).await.map_err(db)?;
        let result = self.probe_on(&mut conn, mapping).await;
        let _ = conn.disconnect().await;
        result
    }

    async fn write(&self, live: &mut Live, batch: &[Envelope]) -> Result<(), SinkError> {
        write_batch(live, &self.table_sql, batch, self.config.mode).await
    }

    async fn ping(&self, live: &mut Live) -> Result<(), SinkError> {
        live.conn
            .ping()
            .await
            .map_err(|e| classify(&e, Phase::Write, None))
    }

    async fn count_keys(
        &self,
        live: &mut Live,
        key: &str,
        stream_column: &str,
        stream: &str,
    ) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT COUNT(DISTINCT {}) FROM {} WHERE {} = ?",
            schema::quote_ident(key),
            self.table_sql,
            schema::quote_ident(stream_column)
        );
        let count: Option<u64> = live
            .conn
            .exec_first(sql, (stream,))
            .await
            .map_err(|e| classify(&e, Phase::Write, None))?;
        Ok(count.unwrap_or(0))
    }

    async fn locate(&self, query: &Query<'_>, stream: &str) -> Result<Located, SinkError> {
        let opts = self.opts()?;
        super::locate::locate(opts, &self.config.table, &self.table_sql, query, stream).await
    }

    /// Closes politely in the background; a broken connection just drops.
    fn plan(live: &Live) -> &TablePlan {
        &live.plan
    }

    fn retire(live: Live) {
        tokio::spawn(async move {
            let _ = live.conn.disconnect().await;
        });
    }
}
