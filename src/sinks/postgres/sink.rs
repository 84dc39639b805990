//! The PostgreSQL [`Dialect`]: connecting, the table check at open and at every reconnect,
//! the dry run of the privileges, and handing batches to the write paths. The connection
//! lifecycle around it is [`DatabaseSink`](crate::sinks::database::DatabaseSink)'s.
//!
//! Opening creates the default table only the first time, and adds to an existing one the
//! columns the layout gained since (see `table`). A batch is
//! written as one statement in autocommit (a binary `COPY` into the table, or a multi-row
//! `INSERT`), or through a staging table from `copy_threshold` rows (see `write`); either
//! way it commits as a whole or not at all. When the database
//! refuses the batch for content, it cannot say which row, so the error carries no index and
//! the runner bisects the batch; content jetsink can check itself (JSON, UTF-8) is refused
//! with the exact index before anything is sent.

use std::time::Duration;

use tokio_postgres::Client;

use super::classify::classify;
use super::config::PostgresConfig;
use super::connection::{connect_client, AbortOnDrop, Conn};
use super::schema;
use super::table;
use super::write::{dry_run, write_batch};
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, SinkError};
use crate::sinks::database::columns::{Mapping, TablePlan};
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::locate::Query;
use crate::sinks::database::util::Phase;
use crate::sinks::database::{database_settings, DatabaseSink, Dialect};

database_settings!(PostgresConfig);

/// The PostgreSQL destination: a [`DatabaseSink`] speaking PostgreSQL.
pub type PostgresSink = DatabaseSink<Postgres>;

/// PostgreSQL's half of the database sink.
pub struct Postgres {
    config: PostgresConfig,
    /// The schema-qualified, quoted table name.
    table_sql: String,
}

impl Postgres {
    fn where_(&self) -> String {
        self.config.target()
    }

    /// Warns, at the first open only, when commits jetsink ACKs could still be lost.
    async fn warn_on_async_commit(&self, client: &Client, phase: Phase) -> Result<(), SinkError> {
        if phase != Phase::Open {
            return Ok(());
        }
        let row = client
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .await
            .map_err(|e| classify(&e, phase, None))?;
        let sync: String = row.get(0);
        if sync == "off" {
            tracing::warn!(destination = %self.where_(), "synchronous_commit is off for this role: a server crash can lose commits jetsink has already ACKed");
        }
        Ok(())
    }
}

impl Dialect for Postgres {
    type Config = PostgresConfig;
    type Conn = Conn;
    const WRITE_GRACE: Duration = Duration::from_secs(5);
    const NAME: &'static str = "postgres";

    fn new(config: PostgresConfig) -> Postgres {
        Postgres {
            table_sql: schema::qualified(config.schema.as_deref(), &config.table),
            config,
        }
    }

    async fn connect(&self, mapping: &Mapping, phase: Phase) -> Result<Conn, SinkError> {
        let c = &self.config;
        let (client, driver) = connect_client(c, phase).await?;
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        self.warn_on_async_commit(&client, phase).await?;

        let oid = table::resolve(&client, c, &self.table_sql, mapping, phase).await?;
        let (mut columns, mut bases) = table::read_columns(&client, oid).await.map_err(db)?;
        let keys = table::read_keys(&client, oid).await.map_err(db)?;
        // Planned without the columns the layout gained since first, so a table that
        // cannot be written anyway is refused before anything alters it.
        let missing = table::missing_added(c, mapping, &columns);
        let older = mapping.without(&missing);
        let mut plan = table::plan(c, &self.table_sql, &older, &columns, &keys)?;
        if !missing.is_empty()
            && table::add_columns(&client, &self.table_sql, &missing, phase).await?
        {
            (columns, bases) = table::read_columns(&client, oid).await.map_err(db)?;
            plan = table::plan(c, &self.table_sql, mapping, &columns, &keys)?;
        }
        let wires = table::wires(&plan, &columns, &bases);
        let sql = schema::write_sql(&self.table_sql, &plan, &wires, c.mode);
        let insert = client.prepare(&sql.insert).await.map_err(db)?;
        // A write of no rows checks what preparing does not: the INSERT (and, for upsert,
        // UPDATE) privileges on the table.
        dry_run(&client, &insert, &wires).await.map_err(db)?;
        let copy = if c.copy_threshold == 0 {
            None
        } else {
            match client.batch_execute(&sql.create_stage).await {
                Ok(()) => {
                    let copy = client.prepare(&sql.copy).await.map_err(db)?;
                    let from_stage = client.prepare(&sql.insert_from_stage).await.map_err(db)?;
                    Some((copy, from_stage))
                }
                Err(e) if e.code().map(|s| s.code()) == Some("42501") => {
                    tracing::warn!(destination = %self.where_(), "the role may not create temporary tables; large batches use the multi-row INSERT instead of COPY");
                    None
                }
                Err(e) => return Err(db(e)),
            }
        };
        let direct = match schema::native_copy_wires(&plan, &wires, &columns, &bases) {
            Some(direct_wires)
                if c.direct_copy && c.mode == WriteMode::InsertIgnore && c.copy_threshold > 0 =>
            {
                let statement = client.prepare(&sql.copy_direct).await.map_err(db)?;
                Some((statement, direct_wires))
            }
            _ => None,
        };
        Ok(Conn {
            client,
            driver,
            plan,
            wires,
            insert,
            copy,
            direct,
        })
    }

    async fn probe(&self, mapping: &Mapping) -> Result<Probe, SinkError> {
        let phase = Phase::Open;
        let (client, driver) = connect_client(&self.config, phase).await?;
        let _stop = AbortOnDrop(driver);
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        let Some(oid) = table::lookup(&client, &self.table_sql).await.map_err(db)? else {
            let default_layout = table::is_default_layout(&self.config, mapping);
            return if default_layout && self.config.auto_create {
                Ok(Probe::WouldCreate(format!("table {}", self.table_sql)))
            } else {
                Err(table::missing_table(&self.table_sql, default_layout))
            };
        };
        let (columns, _) = table::read_columns(&client, oid).await.map_err(db)?;
        let keys = table::read_keys(&client, oid).await.map_err(db)?;
        // Columns added to the layout since are added by open (see `table::add_columns`).
        let missing = table::missing_added(&self.config, mapping, &columns);
        let older = mapping.without(&missing);
        let plan = table::plan(&self.config, &self.table_sql, &older, &columns, &keys)?;
        let privilege = if self.config.mode == WriteMode::Upsert {
            "INSERT, UPDATE"
        } else {
            "INSERT"
        };
        let allowed: bool = client
            .query_one(
                "SELECT has_table_privilege($1::oid, $2)",
                &[&oid, &privilege],
            )
            .await
            .map_err(db)?
            .get(0);
        if !allowed {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "this role lacks the {privilege} privilege on table {}",
                    self.table_sql
                ),
            });
        }
        if !missing.is_empty() {
            return Ok(Probe::WouldCreate(format!(
                "columns {} of table {}",
                missing.join(", "),
                self.table_sql
            )));
        }
        Ok(Probe::Ready(format!(
            "table {} fits and this role may write it{}",
            self.table_sql,
            plan.describe_upsert()
        )))
    }

    async fn write(&self, conn: &mut Conn, batch: &[Envelope]) -> Result<(), SinkError> {
        write_batch(conn, batch, self.config.mode, self.config.copy_threshold).await
    }

    async fn ping(&self, conn: &mut Conn) -> Result<(), SinkError> {
        conn.client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| classify(&e, Phase::Write, None))
    }

    async fn count_keys(
        &self,
        conn: &mut Conn,
        key: &str,
        stream_column: &str,
        stream: &str,
    ) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT COUNT(DISTINCT {})::bigint FROM {} WHERE {}::text = $1",
            schema::quote_ident(key),
            self.table_sql,
            schema::quote_ident(stream_column)
        );
        let row = conn
            .client
            .query_one(&sql, &[&stream])
            .await
            .map_err(|e| classify(&e, Phase::Write, None))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    async fn drop_table(&self, conn: &mut Conn) -> Result<(), SinkError> {
        let sql = format!("DROP TABLE IF EXISTS {}", self.table_sql);
        conn.client
            .batch_execute(&sql)
            .await
            .map_err(|e| classify(&e, Phase::Write, None))
    }

    async fn locate(&self, query: &Query<'_>, stream: &str) -> Result<Located, SinkError> {
        super::locate::locate(&self.config, &self.table_sql, query, stream).await
    }

    fn plan(conn: &Conn) -> &TablePlan {
        &conn.plan
    }

    fn is_closed(conn: &Conn) -> bool {
        conn.client.is_closed()
    }
}
