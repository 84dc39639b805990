//! [`DatabaseSink`]: the [`Sink`] skeleton every network database destination shares.
//!
//! A sink is driven by one task, one call at a time, so it holds one connection rather than
//! a pool, opened lazily: at start-up by `open`, later by the first call after a failure.
//! After any failure that is not about a message's content (and after any failure once the
//! connection is closed) the connection is dropped, so the next call reconnects and checks
//! the table again instead of inheriting a half-finished transaction or a broken socket.
//! Whether an open has ever succeeded decides the [`Phase`]: from then on nothing is
//! created, and schema, login and privilege errors are outages that hold the batch, not
//! configuration errors.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use super::dialect::Dialect;
use super::locate::Query;
use super::settings::{DatabaseSettings, Limits};
use super::util::Phase;
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, Sink, SinkError, Wanted};
use crate::sinks::database::columns::Mapping;
use crate::sinks::database::config::WriteMode;

/// A `columns` mapping that does not parse: each problem with the column it is about, as
/// `columns.<column>: <problem>`, joined by `; `. Kept until open reports it, since
/// building a sink cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.problems))]
struct ColumnsRefused {
    /// `(column, problem)` pairs, as [`Mapping::parse`] gives them.
    problems: Vec<(String, String)>,
}

fn describe(problems: &[(String, String)]) -> String {
    let texts: Vec<String> = problems
        .iter()
        .map(|(c, e)| format!("columns.{c}: {e}"))
        .collect();
    texts.join("; ")
}

/// Writes envelopes as rows of one database table, a transaction per batch, idempotent on a
/// unique key (the jetsink layout's `idempotency_key`), through the engine's dialect `D`.
pub struct DatabaseSink<D: Dialect> {
    dialect: D,
    /// Where rows go, for log lines and error context.
    target: String,
    mode: WriteMode,
    limits: Limits,
    /// The parsed mapping, or why it does not parse (reported at open).
    mapping: Result<Mapping, ColumnsRefused>,
    conn: Option<D::Conn>,
    /// Whether an open has ever succeeded: from then on nothing is created and schema
    /// errors are outages, not configuration errors.
    opened_once: bool,
}

impl<D: Dialect> DatabaseSink<D> {
    /// A sink for `config`. Does no I/O; [`Sink::open`] connects.
    pub fn new(config: D::Config) -> DatabaseSink<D> {
        let mapping = match config.columns() {
            None => Ok(Mapping::default_layout()),
            Some(columns) => {
                Mapping::parse(columns).map_err(|problems| ColumnsRefused { problems })
            }
        };
        DatabaseSink {
            target: config.target(),
            mode: config.mode(),
            limits: config.limits(D::WRITE_GRACE),
            dialect: D::new(config),
            mapping,
            conn: None,
            opened_once: false,
        }
    }

    fn phase(&self) -> Phase {
        if self.opened_once {
            Phase::Write
        } else {
            Phase::Open
        }
    }

    fn not_open() -> SinkError {
        SinkError::transient(format!("{} connection is not open", D::NAME))
    }

    /// Connects, checks (and the first time creates) the table, and prepares statements.
    async fn connect(&mut self) -> Result<(), SinkError> {
        if let Some(old) = self.conn.take() {
            D::retire(old);
        }
        let phase = self.phase();
        let mapping = self.mapping.clone().map_err(|e| SinkError::Misconfigured {
            message: e.to_string(),
        })?;
        let limit = self.limits.connect;
        let conn = bounded(limit, self.dialect.connect(&mapping, phase), || {
            format!(
                "{}: connecting and checking the table took longer than {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await
        .map_err(|e| e.with_context(&self.target))?;
        self.conn = Some(conn);
        if !self.opened_once {
            tracing::info!(destination = %self.target, mode = self.mode.as_str(), "{} destination open", D::NAME);
        }
        self.opened_once = true;
        Ok(())
    }

    async fn write(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.conn.is_none() {
            self.connect().await?;
        }
        let limit = self.limits.write;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Self::not_open());
        };
        let result = bounded(limit, self.dialect.write(conn, batch), || {
            format!(
                "{}: the batch was not committed within {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await;
        if let Err(e) = &result {
            let closed = self.conn.as_ref().is_none_or(D::is_closed);
            if closed || !matches!(e, SinkError::Permanent { .. }) {
                self.conn = None;
            }
        }
        result.map_err(|e| e.with_context(&self.target))
    }

    async fn check(&mut self) -> Result<(), SinkError> {
        let limit = self.limits.health;
        let Some(conn) = self.conn.as_mut() else {
            return self.connect().await;
        };
        let result = bounded(limit, self.dialect.ping(conn), || {
            format!("{}: health check timed out", D::NAME)
        })
        .await;
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(|e| e.with_context(&self.target))
    }
}

/// Runs `call` for at most `limit`; past it the call is dropped and the error is transient,
/// with the message `late` gives.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, SinkError>>,
    late: impl FnOnce() -> String,
) -> Result<T, SinkError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(SinkError::transient(late())))
}

#[async_trait]
impl<D: Dialect> Sink for DatabaseSink<D> {
    async fn open(&mut self) -> Result<(), SinkError> {
        self.connect().await
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        self.write(batch).await
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        self.check().await
    }

    async fn probe(&mut self) -> Result<Probe, SinkError> {
        let mapping = self.mapping.clone().map_err(|e| SinkError::Misconfigured {
            message: e.to_string(),
        })?;
        let limit = self.limits.connect;
        bounded(limit, self.dialect.probe(&mapping), || {
            format!(
                "{}: connecting and checking the table took longer than {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await
        .map_err(|e| e.with_context(&self.target))
    }

    async fn stored_keys(&mut self, stream: &str) -> Result<Option<u64>, SinkError> {
        let columns = self.mapping.as_ref().ok();
        let Some((key, stream_column)) = columns.and_then(Mapping::key_and_stream_columns) else {
            return Ok(None);
        };
        let (key, stream_column) = (key.to_string(), stream_column.to_string());
        if self.conn.is_none() {
            self.connect().await?;
        }
        let conn = self.conn.as_mut().ok_or_else(Self::not_open)?;
        let count = self
            .dialect
            .count_keys(conn, &key, &stream_column, stream)
            .await
            .map_err(|e| e.with_context(&self.target))?;
        Ok(Some(count))
    }

    async fn locate(&mut self, stream: &str, wanted: Wanted<'_>) -> Result<Located, SinkError> {
        let mapping = match &self.mapping {
            Ok(mapping) => mapping,
            Err(e) => return Ok(Located::CannotAsk(format!("{}: {e}", self.target))),
        };
        let query = match Query::new(mapping, wanted) {
            Ok(query) => query,
            Err(why) => return Ok(Located::CannotAsk(why)),
        };
        let limit = self.limits.connect;
        bounded(limit, self.dialect.locate(&query, stream), || {
            format!(
                "{}: looking the message up took longer than {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await
        .map_err(|e| e.with_context(&self.target))
    }
}

impl<D: Dialect> std::fmt::Debug for DatabaseSink<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSink")
            .field("engine", &D::NAME)
            .field("target", &self.target)
            .field("open", &self.conn.is_some())
            .finish()
    }
}
