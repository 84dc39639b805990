//! [`DatabaseSink`]: the [`Sink`] skeleton every network database destination shares.
//!
//! A sink is driven by one task, one call at a time, so it holds one connection rather than
//! a pool — or, with `connections` above 1, one per run a large batch is cut into, each run
//! written on its own connection at the same time (see `spread`): the batch commits as
//! several transactions and is ACKed after the last. Connections are opened at start-up by
//! `open`, later by the first call after a failure.
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
use super::spread;
use super::util::Phase;
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, Sink, SinkError, Wanted};
use crate::sinks::database::columns::Mapping;
use crate::sinks::database::config::WriteMode;

/// A `columns` mapping that does not parse, or an upsert whose `order` or `delete` is
/// wrong: each problem with the key it is about (`columns.<column>`, `order`, ...), as
/// `<key>: <problem>`, joined by `; `. Kept until open reports it, since building a sink
/// cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.problems))]
struct ColumnsRefused {
    /// `(key under the destination, problem)` pairs.
    problems: Vec<(String, String)>,
}

fn describe(problems: &[(String, String)]) -> String {
    let texts: Vec<String> = problems.iter().map(|(k, e)| format!("{k}: {e}")).collect();
    texts.join("; ")
}

/// The mapping a sink writes by: the config's `columns` (or the jetsink layout) completed
/// with what its upsert keeps ([`super::state`]), or every problem found.
fn mapping_of(config: &impl DatabaseSettings) -> Result<Mapping, ColumnsRefused> {
    let state = config.state();
    let mut problems = state.problems();
    let mapping = match config.columns() {
        None => Some(Mapping::default_layout()),
        Some(columns) => match Mapping::parse(columns) {
            Ok(m) => Some(m),
            Err(bad) => {
                problems.extend(bad.into_iter().map(|(c, e)| {
                    let key = if c.is_empty() {
                        "columns".to_string()
                    } else {
                        format!("columns.{c}")
                    };
                    (key, e)
                }));
                None
            }
        },
    };
    match mapping {
        Some(m) if problems.is_empty() => Ok(state.complete(m)),
        _ => Err(ColumnsRefused { problems }),
    }
}

/// Writes envelopes as rows of one database table, a transaction per batch, idempotent on a
/// unique key (the jetsink layout's `idempotency_key`), through the engine's dialect `D`.
pub struct DatabaseSink<D: Dialect> {
    dialect: D,
    /// Where rows go, for log lines and error context.
    target: String,
    mode: WriteMode,
    /// What an upsert keeps, for the log line at open (`, newest by seq`).
    keeps: String,
    limits: Limits,
    /// The parsed mapping, or why it does not parse (reported at open).
    mapping: Result<Mapping, ColumnsRefused>,
    /// One slot per connection a batch may be spread over (`connections`, at least one).
    /// The first also takes every batch that is not spread, the health checks and counts.
    conns: Vec<Option<D::Conn>>,
    /// Whether an open has ever succeeded: from then on nothing is created and schema
    /// errors are outages, not configuration errors.
    opened_once: bool,
}

/// What writing on any one connection needs, borrowed from the sink while its connection
/// slots are borrowed apart, one per run of a spread batch.
struct Writer<'a, D: Dialect> {
    dialect: &'a D,
    mapping: &'a Result<Mapping, ColumnsRefused>,
    limits: Limits,
    phase: Phase,
}

impl<'a, D: Dialect> Writer<'a, D> {
    /// A writer for the sink's parts; `opened_once` decides the [`Phase`].
    fn new(
        dialect: &'a D,
        mapping: &'a Result<Mapping, ColumnsRefused>,
        limits: Limits,
        opened_once: bool,
    ) -> Writer<'a, D> {
        let phase = if opened_once {
            Phase::Write
        } else {
            Phase::Open
        };
        Writer {
            dialect,
            mapping,
            limits,
            phase,
        }
    }

    /// Connects, checks (and in [`Phase::Open`] creates) the table, and prepares statements.
    async fn connect(&self) -> Result<D::Conn, SinkError> {
        let mapping = self.mapping.clone().map_err(|e| SinkError::Misconfigured {
            message: e.to_string(),
        })?;
        let limit = self.limits.connect;
        bounded(limit, self.dialect.connect(&mapping, self.phase), || {
            format!(
                "{}: connecting and checking the table took longer than {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await
    }

    /// Writes and commits `run` on the connection in `slot`, connecting first when it has
    /// none. After a failure that is not about content, or once the connection is closed,
    /// the connection is dropped, so the next call reconnects.
    async fn write(&self, slot: &mut Option<D::Conn>, run: &[Envelope]) -> Result<(), SinkError> {
        if slot.is_none() {
            *slot = Some(self.connect().await?);
        }
        let Some(conn) = slot.as_mut() else {
            return Err(not_open::<D>());
        };
        let limit = self.limits.write;
        let result = bounded(limit, self.dialect.write(conn, run), || {
            format!(
                "{}: the batch was not committed within {} ms",
                D::NAME,
                limit.as_millis()
            )
        })
        .await;
        if let Err(e) = &result {
            let closed = slot.as_ref().is_none_or(D::is_closed);
            if closed || !matches!(e, SinkError::Permanent { .. }) {
                *slot = None;
            }
        }
        result
    }
}

fn not_open<D: Dialect>() -> SinkError {
    SinkError::transient(format!("{} connection is not open", D::NAME))
}

/// A run's error as the batch's: an index into the run becomes one into the batch.
fn in_batch(e: SinkError, start: usize) -> SinkError {
    match e {
        SinkError::Permanent {
            index: Some(i),
            message,
        } => SinkError::Permanent {
            index: Some(start + i),
            message,
        },
        other => other,
    }
}

impl<D: Dialect> DatabaseSink<D> {
    /// A sink for `config`. Does no I/O; [`Sink::open`] connects.
    pub fn new(config: D::Config) -> DatabaseSink<D> {
        let mapping = mapping_of(&config);
        let describe = config.state().describe();
        DatabaseSink {
            target: config.target(),
            mode: config.mode(),
            keeps: describe,
            limits: config.limits(D::WRITE_GRACE),
            conns: (0..config.connections().max(1)).map(|_| None).collect(),
            dialect: D::new(config),
            mapping,
            opened_once: false,
        }
    }

    /// (Re)connects slot `slot`: checks (and the first time creates) the table, and
    /// prepares statements.
    async fn connect(&mut self, slot: usize) -> Result<(), SinkError> {
        if let Some(old) = self.conns[slot].take() {
            D::retire(old);
        }
        let conn = Writer::new(&self.dialect, &self.mapping, self.limits, self.opened_once)
            .connect()
            .await
            .map_err(|e| e.with_context(&self.target))?;
        if !self.opened_once {
            let plan = D::plan(&conn);
            let mode = format!("{}{}", self.mode.as_str(), self.keeps);
            tracing::info!(destination = %self.target, mode = %mode, connections = self.conns.len(), "{} destination open", D::NAME);
            let required = plan.required_on_delete();
            if plan.deleted().is_some() && !required.is_empty() {
                tracing::warn!(destination = %self.target, columns = %required.join(", "), "a delete of a key the table does not hold yet is stored as a whole row: its message must carry values for these NOT NULL columns, or it is refused");
            }
        }
        self.conns[slot] = Some(conn);
        self.opened_once = true;
        Ok(())
    }

    async fn write(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.conns[0].is_none() {
            self.connect(0).await?;
        }
        let cut = self.conns[0]
            .as_ref()
            .is_some_and(|c| D::plan(c).keyed_by_message());
        let runs = spread::runs(batch, self.conns.len(), cut);
        // Slot 0 is open, so this is the write phase.
        let writer = Writer::new(&self.dialect, &self.mapping, self.limits, self.opened_once);
        let written = if let [_] = runs.as_slice() {
            writer.write(&mut self.conns[0], batch).await
        } else {
            let each = self
                .conns
                .iter_mut()
                .zip(&runs)
                .map(|(slot, run)| writer.write(slot, &batch[run.clone()]));
            let results = futures::future::join_all(each).await;
            runs.iter()
                .zip(results)
                .find_map(|(run, r)| r.err().map(|e| in_batch(e, run.start)))
                .map_or(Ok(()), Err)
        };
        written.map_err(|e| e.with_context(&self.target))
    }

    async fn check(&mut self) -> Result<(), SinkError> {
        let limit = self.limits.health;
        let Some(conn) = self.conns[0].as_mut() else {
            return self.connect(0).await;
        };
        let result = bounded(limit, self.dialect.ping(conn), || {
            format!("{}: health check timed out", D::NAME)
        })
        .await;
        if result.is_err() {
            self.conns[0] = None;
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
        for slot in 0..self.conns.len() {
            self.connect(slot).await?;
        }
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        self.write(batch).await
    }

    /// Two batches may commit in either order into a table keyed by the message (no two
    /// messages share a row), or with an ordered upsert (the guard, not the commit order,
    /// decides what a row keeps).
    fn commits_in_any_order(&self) -> bool {
        self.conns[0].as_ref().is_some_and(|c| {
            let plan = D::plan(c);
            plan.keyed_by_message() || plan.newest.is_some()
        })
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
        if self.conns[0].is_none() {
            self.connect(0).await?;
        }
        let conn = self.conns[0].as_mut().ok_or_else(not_open::<D>)?;
        let count = self
            .dialect
            .count_keys(conn, &key, &stream_column, stream)
            .await
            .map_err(|e| e.with_context(&self.target))?;
        Ok(Some(count))
    }

    async fn drop_table(&mut self) -> Result<(), SinkError> {
        if self.conns[0].is_none() {
            self.connect(0).await?;
        }
        let conn = self.conns[0].as_mut().ok_or_else(not_open::<D>)?;
        let limit = self.limits.connect;
        bounded(limit, self.dialect.drop_table(conn), || {
            format!("{}: dropping the table timed out", D::NAME)
        })
        .await
        .map_err(|e| e.with_context(&self.target))
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
            .field("open", &self.conns.iter().filter(|c| c.is_some()).count())
            .finish()
    }
}
