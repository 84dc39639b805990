//! The MySQL / MariaDB destination's settings and their checks; the settings it shares with
//! PostgreSQL are in [`crate::sinks::database::config`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::database::config::{
    database_keys, database_problems, default_db_connect_timeout_ms, default_statement_timeout_ms,
    default_table, describe_table, one_connection, yes, DatabaseTlsConfig, WriteMode,
};
use crate::sinks::database::state::{DeleteMarker, UpsertOrder};
use crate::sinks::database::DatabaseSettings;
use crate::sinks::settings::{DestinationSettings, NamedPath, ServerProcess};

/// The MySQL / MariaDB destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// Connection URL `mysql://user@host:port/database`, instead of `host`, `port`, `user`
    /// and `database`. It must not contain a password: use `password_env` or
    /// `password_file`. Encryption is set with `tls`.
    #[serde(default)]
    pub url: Option<String>,
    /// Server host name or address. Default `127.0.0.1`.
    #[serde(default)]
    pub host: Option<String>,
    /// Server port. Default 3306.
    #[serde(default)]
    pub port: Option<u16>,
    /// User to log in as. Default `root`.
    #[serde(default)]
    pub user: Option<String>,
    /// Database (schema) holding the table. Required, here or in `url`.
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
    /// Table name (letters, digits, `_`; not starting with a digit). Default
    /// `jetsink_events`.
    #[serde(default = "default_table")]
    pub table: String,
    /// Create the default table when it is missing (only at the first start). Not used
    /// with `columns`. Default true.
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
    /// Type of the default table's `payload` column: `blob` (default, `LONGBLOB`, any
    /// payload) or `json` (a payload that is not JSON is refused as that message's
    /// permanent error). Not used with `columns`.
    #[serde(default)]
    pub payload_type: Option<MysqlPayloadType>,
    /// Column mapping for a table of your own, as for PostgreSQL (docs/sinks/mysql.md).
    /// Default: the jetsink table layout.
    #[serde(default)]
    pub columns: Option<std::collections::BTreeMap<String, String>>,
    /// How long connecting may take, in milliseconds. Default 5000.
    #[serde(default = "default_db_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Longest a batch's write may take before it is abandoned and retried, in
    /// milliseconds. Default 30000.
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
    /// On MariaDB 10.2.7 and later, write each batch as one bulk execution of a one-row
    /// prepared `INSERT` rather than one multi-row statement: the same rows, the same
    /// single commit, and one cached statement instead of one per row count (each holding
    /// a parameter definition per placeholder). `false` writes multi-row statements, as on
    /// MySQL, which has no bulk command. Default true.
    #[serde(default = "yes")]
    pub bulk: bool,
    /// Set only by `jetsink bench` on its scratch table: the configured table the scratch
    /// one is created from at open (`CREATE TABLE … LIKE`), so a table of the user's own
    /// is measured without a row written into it. Never read from a config file.
    #[serde(skip)]
    #[schemars(skip)]
    pub copy_of: Option<String>,
}

/// Storage type of the default MySQL table's `payload` column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MysqlPayloadType {
    /// `LONGBLOB`, any payload.
    #[default]
    Blob,
    /// `JSON`; non-JSON payloads are refused.
    Json,
}

impl MysqlConfig {
    /// A stable, secret-free name of the table written to, for conflict checks and logs.
    pub fn target(&self) -> String {
        let (host, port, database) = match self.url.as_deref().map(mysql_async::Opts::from_url) {
            Some(Ok(o)) => (
                o.ip_or_hostname().to_string(),
                o.tcp_port(),
                o.db_name().unwrap_or("").to_string(),
            ),
            _ => (
                self.host.clone().unwrap_or_else(|| "127.0.0.1".into()),
                self.port.unwrap_or(3306),
                self.database.clone().unwrap_or_default(),
            ),
        };
        format!("mysql://{host}:{port}/{database} table {}", self.table)
    }
}

impl DestinationSettings for MysqlConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = database_problems(&database_keys!(self));
        match &self.url {
            Some(url) => match mysql_async::Opts::from_url(url) {
                Err(e) => out.push(("url".into(), format!("not a MySQL connection URL: {e}"))),
                Ok(o) => {
                    if o.pass().is_some() {
                        out.push((
                            "url".into(),
                            "must not contain a password: use `password_env` or `password_file`"
                                .into(),
                        ));
                    }
                    if o.db_name().is_none_or(str::is_empty) {
                        out.push((
                            "url".into(),
                            "must name the database: mysql://user@host:3306/DATABASE".into(),
                        ));
                    }
                }
            },
            None => {
                if self.database.as_deref().is_none_or(str::is_empty) {
                    out.push((
                        "database".into(),
                        "required: the database (schema) holding the table".into(),
                    ));
                }
            }
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
        MysqlConfig::target(self)
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
            names: &["mariadbd", "mysqld"],
        })
    }
}
