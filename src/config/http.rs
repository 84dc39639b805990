//! The `http` section (the `/metrics`, `/healthz` and `/readyz` endpoint) and the limits
//! every HTTP listener of jetsink has, this one and the job API's (`api`).
//!
//! A listener is reachable by anyone who can open a TCP connection to it, with or
//! without a token, so its limits are not optional: a head that must arrive within
//! `header_read_timeout_ms`, a kept-alive connection closed after `idle_timeout_ms`
//! without a request, at most `max_connections` open at once, and an accept queue of
//! `accept_backlog` in the kernel beyond that. The defaults are safe for a daemon's own
//! endpoints; `src/listener.rs` applies them through hyper's own connection builder.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::issue::Issue;

/// The `/metrics`, `/healthz` and `/readyz` endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Serve the endpoint at all. Default true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Address and port to listen on. Default `127.0.0.1:9464`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Most connections open at once; more wait in the accept queue. Default 256, at most
    /// 1000000.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections the kernel queues for accepting beyond `max_connections` (the listen
    /// backlog, capped by `net.core.somaxconn`). Default 128, at most 65535.
    #[serde(default = "default_accept_backlog")]
    pub accept_backlog: u32,
    /// How long a request's head (request line and headers) may take to arrive, counted
    /// from when the server starts waiting for it: from the accept on a new connection,
    /// from the previous answer on a kept-alive one. A slower client is disconnected.
    /// Default 10000, 100 to 600000.
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// How long a kept-alive connection may wait for its next request before it is
    /// closed. Default 5000, 100 to `header_read_timeout_ms` (whose timer also runs while
    /// a connection waits for its next request).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: true,
            listen: default_listen(),
            max_connections: default_max_connections(),
            accept_backlog: default_accept_backlog(),
            header_read_timeout_ms: default_header_read_timeout_ms(),
            idle_timeout_ms: default_idle_timeout_ms(),
        }
    }
}

impl HttpConfig {
    /// The limits the listener runs with.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            accept_backlog: self.accept_backlog,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
        }
    }
}

/// The limits of one HTTP listener, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections served at once.
    pub max_connections: usize,
    /// The listen backlog.
    pub accept_backlog: u32,
    /// The head of each request must be complete within this.
    pub header_read_timeout: Duration,
    /// A kept-alive connection without a request for this long is closed.
    pub idle_timeout: Duration,
}

fn yes() -> bool {
    true
}
fn default_listen() -> String {
    "127.0.0.1:9464".into()
}
fn default_max_connections() -> usize {
    256
}
fn default_accept_backlog() -> u32 {
    128
}
/// The head timeout of both listeners by default.
pub(crate) fn default_header_read_timeout_ms() -> u64 {
    10_000
}
/// The idle timeout of both listeners by default.
pub(crate) fn default_idle_timeout_ms() -> u64 {
    5_000
}

/// Checks one listener's limits in `section` (`http` or `api`).
pub fn check_limits(section: &str, l: &Limits) -> Vec<Issue> {
    let mut out = Vec::new();
    let mut push = |key: &str, message: String| {
        out.push(Issue {
            path: format!("{section}.{key}"),
            message,
        })
    };
    if !(1..=1_000_000).contains(&l.max_connections) {
        push(
            "max_connections",
            format!("must be between 1 and 1000000, got {}", l.max_connections),
        );
    }
    if !(1..=65_535).contains(&l.accept_backlog) {
        push(
            "accept_backlog",
            format!("must be between 1 and 65535, got {}", l.accept_backlog),
        );
    }
    let header = l.header_read_timeout.as_millis();
    if !(100..=600_000).contains(&header) {
        push(
            "header_read_timeout_ms",
            format!("must be between 100 and 600000, got {header}"),
        );
    }
    let idle = l.idle_timeout.as_millis();
    if idle < 100 || idle > header.max(100) {
        push(
            "idle_timeout_ms",
            format!(
                "must be between 100 and header_read_timeout_ms ({header}), got {idle}: the head timer also runs while a kept-alive connection waits, so a longer idle timeout would never be reached"
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_bounded_and_valid() {
        let c: HttpConfig = serde_json::from_str("{}").unwrap();
        let l = c.limits();
        assert_eq!(l.max_connections, 256);
        assert_eq!(l.accept_backlog, 128);
        assert_eq!(l.header_read_timeout, Duration::from_secs(10));
        assert_eq!(l.idle_timeout, Duration::from_secs(5));
        assert!(check_limits("http", &l).is_empty());
    }

    #[test]
    fn out_of_range_limits_are_named_by_path() {
        let c: HttpConfig = serde_json::from_str(
            r#"{"max_connections": 0, "accept_backlog": 70000,
                "header_read_timeout_ms": 50, "idle_timeout_ms": 20000}"#,
        )
        .unwrap();
        let paths: Vec<String> = check_limits("http", &c.limits())
            .into_iter()
            .map(|i| i.path)
            .collect();
        assert_eq!(
            paths,
            [
                "http.max_connections",
                "http.accept_backlog",
                "http.header_read_timeout_ms",
                "http.idle_timeout_ms"
            ]
        );
        let longer_idle: HttpConfig =
            serde_json::from_str(r#"{"header_read_timeout_ms": 1000, "idle_timeout_ms": 1001}"#)
                .unwrap();
        assert_eq!(check_limits("api", &longer_idle.limits()).len(), 1);
    }
}
