//! `jetsink validate --online`: checks a valid config against the live NATS server and
//! destinations, changing nothing — no stream, consumer, table, directory or message is
//! created or written. Each check is one line: `ok`, `would create` (what `jetsink run`
//! would create), or `FAIL` naming what and where. The exit code says what failed: 69 when
//! something is unreachable or missing (NATS, a database, a stream without
//! `create_stream`), 78 when the config and the server disagree (consumer drift, a feature
//! the server version lacks, a table that does not fit).
//!
//! The checks are the start-up checks of `jetsink run`, called without their side
//! effects: the server version check and the drift and limit comparisons of
//! [`crate::nats::binding`], the capacity checks of [`crate::nats::capacity`], and each
//! destination's [`crate::sinks::Sink::probe`].

mod dead_letter;
mod destination;
mod report;
mod source;

pub use report::{Check, Outcome, Report};

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;

use crate::config::{Config, SinkSpec};
use crate::metrics::Metrics;
use crate::nats::{connect, ConnectError, Links};

/// Runs every online check of the sinks of `config` (only `only`, when given).
pub async fn check(config: &Config, only: Option<&str>) -> Report {
    let mut report = Report::default();
    let metrics = Metrics::new();
    let links = Links::new(&metrics);
    let sinks: Vec<&SinkSpec> = config
        .sinks
        .iter()
        .filter(|s| only.is_none_or(|o| o == s.name))
        .collect();
    // The files `run` reads before it connects, on the host that runs it (the NATS ones
    // are read by the connection below).
    if config.api.is_some() {
        match super::preflight::api_token(config) {
            Some(issue) => report.push(Outcome::Mismatch, issue.to_string()),
            None => report.push(Outcome::Ok, "api: the bearer token is readable"),
        }
    }
    let mut contexts: BTreeMap<String, Option<(jetstream::Context, String)>> = BTreeMap::new();
    for spec in &sinks {
        let label = spec.connection_label().to_string();
        if contexts.contains_key(&label) {
            continue;
        }
        let opened = match connect(&config.nats, &label, &links, &metrics).await {
            Ok(conn) => {
                let info = conn.client.server_info();
                if info.jetstream {
                    report.push(
                        Outcome::Ok,
                        format!(
                            "NATS connection {label}: connected to {} (nats-server {}), JetStream enabled",
                            info.server_name, info.version
                        ),
                    );
                    let js = jetstream::ContextBuilder::new()
                        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
                        .build(conn.client.clone());
                    Some((js, info.version.clone()))
                } else {
                    report.push(
                        Outcome::Unavailable,
                        format!(
                            "NATS connection {label}: server {} (nats-server {}) has JetStream disabled; start it with -js",
                            info.server_name, info.version
                        ),
                    );
                    None
                }
            }
            Err(e) => {
                let outcome = match e {
                    ConnectError::Credentials { .. } => Outcome::Mismatch,
                    ConnectError::Unreachable { .. } => Outcome::Unavailable,
                };
                report.push(outcome, format!("NATS connection {label}: {e}"));
                None
            }
        };
        contexts.insert(label, opened);
    }
    for spec in sinks {
        match contexts.get(spec.connection_label()) {
            Some(Some((js, version))) => source::check(&mut report, js, version, spec).await,
            _ => report.push(
                Outcome::Unavailable,
                format!(
                    "sink {}: stream and consumers not checked: no NATS connection",
                    spec.name
                ),
            ),
        }
        if let Some(Some((js, _))) = contexts.get(spec.connection_label()) {
            dead_letter::check(&mut report, js, spec).await;
        }
        destination::check(&mut report, spec).await;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: &[Outcome]) -> Report {
        Report(
            outcomes
                .iter()
                .map(|o| Check {
                    outcome: *o,
                    text: "x".into(),
                })
                .collect(),
        )
    }

    #[test]
    fn unavailable_wins_over_mismatch_and_creating_is_fine() {
        use Outcome::*;
        assert_eq!(report(&[Ok, WouldCreate, WouldUpdate]).exit_code(), 0);
        assert_eq!(report(&[Ok, Mismatch]).exit_code(), 78);
        assert_eq!(report(&[Mismatch, Unavailable]).exit_code(), 69);
        assert_eq!(report(&[]).exit_code(), 0);
        assert_eq!(
            report(&[Ok, WouldCreate, WouldUpdate, Mismatch, Unavailable]).totals(),
            "online checks: 1 ok, 1 would create, 1 would update, 2 failed"
        );
    }

    #[test]
    fn lines_start_with_their_outcome() {
        let line = |outcome| {
            Check {
                outcome,
                text: "sink a: stream S".into(),
            }
            .to_string()
        };
        assert_eq!(line(Outcome::Ok), "ok: sink a: stream S");
        assert_eq!(line(Outcome::WouldCreate), "would create: sink a: stream S");
        assert_eq!(line(Outcome::WouldUpdate), "would update: sink a: stream S");
        assert_eq!(line(Outcome::Mismatch), "FAIL: sink a: stream S");
        assert_eq!(line(Outcome::Unavailable), "FAIL: sink a: stream S");
    }
}
