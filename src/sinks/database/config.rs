//! The settings the database destinations (PostgreSQL, MySQL/MariaDB) share: write mode,
//! TLS, connection keys, identifier rules and timeouts, with the checks they share (the
//! checks of an upsert's `order` and `delete` are [`super::state`]'s).
//!
//! Each database's own config (`sinks/postgres/config.rs`, `sinks/mysql/config.rs`) adds
//! what only it has and runs [`database_problems`] first, so both report the same mistake
//! with the same words at the same key.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::columns::Mapping;
use super::state::State;
pub use super::state::WriteMode;

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
    /// PEM file of the client certificate (chain) presented to a server that asks for one
    /// (PostgreSQL `cert` authentication, MySQL `REQUIRE X509`). Given with `key_file`.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1). Read at
    /// every connect, never logged. Given with `cert_file`.
    #[serde(default)]
    pub key_file: Option<String>,
}

/// The files a database destination reads: its password file and TLS files.
pub(crate) fn read_paths(
    password_file: Option<&String>,
    tls: &DatabaseTlsConfig,
) -> Vec<crate::sinks::settings::NamedPath> {
    use crate::sinks::settings::NamedPath;
    [
        NamedPath::read("password_file", password_file),
        NamedPath::read("tls.ca_file", tls.ca_file.as_ref()),
        NamedPath::read("tls.cert_file", tls.cert_file.as_ref()),
        NamedPath::read("tls.key_file", tls.key_file.as_ref()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The default table name of every database destination.
pub(crate) fn default_table() -> String {
    "jetsink_events".into()
}
pub(crate) fn yes() -> bool {
    true
}
pub(crate) fn default_db_connect_timeout_ms() -> u64 {
    5_000
}
pub(crate) fn default_statement_timeout_ms() -> u64 {
    30_000
}

/// The table a bench's scratch table is copied from (`copy_of`): none where jetsink
/// creates its own layout (no `columns`, `auto_create` on), else the configured `table`,
/// which is the user's own.
pub(crate) fn scratch_copy_of(mapped: bool, auto_create: bool, table: &str) -> Option<String> {
    (mapped || !auto_create).then(|| table.to_string())
}

/// How `validate` and the start-up log describe a database destination: its target, the
/// write mode, whether the table is the user's own (mapped columns), and for an upsert
/// what decides the newest message of a key and what deletes one.
pub(crate) fn describe_table(target: String, state: &State<'_>) -> String {
    format!(
        "{} ({}{}{})",
        target,
        state.mode.as_str(),
        if state.columns.is_some() {
            ", mapped columns"
        } else {
            ""
        },
        state.describe()
    )
}

/// The host a database destination connects to: `host`, the host of `url`, or the local
/// default (pure; for tools that look for the server's processes).
pub(crate) fn server_host(url: Option<&str>, host: Option<&str>) -> String {
    if let Some(h) = host {
        return h.to_string();
    }
    let Some(url) = url else {
        return "localhost".into();
    };
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        "localhost".into()
    } else {
        host.to_string()
    }
}

/// The settings both database destinations share, borrowed for validation.
pub(crate) struct DatabaseKeys<'a> {
    pub(crate) url: Option<&'a str>,
    pub(crate) keys_given: bool,
    pub(crate) host: Option<&'a str>,
    pub(crate) password_env: Option<&'a str>,
    pub(crate) password_file: Option<&'a str>,
    pub(crate) tls: &'a DatabaseTlsConfig,
    pub(crate) table: &'a str,
    pub(crate) columns: Option<&'a BTreeMap<String, String>>,
    pub(crate) state: State<'a>,
    pub(crate) payload_type_given: bool,
    pub(crate) connect_timeout_ms: u64,
    pub(crate) statement_timeout_ms: u64,
    pub(crate) connections: u32,
}

/// Borrows the shared settings of a database config (`self` in a `problems` method):
/// PostgreSQL and MySQL name these fields alike, so one expansion serves both.
macro_rules! database_keys {
    ($c:expr) => {
        $crate::sinks::database::config::DatabaseKeys {
            url: $c.url.as_deref(),
            keys_given: $c.host.is_some()
                || $c.port.is_some()
                || $c.user.is_some()
                || $c.database.is_some(),
            host: $c.host.as_deref(),
            password_env: $c.password_env.as_deref(),
            password_file: $c.password_file.as_deref(),
            tls: &$c.tls,
            table: &$c.table,
            columns: $c.columns.as_ref(),
            state: $crate::sinks::database::state::State {
                mode: $c.mode,
                columns: $c.columns.as_ref(),
                order: $c.order.as_ref(),
                delete: $c.delete.as_ref(),
            },
            payload_type_given: $c.payload_type.is_some(),
            connect_timeout_ms: $c.connect_timeout_ms,
            statement_timeout_ms: $c.statement_timeout_ms,
            connections: $c.connections,
        }
    };
}
pub(crate) use database_keys;

/// `(key under the destination, message)` for every problem of the shared settings.
pub(crate) fn database_problems(k: &DatabaseKeys<'_>) -> Vec<(String, String)> {
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
    for (key, file) in [
        ("tls.ca_file", &k.tls.ca_file),
        ("tls.cert_file", &k.tls.cert_file),
        ("tls.key_file", &k.tls.key_file),
    ] {
        if file.is_some() && !k.tls.enabled {
            push(key, "needs `tls.enabled: true`".into());
        }
        if file.as_deref().is_some_and(|p| p.trim().is_empty()) {
            push(key, "must not be empty".into());
        }
    }
    match (&k.tls.cert_file, &k.tls.key_file) {
        (Some(_), None) => push(
            "tls.key_file",
            "a client certificate (`tls.cert_file`) needs its private key here".into(),
        ),
        (None, Some(_)) => push(
            "tls.cert_file",
            "a private key (`tls.key_file`) needs its client certificate here".into(),
        ),
        _ => {}
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
        if let Err(errors) = Mapping::parse(columns) {
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
    if !(1..=MAX_CONNECTIONS).contains(&k.connections) {
        push(
            "connections",
            format!(
                "must be between 1 and {MAX_CONNECTIONS}, got {}",
                k.connections
            ),
        );
    }
    out.extend(k.state.problems());
    out
}

/// Most connections one database sink spreads a batch over.
pub(crate) const MAX_CONNECTIONS: u32 = 16;

pub(crate) fn one_connection() -> u32 {
    1
}

pub(crate) fn is_sql_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    s.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
