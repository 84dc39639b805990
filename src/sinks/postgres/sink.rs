//! The PostgreSQL [`Dialect`]: connecting (TLS, session settings), the table check at open,
//! and the two write paths. The connection lifecycle around it is
//! [`DatabaseSink`](crate::sinks::database::DatabaseSink)'s.
//!
//! Opening creates the default table only the first time: a table that disappears later
//! (renamed, dropped) is an outage that holds the batch until it is back, not a reason to
//! start an empty one.
//!
//! A batch is written as one statement in autocommit — `INSERT ... SELECT FROM unnest(...)`
//! with one array parameter per column, a single round trip — or, from `copy_threshold`
//! rows, as binary `COPY` into a session temporary table and one `INSERT ... SELECT` in an
//! explicit transaction. Either way it commits as a whole or not at all. When the database
//! refuses the batch for content, it cannot say which row, so the error carries no index and
//! the runner bisects the batch; content jetsink can check itself (JSON, UTF-8) is refused
//! with the exact index before anything is sent.

use std::time::Duration;

use futures::SinkExt;
use time::OffsetDateTime;
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls, Statement};

use super::classify::classify;
use super::config::{PostgresConfig, PostgresPayloadType};
use super::encode::{copy_data, documents, encode, Refused};
use super::schema::{self, Wire};
use super::tls::tls_config;
use crate::envelope::Envelope;
use crate::sinks::database::columns::{
    plan_table, Family, Mapping, TableColumn, TablePlan, UniqueKey,
};
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::util::{read_password, Phase};
use crate::sinks::database::{database_settings, DatabaseSink, Dialect};
use crate::sinks::contract::{Probe, SinkError};

/// Size of the `COPY` data messages a batch is sent in.
const COPY_CHUNK: usize = 1 << 20;

database_settings!(PostgresConfig);

/// The PostgreSQL destination: a [`DatabaseSink`] speaking PostgreSQL.
pub type PostgresSink = DatabaseSink<Postgres>;

/// PostgreSQL's half of the database sink.
pub struct Postgres {
    config: PostgresConfig,
    /// The schema-qualified, quoted table name.
    table_sql: String,
}

/// A live connection and what was prepared on it.
pub struct Conn {
    client: Client,
    driver: JoinHandle<()>,
    plan: TablePlan,
    wires: Vec<Wire>,
    insert: Statement,
    /// `COPY` and the `INSERT ... SELECT` from the staging table; `None` when `COPY` is
    /// disabled or the role may not create temporary tables.
    copy: Option<(Statement, Statement)>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Postgres {
    fn where_(&self) -> String {
        self.config.target()
    }

    /// A connected client (and its driver task) with the statement timeout and UTC set.
    async fn client(&self, phase: Phase) -> Result<(Client, JoinHandle<()>), SinkError> {
        let c = &self.config;
        let mut pg = match &c.url {
            Some(url) => {
                url.parse::<tokio_postgres::Config>()
                    .map_err(|e| SinkError::Misconfigured {
                        message: format!("url is not a PostgreSQL connection URL: {e}"),
                    })?
            }
            None => {
                let mut pg = tokio_postgres::Config::new();
                pg.host(c.host.as_deref().unwrap_or("127.0.0.1"))
                    .port(c.port.unwrap_or(5432))
                    .user(c.user.as_deref().unwrap_or("postgres"))
                    .dbname(c.database.as_deref().unwrap_or("postgres"));
                pg
            }
        };
        if let Some(pw) = read_password(c.password_env.as_deref(), c.password_file.as_deref())? {
            pg.password(pw);
        }
        pg.application_name("jetsink")
            .connect_timeout(Duration::from_millis(c.connect_timeout_ms));
        let (client, driver) = if c.tls.enabled {
            pg.ssl_mode(SslMode::Require);
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&c.tls)?);
            let (client, connection) = pg
                .connect(tls)
                .await
                .map_err(|e| classify(&e, phase, None))?;
            (client, tokio::spawn(drive(connection)))
        } else {
            pg.ssl_mode(SslMode::Disable);
            let (client, connection) = pg
                .connect(NoTls)
                .await
                .map_err(|e| classify(&e, phase, None))?;
            (client, tokio::spawn(drive(connection)))
        };
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        // Values are integers from the config, not data.
        client
            .batch_execute(&format!(
                "SET statement_timeout = {}; SET TimeZone = 'UTC'",
                c.statement_timeout_ms
            ))
            .await
            .map_err(db)?;
        Ok((client, driver))
    }

    /// Finds the table's oid, creating the default table the first time when allowed.
    async fn resolve(
        &self,
        client: &Client,
        mapping: &Mapping,
        phase: Phase,
    ) -> Result<u32, SinkError> {
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        let lookup = || async {
            client
                .query_one(schema::RESOLVE_SQL, &[&self.table_sql])
                .await
                .map(|r| r.get::<_, Option<u32>>(0))
        };
        if let Some(oid) = lookup().await.map_err(db)? {
            return Ok(oid);
        }
        let default_layout = self.config.columns.is_none() && *mapping == Mapping::default_layout();
        if phase == Phase::Write {
            return Err(SinkError::transient(format!(
                "table {} disappeared after it was opened; restore it (jetsink does not \
                 re-create it, so rows are not split across two tables)",
                self.table_sql
            )));
        }
        if !(default_layout && self.config.auto_create) {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "table {} does not exist{}",
                    self.table_sql,
                    if default_layout {
                        " and auto_create is false"
                    } else {
                        "; with `columns` the table must be created beforehand"
                    }
                ),
            });
        }
        let payload = self.config.payload_type.unwrap_or_default();
        client
            .batch_execute(&schema::create_table_sql(&self.table_sql, payload))
            .await
            .map_err(db)?;
        tracing::info!(table = %self.table_sql, "created postgres table");
        lookup().await.map_err(db)?.ok_or_else(|| {
            SinkError::transient(format!(
                "table {} vanished right after creation",
                self.table_sql
            ))
        })
    }

    fn check_payload_type(&self, plan: &TablePlan) -> Result<(), SinkError> {
        let (Some(wanted), Some(family)) = (self.config.payload_type, schema::payload_family(plan))
        else {
            return Ok(());
        };
        let fits = match wanted {
            PostgresPayloadType::Bytea => family == Family::Bytes,
            PostgresPayloadType::Jsonb => family == Family::Json,
        };
        if fits {
            Ok(())
        } else {
            Err(SinkError::Misconfigured {
                message: format!(
                    "table {}: payload_type is {:?} but the payload column's type differs",
                    self.table_sql, wanted
                )
                .to_lowercase(),
            })
        }
    }
}

/// Runs the connection, taking its asynchronous messages ourselves: awaited as a future,
/// tokio-postgres logs every server notice with its text at INFO (through `log`), and the
/// routine ones jetsink causes (`DROP TABLE IF EXISTS` of the COPY staging table: "table
/// does not exist, skipping") would fill the log. A notice's text is logged at DEBUG
/// only, since a trigger's notice may quote row data; a server WARNING is also logged at
/// WARN, by code without its text.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::StreamExt;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notice(n)) => {
                let (severity, code) = (n.severity(), n.code().code());
                if notice_is_warning(n.parsed_severity()) {
                    tracing::warn!(code, "postgres server warning (its text is logged at debug level)");
                }
                tracing::debug!(severity, code, message = n.message(), "postgres server notice");
            }
            // LISTEN notifications: jetsink subscribes to none.
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "postgres connection ended");
                return;
            }
        }
    }
}

/// Whether a server notice deserves a warning: `WARNING` does; `NOTICE`, `INFO`, `LOG`
/// and `DEBUG` are routine. `None` (a server before 9.6 sends no parsed severity) is
/// treated as routine.
pub(super) fn notice_is_warning(severity: Option<tokio_postgres::error::Severity>) -> bool {
    matches!(severity, Some(tokio_postgres::error::Severity::Warning))
}

/// Runs the insert with empty arrays: no row is written, but the executor checks the
/// table privileges the real writes need.
async fn dry_run(
    client: &Client,
    insert: &Statement,
    wires: &[Wire],
) -> Result<u64, tokio_postgres::Error> {
    let columns: Vec<super::encode::ColumnData<'_>> = wires
        .iter()
        .map(|w| super::encode::ColumnData::empty(*w))
        .collect();
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        columns.iter().map(|c| c.as_param()).collect();
    client.execute(insert, &params).await
}

/// Writes and commits one batch on `conn`.
async fn write_batch(
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

async fn read_columns(
    client: &Client,
    oid: u32,
) -> Result<(Vec<TableColumn>, Vec<String>), tokio_postgres::Error> {
    let rows = client.query(schema::COLUMNS_SQL, &[&oid]).await?;
    let mut columns = Vec::with_capacity(rows.len());
    let mut bases = Vec::with_capacity(rows.len());
    for r in rows {
        let base: String = r.get(2);
        let typtype: String = r.get(3);
        columns.push(TableColumn {
            name: r.get(0),
            type_name: r.get(1),
            family: schema::family(&base, &typtype),
            not_null: r.get(4),
            has_default: r.get(5),
            generated: r.get(6),
        });
        bases.push(base);
    }
    Ok((columns, bases))
}

async fn read_keys(client: &Client, oid: u32) -> Result<Vec<UniqueKey>, tokio_postgres::Error> {
    let rows = client.query(schema::KEYS_SQL, &[&oid]).await?;
    Ok(rows
        .into_iter()
        .map(|r| UniqueKey {
            name: r.get(0),
            primary: r.get(1),
            columns: r.get(2),
        })
        .collect())
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
        let (client, driver) = self.client(phase).await?;
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        if phase == Phase::Open {
            let row = client
                .query_one("SELECT current_setting('synchronous_commit')", &[])
                .await
                .map_err(db)?;
            let sync: String = row.get(0);
            if sync == "off" {
                tracing::warn!(destination = %self.where_(), "synchronous_commit is off for this role: a server crash can lose commits jetsink has already ACKed");
            }
        }

        let oid = self.resolve(&client, mapping, phase).await?;
        let (columns, bases) = read_columns(&client, oid).await.map_err(db)?;
        let keys = read_keys(&client, oid).await.map_err(db)?;
        let plan = plan_table(mapping, &columns, &keys, false).map_err(|problem| {
            SinkError::Misconfigured {
                message: format!("table {} cannot be used: {problem}", self.table_sql),
            }
        })?;
        self.check_payload_type(&plan)?;
        let wires: Vec<Wire> = plan
            .columns
            .iter()
            .map(|p| {
                let base = columns
                    .iter()
                    .zip(&bases)
                    .find(|(t, _)| t.name == p.name)
                    .map(|(_, b)| b.as_str())
                    .unwrap_or("");
                schema::wire(p, base)
            })
            .collect();
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
        Ok(Conn {
            client,
            driver,
            plan,
            wires,
            insert,
            copy,
        })
    }

    async fn probe(&self, mapping: &Mapping) -> Result<Probe, SinkError> {
        let phase = Phase::Open;
        let (client, driver) = self.client(phase).await?;
        let _stop = AbortOnDrop(driver);
        let db = |e: tokio_postgres::Error| classify(&e, phase, None);
        let oid = client
            .query_one(schema::RESOLVE_SQL, &[&self.table_sql])
            .await
            .map_err(db)?
            .get::<_, Option<u32>>(0);
        let Some(oid) = oid else {
            let default_layout =
                self.config.columns.is_none() && *mapping == Mapping::default_layout();
            return if default_layout && self.config.auto_create {
                Ok(Probe::WouldCreate(format!("table {}", self.table_sql)))
            } else {
                Err(SinkError::Misconfigured {
                    message: format!(
                        "table {} does not exist{}",
                        self.table_sql,
                        if default_layout {
                            " and auto_create is false"
                        } else {
                            "; with `columns` the table must be created beforehand"
                        }
                    ),
                })
            };
        };
        let (columns, _) = read_columns(&client, oid).await.map_err(db)?;
        let keys = read_keys(&client, oid).await.map_err(db)?;
        let plan = plan_table(mapping, &columns, &keys, false).map_err(|problem| {
            SinkError::Misconfigured {
                message: format!("table {} cannot be used: {problem}", self.table_sql),
            }
        })?;
        self.check_payload_type(&plan)?;
        let privilege = if self.config.mode == WriteMode::Upsert {
            "INSERT, UPDATE"
        } else {
            "INSERT"
        };
        let allowed: bool = client
            .query_one("SELECT has_table_privilege($1::oid, $2)", &[&oid, &privilege])
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
        Ok(Probe::Ready(format!(
            "table {} fits and this role may write it",
            self.table_sql
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

    fn is_closed(conn: &Conn) -> bool {
        conn.client.is_closed()
    }
}

/// Stops a connection's driver task when a short-lived client is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
