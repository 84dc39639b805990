//! Destination settings, one struct per destination type.
//!
//! The `destination` object is dispatched on its `type` key by hand rather than through an
//! internally tagged serde enum, because serde buffers tagged content and would lose the
//! JSON path of an error inside it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{deserialize_at, Issue};

/// Where a sink writes. Selected by `type`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DestinationConfig {
    /// An embedded SQLite database, one transaction per batch.
    Sqlite(SqliteConfig),
    /// JSON Lines files, appended and fdatasync'd once per batch.
    File(FileConfig),
    /// A PostgreSQL table, one transaction per batch.
    Postgres(PostgresConfig),
    /// A MySQL or MariaDB table, one transaction per batch.
    Mysql(MysqlConfig),
}

impl DestinationConfig {
    /// The `type` value, for summaries and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            DestinationConfig::Sqlite(_) => "sqlite",
            DestinationConfig::File(_) => "file",
            DestinationConfig::Postgres(_) => "postgres",
            DestinationConfig::Mysql(_) => "mysql",
        }
    }

    /// A short human description (no secrets) for `validate` and start-up logs.
    pub fn describe(&self) -> String {
        match self {
            DestinationConfig::Sqlite(c) => {
                format!(
                    "sqlite {} table {} (synchronous={})",
                    c.path,
                    c.table,
                    c.synchronous.pragma()
                )
            }
            DestinationConfig::File(c) => format!(
                "file {} (fsync={}, rotate_bytes={})",
                c.directory, c.fsync, c.rotate_bytes
            ),
            DestinationConfig::Postgres(c) => format!(
                "{} ({}{})",
                c.target(),
                c.mode.as_str(),
                if c.columns.is_some() {
                    ", mapped columns"
                } else {
                    ""
                }
            ),
            DestinationConfig::Mysql(c) => format!(
                "{} ({}{})",
                c.target(),
                c.mode.as_str(),
                if c.columns.is_some() {
                    ", mapped columns"
                } else {
                    ""
                }
            ),
        }
    }
}

/// Destination types a later release adds; naming one is "not supported yet", not "unknown".
const PLANNED: &[&str] = &["http", "s3", "nats"];

/// Reads a `destination` object found at `path`.
pub fn parse(path: &str, value: Value) -> Result<DestinationConfig, Issue> {
    let kind = match value.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Issue {
                path: format!("{path}.type"),
                message: format!("must be a string, got {other}"),
            })
        }
        None if value.is_object() => {
            return Err(Issue {
                path: path.to_string(),
                message: "missing `type` (one of: sqlite, file, postgres, mysql)".into(),
            })
        }
        None => {
            return Err(Issue {
                path: path.to_string(),
                message: format!("must be an object with a `type`, got {value}"),
            })
        }
    };
    let mut body = value;
    if let Some(obj) = body.as_object_mut() {
        obj.remove("type");
    }
    match kind.as_str() {
        "sqlite" => deserialize_at(path, body).map(DestinationConfig::Sqlite),
        "file" => deserialize_at(path, body).map(DestinationConfig::File),
        "postgres" => deserialize_at(path, body).map(DestinationConfig::Postgres),
        "mysql" => deserialize_at(path, body).map(DestinationConfig::Mysql),
        k if PLANNED.contains(&k) => Err(Issue {
            path: format!("{path}.type"),
            message: format!(
                "destination type `{k}` is not supported yet (supported: sqlite, file, postgres, mysql)"
            ),
        }),
        k => Err(Issue {
            path: format!("{path}.type"),
            message: format!("unknown destination type `{k}` (supported: sqlite, file, postgres, mysql)"),
        }),
    }
}

/// The embedded SQLite destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqliteConfig {
    /// Database file; its directory is created at start-up. Default `data/jetsink.db`.
    #[serde(default = "default_sqlite_path")]
    pub path: String,
    /// Table name (letters, digits, `_`; not starting with a digit), created when missing.
    /// Default `jetsink_events`.
    #[serde(default = "default_table")]
    pub table: String,
    /// SQLite `synchronous` pragma: `off`, `normal`, `full` (default) or `extra`. Only `full`
    /// and `extra` make a commit survive power loss in WAL mode.
    #[serde(default)]
    pub synchronous: SqliteSynchronous,
    /// How long a write waits for a lock held by another process, in milliseconds.
    /// Default 5000.
    #[serde(default = "default_busy_timeout_ms")]
    pub busy_timeout_ms: u64,
}

/// SQLite durability level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SqliteSynchronous {
    /// No syncs: fast, a crash of the OS can lose committed batches.
    Off,
    /// Syncs at checkpoints only: a power loss can lose the last commits.
    Normal,
    /// Syncs every commit.
    #[default]
    Full,
    /// Like `full`, and also syncs the directory.
    Extra,
}

impl SqliteSynchronous {
    /// The pragma value.
    pub fn pragma(self) -> &'static str {
        match self {
            SqliteSynchronous::Off => "OFF",
            SqliteSynchronous::Normal => "NORMAL",
            SqliteSynchronous::Full => "FULL",
            SqliteSynchronous::Extra => "EXTRA",
        }
    }
}

/// The JSON Lines file destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Directory of the `.jsonl` files; created at start-up. Default `data/events`.
    #[serde(default = "default_directory")]
    pub directory: String,
    /// fdatasync after every batch before it is ACKed. Default true; false trades
    /// durability across power loss for speed.
    #[serde(default = "yes")]
    pub fsync: bool,
    /// Start a new file once the current one reaches this size; 0 never rotates by size.
    /// Default 134217728 (128 MiB).
    #[serde(default = "default_rotate_bytes")]
    pub rotate_bytes: u64,
    /// Start a new file after this many milliseconds; 0 (default) never rotates by time.
    #[serde(default)]
    pub rotate_interval_ms: u64,
    /// File name prefix (letters, digits, `_`, `-`). Default `events`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

/// How a database destination treats a message whose key is already in the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Keep the row already there (`ON CONFLICT DO NOTHING`; MySQL: a no-op
    /// `ON DUPLICATE KEY UPDATE`). A redelivery changes nothing.
    #[default]
    InsertIgnore,
    /// Overwrite the row's other mapped columns with the newer delivery
    /// (`ON CONFLICT ... DO UPDATE`; MySQL: `ON DUPLICATE KEY UPDATE`).
    Upsert,
}

impl WriteMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMode::InsertIgnore => "insert_ignore",
            WriteMode::Upsert => "upsert",
        }
    }
}

/// TLS towards a database server (rustls).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatabaseTlsConfig {
    /// Require TLS and verify the server's certificate and host name. Default false
    /// (plain TCP, for a server on the same host or a private network).
    #[serde(default)]
    pub enabled: bool,
    /// PEM file of the certificate authorities to trust. Default: the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
}

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
    /// Batches of at least this many messages are written with binary `COPY` into a
    /// temporary table and one `INSERT ... SELECT`; smaller ones with one multi-row
    /// `INSERT`. 0 never uses `COPY`. Default 4000 (measured: below that the multi-row
    /// `INSERT` is as fast or faster).
    #[serde(default = "default_copy_threshold")]
    pub copy_threshold: u32,
    /// How long connecting may take, in milliseconds. Default 5000.
    #[serde(default = "default_db_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Longest a batch's write may take before it is abandoned and retried, in
    /// milliseconds (also the server's `statement_timeout`). Default 30000.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
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

fn default_sqlite_path() -> String {
    "data/jetsink.db".into()
}
fn default_table() -> String {
    "jetsink_events".into()
}
fn default_busy_timeout_ms() -> u64 {
    5_000
}
fn default_directory() -> String {
    "data/events".into()
}
fn yes() -> bool {
    true
}
fn default_rotate_bytes() -> u64 {
    128 * 1024 * 1024
}
fn default_prefix() -> String {
    "events".into()
}
fn default_copy_threshold() -> u32 {
    4_000
}
fn default_db_connect_timeout_ms() -> u64 {
    5_000
}
fn default_statement_timeout_ms() -> u64 {
    30_000
}

/// The settings both database destinations share, borrowed for validation.
struct DatabaseKeys<'a> {
    url: Option<&'a str>,
    keys_given: bool,
    host: Option<&'a str>,
    password_env: Option<&'a str>,
    password_file: Option<&'a str>,
    tls: &'a DatabaseTlsConfig,
    table: &'a str,
    columns: Option<&'a std::collections::BTreeMap<String, String>>,
    payload_type_given: bool,
    connect_timeout_ms: u64,
    statement_timeout_ms: u64,
}

/// `(key under the destination, message)` for every problem of the shared settings.
fn database_problems(k: &DatabaseKeys<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |key: &str, message: String| out.push((key.to_string(), message));
    if k.url.is_some() && k.keys_given {
        push(
            "url",
            "give either `url` or `host`/`port`/`user`/`database`, not both".into(),
        );
    }
    if k.host.is_some_and(|h| h.trim().is_empty()) {
        push("host", "must not be empty".into());
    }
    if k.password_env.is_some() && k.password_file.is_some() {
        push(
            "password_file",
            "give either `password_env` or `password_file`, not both".into(),
        );
    }
    if k.password_env.is_some_and(str::is_empty) {
        push("password_env", "must name an environment variable".into());
    }
    if k.password_file.is_some_and(|p| p.trim().is_empty()) {
        push("password_file", "must not be empty".into());
    }
    if k.tls.ca_file.is_some() && !k.tls.enabled {
        push("tls.ca_file", "needs `tls.enabled: true`".into());
    }
    if k.tls
        .ca_file
        .as_deref()
        .is_some_and(|p| p.trim().is_empty())
    {
        push("tls.ca_file", "must not be empty".into());
    }
    if !is_sql_identifier(k.table) {
        push(
            "table",
            format!(
                "must be letters, digits and `_`, not starting with a digit, at most 63 characters, got {:?}",
                k.table
            ),
        );
    }
    if let Some(columns) = k.columns {
        if let Err(errors) = crate::sinks::util::columns::Mapping::parse(columns) {
            for (column, message) in errors {
                if column.is_empty() {
                    push("columns", message);
                } else {
                    push(&format!("columns.{column}"), message);
                }
            }
        }
        if k.payload_type_given {
            push(
                "payload_type",
                "applies to the default table only; with `columns` the column's own type decides"
                    .into(),
            );
        }
    }
    if !(100..=600_000).contains(&k.connect_timeout_ms) {
        push(
            "connect_timeout_ms",
            format!(
                "must be between 100 and 600000, got {}",
                k.connect_timeout_ms
            ),
        );
    }
    if !(1_000..=3_600_000).contains(&k.statement_timeout_ms) {
        push(
            "statement_timeout_ms",
            format!(
                "must be between 1000 and 3600000, got {}",
                k.statement_timeout_ms
            ),
        );
    }
    out
}

fn is_sql_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    s.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl PostgresConfig {
    /// Every problem of this destination's settings as `(key, message)`; the key is
    /// relative to the destination object.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = database_problems(&DatabaseKeys {
            url: self.url.as_deref(),
            keys_given: self.host.is_some()
                || self.port.is_some()
                || self.user.is_some()
                || self.database.is_some(),
            host: self.host.as_deref(),
            password_env: self.password_env.as_deref(),
            password_file: self.password_file.as_deref(),
            tls: &self.tls,
            table: &self.table,
            columns: self.columns.as_ref(),
            payload_type_given: self.payload_type.is_some(),
            connect_timeout_ms: self.connect_timeout_ms,
            statement_timeout_ms: self.statement_timeout_ms,
        });
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
}

impl MysqlConfig {
    /// Every problem of this destination's settings as `(key, message)`; the key is
    /// relative to the destination object.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = database_problems(&DatabaseKeys {
            url: self.url.as_deref(),
            keys_given: self.host.is_some()
                || self.port.is_some()
                || self.user.is_some()
                || self.database.is_some(),
            host: self.host.as_deref(),
            password_env: self.password_env.as_deref(),
            password_file: self.password_file.as_deref(),
            tls: &self.tls,
            table: &self.table,
            columns: self.columns.as_ref(),
            payload_type_given: self.payload_type.is_some(),
            connect_timeout_ms: self.connect_timeout_ms,
            statement_timeout_ms: self.statement_timeout_ms,
        });
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
}
