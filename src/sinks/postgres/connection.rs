//! A PostgreSQL connection as jetsink holds one: connected (TLS or not) with the session
//! settings every write relies on, its driver task taking the server's notices, and what
//! was prepared on it after the table check.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls, Statement};

use super::classify::classify;
use super::config::PostgresConfig;
use super::schema::Wire;
use super::tls::tls_config;
use crate::sinks::contract::SinkError;
use crate::sinks::database::columns::TablePlan;
use crate::sinks::database::util::{read_password, Phase};

/// A live connection and what was prepared on it.
pub struct Conn {
    pub(super) client: Client,
    pub(super) driver: JoinHandle<()>,
    pub(super) plan: TablePlan,
    pub(super) wires: Vec<Wire>,
    pub(super) insert: Statement,
    /// `COPY` and the `INSERT ... SELECT` from the staging table; `None` when `COPY` is
    /// disabled or the role may not create temporary tables.
    pub(super) copy: Option<(Statement, Statement)>,
    /// Binary `COPY` straight into the table, and the wire of each column in it; `None`
    /// in upsert mode, when `COPY` is disabled, when a column would need a cast, or after
    /// the table refused it.
    pub(super) direct: Option<(Statement, Vec<Wire>)>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A connected client (and its driver task) with the statement timeout and UTC set.
pub(super) async fn connect_client(
    c: &PostgresConfig,
    phase: Phase,
) -> Result<(Client, JoinHandle<()>), SinkError> {
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
                    tracing::warn!(
                        code,
                        "postgres server warning (its text is logged at debug level)"
                    );
                }
                tracing::debug!(
                    severity,
                    code,
                    message = n.message(),
                    "postgres server notice"
                );
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

/// Stops a connection's driver task when a short-lived client is dropped.
pub(super) struct AbortOnDrop(pub(super) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
