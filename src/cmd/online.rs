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
//! [`crate::nats::binding`], and each destination's [`crate::sinks::Sink::probe`].

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::context::{GetStreamByNameErrorKind, GetStreamErrorKind};
use async_nats::jetstream::{self, ErrorCode};

use crate::config::{Config, SinkSpec};
use crate::metrics::Metrics;
use crate::nats::binding::{
    check_drift, check_limits, check_read_back, check_server_version, tunable_differences,
    wanted_consumer,
};
use crate::nats::{connect, BindError, ConnectError, Links, Needs};
use crate::shared::subject_match::covers;
use crate::sinks::{self, Feed, Probe, SinkError};

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// As `jetsink run` needs it.
    Ok,
    /// Missing, and `jetsink run` would create it.
    WouldCreate,
    /// Differs in a setting `jetsink run` changes on the server at start (a consumer's
    /// `ack_wait`, `max_deliver`, ...): a config change on its way, not an error.
    WouldUpdate,
    /// Unreachable, or missing with nothing to create it (exit 69).
    Unavailable,
    /// The config and the server disagree (exit 78).
    Mismatch,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was found.
    pub outcome: Outcome,
    /// What was checked, where, and what was found.
    pub text: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.outcome {
            Outcome::Ok => "ok",
            Outcome::WouldCreate => "would create",
            Outcome::WouldUpdate => "would update",
            Outcome::Unavailable | Outcome::Mismatch => "FAIL",
        };
        write!(f, "{tag}: {}", self.text)
    }
}

/// Every check of one run, in order.
#[derive(Debug, Default)]
pub struct Report(pub Vec<Check>);

impl Report {
    fn push(&mut self, outcome: Outcome, text: impl Into<String>) {
        self.0.push(Check {
            outcome,
            text: text.into(),
        });
    }

    /// 69 when anything was unavailable, else 78 when anything disagreed, else 0.
    pub fn exit_code(&self) -> u8 {
        let any = |o: Outcome| self.0.iter().any(|c| c.outcome == o);
        if any(Outcome::Unavailable) {
            crate::exit::UNAVAILABLE
        } else if any(Outcome::Mismatch) {
            crate::exit::CONFIG
        } else {
            crate::exit::OK
        }
    }

    /// The closing line: how many checks ended which way.
    pub fn totals(&self) -> String {
        let n = |f: &dyn Fn(Outcome) -> bool| self.0.iter().filter(|c| f(c.outcome)).count();
        format!(
            "online checks: {} ok, {} would create, {} would update, {} failed",
            n(&|o| o == Outcome::Ok),
            n(&|o| o == Outcome::WouldCreate),
            n(&|o| o == Outcome::WouldUpdate),
            n(&|o| matches!(o, Outcome::Unavailable | Outcome::Mismatch)),
        )
    }
}

fn bind_outcome(e: &BindError) -> Outcome {
    if e.is_config() {
        Outcome::Mismatch
    } else {
        Outcome::Unavailable
    }
}

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
            Some(Some((js, version))) => check_source(&mut report, js, version, spec).await,
            _ => report.push(
                Outcome::Unavailable,
                format!(
                    "sink {}: stream and consumers not checked: no NATS connection",
                    spec.name
                ),
            ),
        }
        if let Some(Some((js, _))) = contexts.get(spec.connection_label()) {
            check_dead_letter(&mut report, js, spec).await;
        }
        check_destination(&mut report, spec).await;
    }
    report
}

/// The server version against what the sink needs, the stream, and each consumer.
async fn check_source(
    report: &mut Report,
    js: &jetstream::Context,
    version: &str,
    spec: &SinkSpec,
) {
    let sink = &spec.name;
    let bindings = spec.consumer_bindings();
    let mut modern = true;
    let mut too_old = false;
    for (source, lane) in &bindings {
        match check_server_version(sink, source, &Needs::of(spec, *lane), version) {
            Ok(m) => modern = m,
            Err(e) => {
                too_old = true;
                report.push(bind_outcome(&e), e.to_string());
            }
        }
    }
    if !too_old {
        report.push(
            Outcome::Ok,
            format!(
                "sink {sink}: nats-server {version} supports its consumers{}",
                if modern {
                    " (owner metadata kept)"
                } else {
                    " (one filter subject each; no owner metadata before 2.10)"
                }
            ),
        );
    }
    let source = &spec.source;
    let stream_name = &source.stream;
    let stream = match js.get_stream(stream_name).await {
        Ok(s) => s,
        Err(e) => {
            let missing = matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND);
            let first = bindings.first().map(|(b, _)| b).unwrap_or(source);
            match (missing, &first.create_stream) {
                (true, Some(cs)) => {
                    let subjects = if cs.subjects.is_empty() {
                        &first.subjects
                    } else {
                        &cs.subjects
                    };
                    report.push(
                        Outcome::WouldCreate,
                        format!(
                            "sink {sink}: stream {stream_name} capturing {}",
                            subjects.join(", ")
                        ),
                    );
                    for (b, _) in &bindings {
                        report.push(
                            Outcome::WouldCreate,
                            format!(
                                "sink {sink}: consumer {} on stream {stream_name}",
                                b.consumer
                            ),
                        );
                    }
                }
                (true, None) => {
                    let e = BindError::StreamMissing {
                        sink: sink.clone(),
                        stream: stream_name.clone(),
                    };
                    report.push(Outcome::Unavailable, e.to_string());
                }
                (false, _) => report.push(
                    Outcome::Unavailable,
                    format!("sink {sink}: looking up stream {stream_name} failed: {e}"),
                ),
            }
            return;
        }
    };
    let captured = stream.cached_info().config.subjects.clone();
    let mut uncovered = Vec::new();
    for (b, lane) in &bindings {
        for f in b.subjects.iter().filter(|f| !f.is_empty()) {
            if !captured.iter().any(|s| covers(s, f)) {
                uncovered.push(format!("{f} ({})", spec.subjects_path_of(*lane)));
            }
        }
    }
    if uncovered.is_empty() {
        report.push(
            Outcome::Ok,
            format!(
                "sink {sink}: stream {stream_name} exists and captures {}",
                captured.join(", ")
            ),
        );
    } else {
        report.push(
            Outcome::Mismatch,
            format!(
                "sink {sink}: stream {stream_name} captures {}, which does not cover {}",
                captured.join(", "),
                uncovered.join(", ")
            ),
        );
    }
    for (b, lane) in &bindings {
        let needs = Needs::of(spec, *lane);
        if let Err(e) = check_read_back(sink, b, &captured, needs.dead_letter.as_deref()) {
            report.push(bind_outcome(&e), e.to_string());
        }
        let consumer = &b.consumer;
        let info = match stream.consumer_info(consumer).await {
            Ok(info) => info,
            Err(e) => {
                let missing = match e.kind() {
                    async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound => true,
                    async_nats::jetstream::context::ConsumerInfoErrorKind::JetStream(j) => {
                        j.error_code() == ErrorCode::CONSUMER_NOT_FOUND
                    }
                    _ => false,
                };
                if missing {
                    report.push(
                        Outcome::WouldCreate,
                        format!("sink {sink}: consumer {consumer} on stream {stream_name}"),
                    );
                } else {
                    report.push(
                        Outcome::Unavailable,
                        format!("sink {sink}: looking up consumer {consumer} failed: {e}"),
                    );
                }
                continue;
            }
        };
        let c = &info.config;
        let mut drifted = false;
        for result in [check_drift(sink, b, c), check_limits(sink, b, c, &needs)] {
            if let Err(e) = result {
                drifted = true;
                report.push(bind_outcome(&e), e.to_string());
            }
        }
        for (field, server, config) in tunable_differences(c, &wanted_consumer(b, &BTreeMap::new()))
        {
            drifted = true;
            report.push(
                Outcome::WouldUpdate,
                format!(
                    "sink {sink}: consumer {consumer} on stream {stream_name} has {field} = {server}; jetsink run sets it to {config}"
                ),
            );
        }
        if !drifted {
            report.push(
                Outcome::Ok,
                format!(
                    "sink {sink}: consumer {consumer} on stream {stream_name} matches the config"
                ),
            );
        }
        if modern {
            report
                .0
                .push(owner_check(sink, consumer, &c.metadata, &needs));
        }
    }
}

/// What the consumer's metadata says about who owns it, against this config.
fn owner_check(
    sink: &str,
    consumer: &str,
    metadata: &std::collections::HashMap<String, String>,
    needs: &Needs,
) -> Check {
    let get = |k: &str| metadata.get(k).map(String::as_str);
    let ours = |k: &str| needs.owner.get(k).map(String::as_str).unwrap_or("");
    let (Some(owner), Some(hash)) = (get("jetsink.sink"), get("jetsink.config_hash")) else {
        return Check {
            outcome: Outcome::Ok,
            text: format!("sink {sink}: consumer {consumer} carries no jetsink owner metadata (created elsewhere or by an older jetsink; jetsink run adds it)"),
        };
    };
    let version = get("jetsink.version").unwrap_or("?");
    if owner != sink {
        return Check {
            outcome: Outcome::Mismatch,
            text: format!("sink {sink}: consumer {consumer} belongs to sink {owner} (jetsink {version}, config hash {hash}); two sinks on one consumer would take each other's messages"),
        };
    }
    let wanted = ours("jetsink.config_hash");
    Check {
        outcome: Outcome::Ok,
        text: if hash == wanted {
            format!("sink {sink}: consumer {consumer} owned by sink {owner}, jetsink {version}, config hash {hash} matches this config")
        } else {
            format!("sink {sink}: consumer {consumer} owned by sink {owner}, jetsink {version}, config hash {hash} differs from this config's {wanted} (the sink's section changed since; jetsink run restamps it)")
        },
    }
}

/// The dead-letter stream: created by `dead_letter.create_stream`, or one that captures
/// the dead-letter subject.
async fn check_dead_letter(report: &mut Report, js: &jetstream::Context, spec: &SinkSpec) {
    let Some(dl) = spec.dead_letter.as_ref().filter(|d| d.enabled) else {
        return;
    };
    let sink = &spec.name;
    let capture = dl.capture(sink);
    if let Some(cs) = &dl.create_stream {
        match js.get_stream(&cs.name).await {
            Ok(_) => report.push(
                Outcome::Ok,
                format!("sink {sink}: dead-letter stream {} exists", cs.name),
            ),
            Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) => {
                report.push(
                    Outcome::WouldCreate,
                    format!(
                        "sink {sink}: dead-letter stream {} capturing {capture}",
                        cs.name
                    ),
                )
            }
            Err(e) => report.push(
                Outcome::Unavailable,
                format!(
                    "sink {sink}: looking up dead-letter stream {} failed: {e}",
                    cs.name
                ),
            ),
        }
        return;
    }
    match js.stream_by_subject(capture.clone()).await {
        Ok(name) => report.push(
            Outcome::Ok,
            format!("sink {sink}: dead-letter subject {capture} is captured by stream {name}"),
        ),
        Err(e) if e.kind() == GetStreamByNameErrorKind::NotFound => report.push(
            Outcome::Unavailable,
            format!("sink {sink}: no stream captures the dead-letter subject {capture}, and dead_letter.create_stream is not set: dead-letter copies could not be stored"),
        ),
        Err(e) => report.push(
            Outcome::Unavailable,
            format!("sink {sink}: looking up the stream of dead-letter subject {capture} failed: {e}"),
        ),
    }
}

/// The destination, through its read-only [`crate::sinks::Sink::probe`].
async fn check_destination(report: &mut Report, spec: &SinkSpec) {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
    let place = format!(
        "sink {}: destination {}",
        spec.name,
        spec.destination.describe()
    );
    match sink.probe().await {
        Ok(Probe::Ready(what)) => report.push(Outcome::Ok, format!("{place}: {what}")),
        Ok(Probe::WouldCreate(what)) => {
            report.push(Outcome::WouldCreate, format!("{place}: {what}"))
        }
        Err(e @ SinkError::Misconfigured { .. }) => {
            report.push(Outcome::Mismatch, format!("{place}: {e}"))
        }
        Err(e) => report.push(Outcome::Unavailable, format!("{place}: {e}")),
    }
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

    #[test]
    fn the_owner_is_named_and_the_hash_compared() {
        let needs = Needs {
            owner: BTreeMap::from([
                ("jetsink.sink".to_string(), "a".to_string()),
                ("jetsink.config_hash".to_string(), "h1".to_string()),
            ]),
            ..Needs::default()
        };
        let meta = |sink: &str, hash: &str| {
            std::collections::HashMap::from([
                ("jetsink.sink".to_string(), sink.to_string()),
                ("jetsink.config_hash".to_string(), hash.to_string()),
                ("jetsink.version".to_string(), "0.1.0".to_string()),
            ])
        };
        let same = owner_check("a", "c", &meta("a", "h1"), &needs);
        assert!(same.text.contains("h1 matches"), "{same}");
        let changed = owner_check("a", "c", &meta("a", "h0"), &needs);
        assert_eq!(changed.outcome, Outcome::Ok);
        assert!(
            changed.text.contains("h0 differs from this config's h1"),
            "{changed}"
        );
        let other = owner_check("a", "c", &meta("b", "h1"), &needs);
        assert_eq!(other.outcome, Outcome::Mismatch);
        assert!(other.text.contains("belongs to sink b"), "{other}");
        let none = owner_check("a", "c", &Default::default(), &needs);
        assert!(none.text.contains("no jetsink owner metadata"), "{none}");
    }
}
