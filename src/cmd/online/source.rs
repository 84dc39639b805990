//! The source checks of one sink: the server version against what its consumers need, its
//! stream and what the stream captures, and each consumer — drift, limits, the settings
//! `jetsink run` would update, what it can carry ([`crate::nats::capacity`], the same
//! refusal as at start-up) and who owns it.

use std::collections::BTreeMap;

use async_nats::jetstream::consumer;
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::{self, stream::Stream, ErrorCode};

use super::report::{bind_outcome, Check, Outcome, Report};
use crate::config::{SinkSpec, SourceConfig};
use crate::nats::binding::{
    check_drift, check_limits, check_read_back, check_server_version, tunable_differences,
    wanted_consumer,
};
use crate::nats::capacity::capacity;
use crate::nats::{BindError, Needs};
use crate::shared::subject_match::covers;

/// The server version, the stream, and each consumer of `spec`.
pub(super) async fn check(
    report: &mut Report,
    js: &jetstream::Context,
    version: &str,
    spec: &SinkSpec,
) {
    let bindings = spec.consumer_bindings();
    let modern = versions(report, version, spec, &bindings);
    let Some(stream) = stream(report, js, spec, &bindings).await else {
        return;
    };
    let captured = stream.cached_info().config.subjects.clone();
    captures(report, spec, &bindings, &captured);
    for (b, lane) in &bindings {
        consumer(report, &stream, spec, b, *lane, &captured, modern).await;
    }
}

/// Whether the server keeps consumer metadata (2.10+). A server too old for a consumer the
/// sink needs is reported, and the stream and consumers are still checked, so every
/// problem shows in one run.
fn versions(
    report: &mut Report,
    version: &str,
    spec: &SinkSpec,
    bindings: &[(SourceConfig, Option<usize>)],
) -> bool {
    let sink = &spec.name;
    let mut modern = true;
    let mut too_old = false;
    for (source, lane) in bindings {
        match check_server_version(sink, source, &Needs::of(spec, *lane), version) {
            Ok(m) => modern = m,
            Err(e) => {
                too_old = true;
                report.push(bind_outcome(&e), e.to_string());
            }
        }
    }
    if too_old {
        return modern;
    }
    let detail = if modern {
        " (owner metadata kept)"
    } else {
        " (one filter subject each; no owner metadata before 2.10)"
    };
    report.push(
        Outcome::Ok,
        format!("sink {sink}: nats-server {version} supports its consumers{detail}"),
    );
    modern
}

/// The sink's stream, or `None` when it is missing (what `run` would create is reported)
/// or cannot be looked up.
async fn stream(
    report: &mut Report,
    js: &jetstream::Context,
    spec: &SinkSpec,
    bindings: &[(SourceConfig, Option<usize>)],
) -> Option<Stream> {
    let sink = &spec.name;
    let name = &spec.source.stream;
    let e = match js.get_stream(name).await {
        Ok(s) => return Some(s),
        Err(e) => e,
    };
    let missing = matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND);
    let first = bindings.first().map(|(b, _)| b).unwrap_or(&spec.source);
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
                    "sink {sink}: stream {name} capturing {}",
                    subjects.join(", ")
                ),
            );
            for (b, _) in bindings {
                report.push(
                    Outcome::WouldCreate,
                    format!("sink {sink}: consumer {} on stream {name}", b.consumer),
                );
            }
        }
        (true, None) => {
            let e = BindError::StreamMissing {
                sink: sink.clone(),
                stream: name.clone(),
            };
            report.push(Outcome::Unavailable, e.to_string());
        }
        (false, _) => report.push(
            Outcome::Unavailable,
            format!("sink {sink}: looking up stream {name} failed: {e}"),
        ),
    }
    None
}

/// Whether the stream captures every filter subject of the sink's consumers.
fn captures(
    report: &mut Report,
    spec: &SinkSpec,
    bindings: &[(SourceConfig, Option<usize>)],
    captured: &[String],
) {
    let mut uncovered = Vec::new();
    for (b, lane) in bindings {
        for f in b.subjects.iter().filter(|f| !f.is_empty()) {
            if !captured.iter().any(|s| covers(s, f)) {
                uncovered.push(format!("{f} ({})", spec.subjects_path_of(*lane)));
            }
        }
    }
    let (sink, name, all) = (&spec.name, &spec.source.stream, captured.join(", "));
    if uncovered.is_empty() {
        report.push(
            Outcome::Ok,
            format!("sink {sink}: stream {name} exists and captures {all}"),
        );
    } else {
        report.push(
            Outcome::Mismatch,
            format!(
                "sink {sink}: stream {name} captures {all}, which does not cover {}",
                uncovered.join(", ")
            ),
        );
    }
}

/// One consumer: read-back of dead letters, then (when it exists) drift, limits, the
/// settings `run` would update, capacity and owner.
async fn consumer(
    report: &mut Report,
    stream: &Stream,
    spec: &SinkSpec,
    b: &SourceConfig,
    lane: Option<usize>,
    captured: &[String],
    modern: bool,
) {
    let (sink, name, on) = (&spec.name, &b.consumer, &spec.source.stream);
    let needs = Needs::of(spec, lane);
    if let Err(e) = check_read_back(sink, b, captured, needs.dead_letter.as_deref()) {
        report.push(bind_outcome(&e), e.to_string());
    }
    let info = match stream.consumer_info(name).await {
        Ok(info) => info,
        Err(e) => {
            let missing = match e.kind() {
                ConsumerInfoErrorKind::NotFound => true,
                ConsumerInfoErrorKind::JetStream(j) => {
                    j.error_code() == ErrorCode::CONSUMER_NOT_FOUND
                }
                _ => false,
            };
            if missing {
                report.push(
                    Outcome::WouldCreate,
                    format!("sink {sink}: consumer {name} on stream {on}"),
                );
            } else {
                report.push(
                    Outcome::Unavailable,
                    format!("sink {sink}: looking up consumer {name} failed: {e}"),
                );
            }
            return;
        }
    };
    let c = &info.config;
    let wanted = wanted_consumer(b, &BTreeMap::new());
    let differs = differences(report, spec, b, c, &wanted, &needs)
        | carries(report, spec, name, &as_run_leaves(c, &wanted));
    if !differs {
        report.push(
            Outcome::Ok,
            format!("sink {sink}: consumer {name} on stream {on} matches the config"),
        );
    }
    if modern {
        report.0.push(owner_check(sink, name, &c.metadata, &needs));
    }
}

/// Drift and limits (failures) and the settings `run` updates (`would update`); whether
/// any was reported.
fn differences(
    report: &mut Report,
    spec: &SinkSpec,
    b: &SourceConfig,
    live: &consumer::Config,
    wanted: &consumer::pull::Config,
    needs: &Needs,
) -> bool {
    let (sink, name, on) = (&spec.name, &b.consumer, &spec.source.stream);
    let mut any = false;
    for result in [
        check_drift(sink, b, live),
        check_limits(sink, b, live, needs),
    ] {
        if let Err(e) = result {
            any = true;
            report.push(bind_outcome(&e), e.to_string());
        }
    }
    for (field, server, config) in tunable_differences(live, wanted) {
        any = true;
        report.push(
            Outcome::WouldUpdate,
            format!(
                "sink {sink}: consumer {name} on stream {on} has {field} = {server}; jetsink run sets it to {config}"
            ),
        );
    }
    any
}

/// The consumer as `jetsink run` leaves it once it has updated the settings it updates:
/// what the start-up capacity check sees.
fn as_run_leaves(live: &consumer::Config, wanted: &consumer::pull::Config) -> consumer::Config {
    consumer::Config {
        ack_wait: wanted.ack_wait,
        max_deliver: wanted.max_deliver,
        max_ack_pending: wanted.max_ack_pending,
        backoff: wanted.backoff.clone(),
        ..live.clone()
    }
}

/// Whether the consumer can carry the randomizer's window and the sink's buffer, as
/// `jetsink run` checks at start-up; whether a refusal was reported.
fn carries(report: &mut Report, spec: &SinkSpec, name: &str, live: &consumer::Config) -> bool {
    let found = capacity(spec, name, live);
    for w in &found.warnings {
        report.push(
            Outcome::Ok,
            format!("sink {}: consumer {name}: {w}", spec.name),
        );
    }
    for r in &found.refusals {
        report.push(Outcome::Mismatch, r.clone());
    }
    !found.refusals.is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn capacity_is_checked_on_the_consumer_as_run_leaves_it() {
        let cfg = serde_json::json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"a": {
                "source": {"stream": "S", "consumer": "c", "max_ack_pending": 20000},
                "delivery": {"batch_size": 100, "shuffle": {"buffer": 5000, "flush_ms": 1000}},
                "destination": {"type": "file", "directory": "out"}
            }}
        });
        let spec = crate::config::Config::from_json_str(&cfg.to_string())
            .expect("valid")
            .sinks
            .remove(0);
        // On the server today: too small for the buffer; run raises it to the config's.
        let live = consumer::Config {
            max_ack_pending: 1000,
            ..Default::default()
        };
        let wanted = wanted_consumer(&spec.source, &BTreeMap::new());
        let mut report = Report::default();
        assert!(!carries(
            &mut report,
            &spec,
            "c",
            &as_run_leaves(&live, &wanted)
        ));
        assert!(report.0.is_empty(), "{:?}", report.0);
        assert!(
            carries(&mut report, &spec, "c", &live),
            "as it is today, refused"
        );
        assert_eq!(report.0[0].outcome, Outcome::Mismatch);
        assert!(report.0[0].text.contains("sinks.a.delivery.shuffle.buffer"));
    }
}
