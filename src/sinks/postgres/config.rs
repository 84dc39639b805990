//! The PostgreSQL destination's settings and their checks; the settings it shares with
//! MySQL are in [`crate::sinks::database::config`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::database::config::{
    database_keys, database_problems, default_db_connect_timeout_ms, default_statement_timeout_ms,
    default_table, describe_table, is_sql_identifier, one_connection, yes, DatabaseTlsConfig,
    WriteMode,
};
use crate::sinks::database::state::{DeleteMarker, UpsertOrder};
use crate::sinks::database::DatabaseSettings;
use crate::sinks::settings::{DestinationSettings, NamedPath, ServerProcess};

/// The PostgreSQL destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connection URL `postgres://user@host:port/database`, instead of `host`, `port`,
    /// `user` and `database`. It must not contain a password: use `password_env` or
    /// `password_file`. Encryption is set with `tls`, not `sslmode`.
    #[serde(default)]
    pub url: Option<String>,
    /// Server host name or address. Default `127.0.0.1`.
    #[serde(default)]
    pub host: Option<String>,
    /// Server port. Default 5432.
    #[serde(default)]
    pub port: Option<u16>,
    /// Role to log in as. Default `postgres`.
    #[serde(default)]
    pub user: Option<String>,
    /// Database name. Default `postgres`.
    #[serde(default)]
    pub database: Option<String>,
    /// Environment variable holding the password. Read at every connect, never logged.
    #[serde(default)]
    pub password_env: Option<String>,
    /// File holding the password (a trailing newline is ignored). Read at every connect.
    #[serde(default)]
    pub password_file: Option<String>,
    /// TLS settings. Default: no TLS.
    #[serde(default)]
    pub tls: DatabaseTlsConfig,
    /// Schema of the table. Default: the first schema of the role's `search_path`
    /// (normally `public`).
    #[serde(default)]
    pub schema: Option<String>,
    /// Table name (letters, digits, `_`; not starting with a digit; used exactly as
    /// written). Default `jetsink_events`.
    #[serde(default = "default_table")]
    pub table: String,
    /// Create the default table when it is missing (only at the first start: a table that
    /// disappears later is waited for, not re-created). Not used with `columns`, whose table
    /// must exist. Default true.
    #[serde(default = "yes")]
    pub auto_create: bool,
    /// `insert_ignore` (default) or `upsert`.
    #[serde(default)]
    pub mode: WriteMode,
    /// Upsert only: which message of a key is the newest, the only one that may replace
    /// the row. Default: the column mapped from `$stream_sequence`; `{"column": NAME}` a
    /// mapped column the producer orders by (a version, an event time); `"arrival"` lets
    /// the last write win. An upsert with none of them is refused.
    #[serde(default)]
    pub order: Option<UpsertOrder>,
    /// Upsert with `columns` only: a message that deletes its key (a header or payload
    /// value), kept as a tombstone: `column` gets the delete's time and the order column
    /// its order, so an older update arriving later does not bring the row back.
    #[serde(default)]
    pub delete: Option<DeleteMarker>,
    /// Type of the default table's `payload` column: `bytea` (default, any payload) or
    /// `jsonb` (JSON payloads stored natively; a payload that is not JSON is refused as
    /// that message's permanent error). Not used with `columns`.
    #[serde(default)]
    pub payload_type: Option<PostgresPayloadType>,
    /// Column mapping for a table of your own: column name → a JSON pointer into the
    /// payload (`/order/id`) or an envelope field (`$subject`, `$stream_sequence`, ...; see
    /// docs/sinks/postgres.md). Types are checked against the table at start-up. Default:
    /// the jetsink table layout.
    #[serde(default)]
    pub columns: Option<std::collections::BTreeMap<String, String>>,
    /// Where `direct_copy` does not apply (upsert mode, a column that needs a cast),
    /// batches of at least this many messages are written with binary `COPY` into a
    /// temporary table and one `INSERT ... SELECT`; smaller ones with one multi-row
    /// `INSERT`. 0 never uses `COPY`. Default 4000 (measured: below that the multi-row
    /// `INSERT` is as fast or faster).
    #[serde(default = "default_copy_threshold")]
    pub copy_threshold: u32,
    /// In `insert_ignore` mode, into a table whose mapped columns have exactly the types
    /// jetsink sends (the default table does; a JSON pointer into a `bigint` column does in
    /// every batch whose values there are all plain integers): every batch of two or more
    /// messages is written with one binary `COPY` straight into the table, in autocommit,
    /// whatever `copy_threshold` says; a batch holding a row already stored (a redelivery)
    /// is then written again with the multi-row `INSERT ... ON CONFLICT DO NOTHING`. Measured about
    /// half the server's CPU per row of the `INSERT`. `COPY` ignores the table's rules
    /// (`CREATE RULE`), not its triggers: set `false` for a table that relies on a rule.
    /// `copy_threshold: 0` turns it off too. Default `true`.
    #[serde(default = "yes")]
    pub direct_copy: bool,
    /// How long connecting may take, in milliseconds. Default 5000.
    #[serde(default = "default_db_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Longest a batch's write may take before it is abandoned and retried, in
    /// milliseconds (also the server's `statement_timeout`). Default 30000.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// Connections one batch is spread over: from 2, a batch of at least 128 messages is
    /// cut into that many runs, each written and committed on its own connection at the
    /// same time, and the batch is ACKed once every run has committed. Rows of one batch
    /// may then become visible in two or more steps; batches still follow one another.
    /// A batch is written on one connection anyway when its table's unique key comes from
    /// anything but `$idempotency_key`, `$stream` and `$stream_sequence`, or when one
    /// idempotency key appears twice in it. 1 to 16. Default 1.
    #[serde(default = "one_connection")]
    pub connections: u32,
    /// Set only by `jetsink bench` on its scratch table: the configured table the scratch
    /// one is created from at open (`CREATE TABLE … LIKE`), so a table of the user's own
    /// is measured without a row written into it. Never read from a config file.
    #[serde(skip)]
    #[schemars(skip)]
    pub copy_of: Option<String>,
}

/// Storage type of the default PostgreSQL table's `payload` column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PostgresPayloadType {
    /// Raw bytes, any payload.
    #[default]
    Bytea,
    /// Parsed JSON; non-JSON payloads are refused.
    Jsonb,
}

impl PostgresConfig {
    /// A stable, secret-free name of the table written to, for conflict checks and logs.
    pub fn target(&self) -> String {
        let (host, port, database) = match self
            .url
            .as_deref()
            .map(str::parse::<tokio_postgres::Config>)
        {
            Some(Ok(c)) => (
                c.get_hosts()
                    .first()
                    .map(|h| match h {
                        tokio_postgres::config::Host::Tcp(h) => h.clone(),
                        #[cfg(unix)]
                        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                    })
                    .unwrap_or_else(|| "localhost".into()),
                c.get_ports().first().copied().unwrap_or(5432),
                c.get_dbname()
                    .or(c.get_user())
                    .unwrap_or("postgres")
                    .to_string(),
            ),
            _ => (
                self.host.clone().unwrap_or_else(|| "127.0.0.1".into()),
                self.port.unwrap_or(5432),
                self.database.clone().unwrap_or_else(|| "postgres".into()),
            ),
        };
        let schema = self.schema.as_deref().unwrap_or("(search_path)");
        format!(
            "postgres://{host}:{port}/{database} table {schema}.{}",
            self.table
        )
    }
}

impl DestinationSettings for PostgresConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = database_problems(&database_keys!(self));
        if let Some(url) = &self.url {
            match url.parse::<tokio_postgres::Config>() {
                Err(e) => out.push((
                    "url".into(),
                    format!("not a PostgreSQL connection URL: {e}"),
                )),
                Ok(c) => {
                    if c.get_password().is_some() {
                        out.push((
                            "url".into(),
                            "must not contain a password: use `password_env` or `password_file`"
                                .into(),
                        ));
                    }
                    if c.get_ssl_mode() == tokio_postgres::config::SslMode::Require
                        && !self.tls.enabled
                    {
                        out.push((
                            "url".into(),
                            "sslmode=require needs `tls.enabled: true` (jetsink sets TLS from `tls`)"
                                .into(),
                        ));
                    }
                }
            }
        }
        if let Some(s) = &self.schema {
            if !is_sql_identifier(s) {
                out.push((
                    "schema".into(),
                    format!(
                        "must be letters, digits and `_`, not starting with a digit, got {s:?}"
                    ),
                ));
            }
        }
        if self.database.as_deref().is_some_and(str::is_empty) {
            out.push(("database".into(), "must not be empty".into()));
        }
        out
    }

    /// The password file and TLS files are read.
    fn paths(&self) -> Vec<NamedPath> {
        crate::sinks::database::config::read_paths(self.password_file.as_ref(), &self.tls)
    }

    fn describe(&self) -> String {
        describe_table(self.target(), &self.state())
    }

    fn target(&self) -> String {
        PostgresConfig::target(self)
    }

    fn writes_batches_at_once(&self) -> bool {
        true
    }

    fn last_write_wins(&self) -> bool {
        self.state().last_write_wins()
    }

    /// jetsink's own layout is created as at a first start; a table of the user's own (a
    /// column mapping, or `auto_create` off) is copied with `LIKE` at open.
    fn with_scratch_table(&self, table: &str) -> Option<Self> {
        Some(Self {
            table: table.to_string(),
            copy_of: crate::sinks::database::config::scratch_copy_of(
                self.columns.is_some(),
                self.auto_create,
                &self.table,
            ),
            ..self.clone()
        })
    }

    fn server(&self) -> Option<ServerProcess> {
        Some(ServerProcess {
            host: crate::sinks::database::config::server_host(
                self.url.as_deref(),
                self.host.as_deref(),
            ),
            names: &["postgres"],
        })
    }
}

fn default_copy_threshold() -> u32 {
    4_000
}
