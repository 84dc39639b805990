//! The MySQL/MariaDB [`Dialect`]: connection options, the table check at open, and the
//! write path (in [`super::write`]). The connection lifecycle around it is
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
use mysql_async::{Conn, Opts, OptsBuilder};

use super::catalog::{read_columns, read_keys};
use super::classify::classify;
use super::config::{MysqlConfig, MysqlPayloadType};
use super::schema;
use super::tls;
use super::upgrade;
use super::write::{takes_bulk, write_batch, Live};
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, SinkError};
use crate::sinks::database::columns::{
    plan_table, Family, Field, Mapping, Source, TableColumn, TablePlan, UniqueKey,
};
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

    /// Why a missing table is not created: it is the user's own (`columns`), or
    /// `auto_create` is off.
    fn missing_table(&self, default_layout: bool) -> SinkError {
        SinkError::Misconfigured {
            message: format!(
                "table {} does not exist (or the user may not see it){}",
                self.config.table,
                if default_layout {
                    " and auto_create is false"
                } else {
                    "; with `columns` the table must be created beforehand"
                }
            ),
        }
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
                Err(self.missing_table(default_layout))
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
                "table {} fits and this user may write it{}",
                self.config.table,
                plan.describe_upsert()
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
            let create = match &self.config.copy_of {
                // A bench's scratch copy of the user's table (columns and indexes).
                Some(source) => format!(
                    "CREATE TABLE {} LIKE {}",
                    self.table_sql,
                    schema::quote_ident(source)
                ),
                None if default_layout && self.config.auto_create => schema::create_table_sql(
                    &self.config.table,
                    self.config.payload_type.unwrap_or_default(),
                ),
                None => return Err(self.missing_table(default_layout)),
            };
            conn.query_drop(create).await.map_err(db)?;
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

    async fn drop_table(&self, live: &mut Live) -> Result<(), SinkError> {
        let sql = format!("DROP TABLE IF EXISTS {}", self.table_sql);
        live.conn
            .query_drop(sql)
            .await
            .map_err(|e| classify(&e, Phase::Write, None))
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
