//! The top-level `api` section: the synchronous HTTP job API (docs/job-queue.md, "HTTP
//! API"). Opt-in: without the section no API listener exists.
//!
//! A leaf beside `results`: validation and the API server both read it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::http::Limits;
use crate::shared::issue::Issue;
use crate::shared::nats_security::SecretSource;

/// The job API listener.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Address and port of the API, separate from `http.listen`. Default
    /// `127.0.0.1:9465` (loopback). A non-loopback address needs a token.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Environment variable holding the bearer token every request must carry
    /// (`Authorization: Bearer <token>`). Give at most one of `token_env`, `token_file`.
    #[serde(default)]
    pub token_env: Option<String>,
    /// File holding the bearer token (its content without the trailing line break).
    #[serde(default)]
    pub token_file: Option<String>,
    /// Largest request body (the job's payload), in bytes; larger is refused with 413.
    /// Default 1048576, at most 67108864.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Most requests waiting for a result at once, over every sink; one more is refused
    /// with 429. Default 10000.
    #[serde(default = "default_max_waiting")]
    pub max_waiting: usize,
    /// How long a submission waits for its result when the request names no
    /// `?timeout_ms=`, in milliseconds. Default 30000.
    #[serde(default = "default_timeout_ms")]
    pub default_timeout_ms: u64,
    /// The longest wait a request may ask for with `?timeout_ms=`; longer asks are cut
    /// to it. Default 120000, at most 600000.
    #[serde(default = "default_max_timeout_ms")]
    pub max_timeout_ms: u64,
    /// Most connections open at once; more wait in the accept queue. Default 4096, at most
    /// 1000000. Keep it, with `http.max_connections`, below the process's open-file limit
    /// (`LimitNOFILE`), which jetsink raises to its hard limit at start.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections the kernel queues for accepting beyond `max_connections` (the listen
    /// backlog, capped by `net.core.somaxconn`). Default 1024, at most 65535.
    #[serde(default = "default_accept_backlog")]
    pub accept_backlog: u32,
    /// How long a request's head may take to arrive, counted from the accept on a new
    /// connection and from the previous answer on a kept-alive one. Default 10000, 100 to
    /// 600000.
    #[serde(default = "super::http::default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// How long a kept-alive connection may wait for its next request. Default 5000, 100
    /// to `header_read_timeout_ms`.
    #[serde(default = "super::http::default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How long a request's body may take to arrive in full, once its head has; a slower
    /// one is answered 408. Default 30000, 100 to 600000.
    #[serde(default = "default_body_read_timeout_ms")]
    pub body_read_timeout_ms: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: default_listen(),
            token_env: None,
            token_file: None,
            max_body_bytes: default_max_body_bytes(),
            max_waiting: default_max_waiting(),
            default_timeout_ms: default_timeout_ms(),
            max_timeout_ms: default_max_timeout_ms(),
            max_connections: default_max_connections(),
            accept_backlog: default_accept_backlog(),
            header_read_timeout_ms: super::http::default_header_read_timeout_ms(),
            idle_timeout_ms: super::http::default_idle_timeout_ms(),
            body_read_timeout_ms: default_body_read_timeout_ms(),
        }
    }
}

impl ApiConfig {
    /// The limits the listener runs with.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            accept_backlog: self.accept_backlog,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
        }
    }

    /// Where the token is, if the API asks for one.
    pub fn token(&self) -> Option<SecretSource> {
        self.token_env
            .as_ref()
            .map(|v| SecretSource::Env(v.clone()))
            .or(self
                .token_file
                .as_ref()
                .map(|p| SecretSource::File(PathBuf::from(p))))
    }
}

fn default_listen() -> String {
    "127.0.0.1:9465".into()
}
fn default_max_body_bytes() -> usize {
    1_048_576
}
fn default_max_waiting() -> usize {
    10_000
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_timeout_ms() -> u64 {
    120_000
}
fn default_max_connections() -> usize {
    4_096
}
fn default_accept_backlog() -> u32 {
    1_024
}
fn default_body_read_timeout_ms() -> u64 {
    30_000
}

/// The largest `max_body_bytes` accepted (NATS' own hard limit on a payload).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Checks the `api` section.
pub fn validate(cfg: &ApiConfig) -> Vec<Issue> {
    let mut out = Vec::new();
    let mut push = |key: &str, message: String| {
        out.push(Issue {
            path: format!("api.{key}"),
            message,
        })
    };
    match cfg.listen.parse::<SocketAddr>() {
        Err(_) => push(
            "listen",
            format!(
                "must be an address:port such as 127.0.0.1:9465, got {:?}",
                cfg.listen
            ),
        ),
        Ok(a) if !a.ip().is_loopback() && cfg.token().is_none() => push(
            "listen",
            format!(
                "{} is reachable from other hosts: set api.token_env or api.token_file, or listen on a loopback address",
                cfg.listen
            ),
        ),
        Ok(_) => {}
    }
    if cfg.token_env.is_some() && cfg.token_file.is_some() {
        push(
            "token_file",
            "give either `token_env` or `token_file`, not both".into(),
        );
    }
    if cfg.token_env.as_deref().is_some_and(str::is_empty) {
        push("token_env", "must name an environment variable".into());
    }
    if cfg.token_file.as_deref().is_some_and(str::is_empty) {
        push("token_file", "must name a file".into());
    }
    if !(1..=MAX_BODY_BYTES).contains(&cfg.max_body_bytes) {
        push(
            "max_body_bytes",
            format!(
                "must be between 1 and {MAX_BODY_BYTES}, got {}",
                cfg.max_body_bytes
            ),
        );
    }
    if !(1..=1_000_000).contains(&cfg.max_waiting) {
        push(
            "max_waiting",
            format!("must be between 1 and 1000000, got {}", cfg.max_waiting),
        );
    }
    if !(1..=600_000).contains(&cfg.max_timeout_ms) {
        push(
            "max_timeout_ms",
            format!("must be between 1 and 600000, got {}", cfg.max_timeout_ms),
        );
    }
    if !(100..=600_000).contains(&cfg.body_read_timeout_ms) {
        push(
            "body_read_timeout_ms",
            format!(
                "must be between 100 and 600000, got {}",
                cfg.body_read_timeout_ms
            ),
        );
    }
    if cfg.default_timeout_ms == 0 || cfg.default_timeout_ms > cfg.max_timeout_ms {
        push(
            "default_timeout_ms",
            format!(
                "must be between 1 and max_timeout_ms ({}), got {}",
                cfg.max_timeout_ms, cfg.default_timeout_ms
            ),
        );
    }
    out.extend(super::http::check_limits("api", &cfg.limits()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> ApiConfig {
        serde_json::from_str(json).unwrap()
    }

    fn paths(c: &ApiConfig) -> Vec<String> {
        validate(c).into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn defaults_listen_on_loopback_without_a_token() {
        let c = cfg("{}");
        assert_eq!(c, ApiConfig::default());
        assert_eq!(c.listen, "127.0.0.1:9465");
        assert!(c.token().is_none());
        assert!(validate(&c).is_empty());
        assert!(validate(&cfg(r#"{"listen":"[::1]:9465"}"#)).is_empty());
    }

    #[test]
    fn a_non_loopback_listen_needs_a_token() {
        let open = cfg(r#"{"listen":"0.0.0.0:9465"}"#);
        let issues = validate(&open);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].path, "api.listen");
        assert!(issues[0].message.contains("token_env"), "{}", issues[0]);
        assert!(validate(&cfg(r#"{"listen":"0.0.0.0:9465","token_env":"T"}"#)).is_empty());
        assert_eq!(
            cfg(r#"{"token_file":"/etc/t"}"#).token(),
            Some(SecretSource::File("/etc/t".into()))
        );
    }

    #[test]
    fn bad_values_are_named_by_path() {
        let c = cfg(
            r#"{"listen":"nowhere","token_env":"A","token_file":"b","max_body_bytes":0,
                "max_waiting":0,"default_timeout_ms":5000,"max_timeout_ms":1000}"#,
        );
        let p = paths(&c);
        for want in [
            "api.listen",
            "api.token_file",
            "api.max_body_bytes",
            "api.max_waiting",
            "api.default_timeout_ms",
        ] {
            assert!(p.iter().any(|x| x == want), "{want} in {p:?}");
        }
        assert!(paths(&cfg(r#"{"max_timeout_ms":0}"#)).contains(&"api.max_timeout_ms".into()));
    }
}
