//! Binds a sink to its stream and durable pull consumer, safely.
//!
//! The stream is created only when the config asks for it; a missing stream otherwise
//! fails start-up, because silently creating one with guessed subjects could capture
//! traffic meant for another stream. The consumer is created when missing. When it exists,
//! settings that would break commit-then-ACK (a non-explicit ack policy, a different
//! filter, a push consumer) are refused with both values named; tunables (AckWait,
//! MaxDeliver, MaxAckPending, backoff) are updated to the configured ones.
//!
//! Settings that would silently break the sink are refused too: `headers_only` (every
//! message would be written with an empty payload and ACKed), request limits below what
//! each pull asks for (every pull would fail), and a stream that captures the sink's own
//! dead-letter subject when the consumer reads all of it (a loop). The server's own
//! refusals of a stream or consumer config (overlapping subjects, a filter outside the
//! stream, an invalid setting) are configuration errors too: restarting cannot fix them.

use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(test)]
use async_nats::jetstream::consumer::PriorityPolicy;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::context::{
    ConsumerInfoError, ConsumerInfoErrorKind, GetStreamErrorKind,
};
use async_nats::jetstream::stream::{
    self, ConsumerError, ConsumerErrorKind, ConsumerUpdateError, ConsumerUpdateErrorKind, Stream,
};
use async_nats::jetstream::{self, ErrorCode};

use super::ask_again::{ask_again, stream_lookup_timed_out};
pub use super::binding_terms::{BindError, Needs};
use super::concurrent_create::{get_or_create, stream_error};
pub use super::consumer_checks::{
    check_drift, check_limits, check_read_back, check_server_version, tunable_differences,
    wanted_consumer,
};
use crate::config::{Retention, SourceConfig, StorageKind};

/// Server error codes (nats-server `server/errors.json`) that say a stream or consumer
/// configuration can never be accepted as it is, so a restart loop cannot fix it.
const CONFIG_ERROR_CODES: &[u64] = &[
    10025, // invalid JSON
    10052, // invalid stream config
    10058, // stream name already in use with a different configuration
    10061, // replicas cannot be updated
    10065, // subjects overlap with an existing stream
    10074, // replicas > 1 not supported in non-clustered mode
    10093, // consumer filter subject is not a subset of the stream's subjects
    10094, // invalid consumer policy
    10096, // stream not valid
    10099, // multiple non-filtered consumers on a work-queue stream
    10100, // filtered consumer not unique on a work-queue stream
    10101, // consumer must deliver all on a work-queue stream
    10102, // consumer name too long
    10103, // durable name with `.`, `*` or `>`
    10113, // the account requires max bytes on streams
    10116, // max deliver must exceed the number of backoff values
    10121, // max ack pending exceeds the system limit
    10122, // stream max bytes exceed the account limit
    10125, // max request batch exceeds the server limit
    10126, // consumer replicas exceed the stream's
    10127, // consumer name with path separators
    10128, // stream name with path separators
    10133, // negative replicas
    10134, // consumer replicas must match an interest stream's
    10138, // overlapping consumer filters
    10139, // empty consumer filter
    10153, // inactive threshold exceeds the system limit
    10155, // invalid stream subject transform source
    10156, // invalid stream subject transform destination
];

/// Whether a server error code means the configuration itself is refused.
pub fn is_config_error_code(code: u64) -> bool {
    CONFIG_ERROR_CODES.contains(&code)
}

/// The error a failed JetStream call becomes: [`BindError::Refused`] when the server
/// refused the configuration, else [`BindError::Api`].
fn failed(
    sink: &str,
    action: String,
    e: impl std::fmt::Display,
    server: Option<jetstream::Error>,
) -> BindError {
    match server {
        Some(j) if is_config_error_code(j.error_code().0) => BindError::Refused {
            sink: sink.to_string(),
            action,
            message: j.to_string(),
        },
        _ => api(sink, action, e),
    }
}

fn consumer_error(e: &ConsumerError) -> Option<jetstream::Error> {
    match e.kind() {
        ConsumerErrorKind::JetStream(j) => Some(j),
        _ => None,
    }
}

fn update_error(e: &ConsumerUpdateError) -> Option<jetstream::Error> {
    match e.kind() {
        ConsumerUpdateErrorKind::JetStream(j) => Some(j),
        _ => None,
    }
}

/// A bound sink source.
pub struct Bound {
    /// The stream handle.
    pub stream: Stream,
    /// The durable pull consumer.
    pub consumer: PullConsumer,
}

fn api(sink: &str, action: impl Into<String>, e: impl std::fmt::Display) -> BindError {
    BindError::Api {
        sink: sink.to_string(),
        action: action.into(),
        message: e.to_string(),
    }
}

/// Ensures the stream (when configured) and the durable consumer exist and are safe.
pub async fn bind(
    js: &jetstream::Context,
    sink: &str,
    source: &SourceConfig,
    needs: &Needs,
) -> Result<Bound, BindError> {
    let reported = js.client().server_info().version;
    let modern = check_server_version(sink, source, needs, &reported)?;
    let owner = if modern {
        needs.owner.clone()
    } else {
        BTreeMap::new()
    };
    let stream = bind_stream(js, sink, source).await?;
    check_read_back(
        sink,
        source,
        &stream.cached_info().config.subjects,
        needs.dead_letter.as_deref(),
    )?;
    let consumer = bind_consumer(&stream, sink, source, needs, &owner, modern).await?;
    Ok(Bound { stream, consumer })
}

/// The source's stream: looked up, or created when `create_stream` asks for it (and used
/// as found when another process created it meanwhile).
async fn bind_stream(
    js: &jetstream::Context,
    sink: &str,
    source: &SourceConfig,
) -> Result<Stream, BindError> {
    let lookup = format!("looking up stream {}", source.stream);
    let looked_up = ask_again(sink, &lookup, stream_lookup_timed_out, || {
        js.get_stream(&source.stream)
    });
    let e = match looked_up.await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let missing = matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND);
    let cs = match (&source.create_stream, missing) {
        (Some(cs), true) => cs,
        (None, true) => {
            return Err(BindError::StreamMissing {
                sink: sink.to_string(),
                stream: source.stream.clone(),
            })
        }
        (_, false) => return Err(api(sink, lookup, e)),
    };
    let subjects = if cs.subjects.is_empty() {
        source.subjects.clone()
    } else {
        cs.subjects.clone()
    };
    let cfg = stream::Config {
        name: source.stream.clone(),
        subjects,
        retention: match cs.retention {
            Retention::Limits => stream::RetentionPolicy::Limits,
            Retention::Workqueue => stream::RetentionPolicy::WorkQueue,
            Retention::Interest => stream::RetentionPolicy::Interest,
        },
        storage: match cs.storage {
            StorageKind::File => stream::StorageType::File,
            StorageKind::Memory => stream::StorageType::Memory,
        },
        num_replicas: cs.replicas,
        max_age: Duration::from_millis(cs.max_age_ms),
        duplicate_window: Duration::from_millis(cs.duplicate_window_ms),
        ..Default::default()
    };
    tracing::info!(sink, stream = %source.stream, "creating stream");
    // Another process or sink may create it (with its own settings) between the lookup and
    // the create: that stream is used, as if it had been there first.
    get_or_create(js, cfg, sink).await.map_err(|e| {
        let server = stream_error(&e);
        failed(
            sink,
            format!("creating stream {}", source.stream),
            e,
            server,
        )
    })
}

/// The durable consumer: created when missing; when present, refused on unsafe drift and
/// updated to the configured tunables (and owner metadata, on servers that keep it).
async fn bind_consumer(
    stream: &Stream,
    sink: &str,
    source: &SourceConfig,
    needs: &Needs,
    owner: &BTreeMap<String, String>,
    modern: bool,
) -> Result<PullConsumer, BindError> {
    let wanted = wanted_consumer(source, owner);
    let lookup = format!("looking up consumer {}", source.consumer);
    let timed_out = |e: &ConsumerInfoError| matches!(e.kind(), ConsumerInfoErrorKind::TimedOut);
    let looked_up = ask_again(sink, &lookup, timed_out, || {
        stream.consumer_info(&source.consumer)
    });
    let e = match looked_up.await {
        Ok(info) => {
            check_drift(sink, source, &info.config)?;
            check_limits(sink, source, &info.config, needs)?;
            let c = &info.config;
            let owner_differs = owner.iter().any(|(k, v)| c.metadata.get(k) != Some(v));
            if tunable_differences(c, &wanted).is_empty() && !owner_differs {
                return stream
                    .get_consumer(&source.consumer)
                    .await
                    .map_err(|e| api(sink, format!("binding consumer {}", source.consumer), e));
            }
            tracing::info!(sink, consumer = %source.consumer, "updating consumer settings to the configured ones");
            // Keep the settings that only matter at creation as the server has them, and
            // the metadata others wrote (the server manages its own `_nats.` keys).
            let mut update = wanted.clone();
            update.deliver_policy = c.deliver_policy;
            if modern {
                update.metadata = c
                    .metadata
                    .iter()
                    .filter(|(k, _)| !k.starts_with("_nats."))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .chain(wanted.metadata.clone())
                    .collect();
            }
            return stream.update_consumer(update).await.map_err(|e| {
                let server = update_error(&e);
                failed(
                    sink,
                    format!("updating consumer {}", source.consumer),
                    e,
                    server,
                )
            });
        }
        Err(e) => e,
    };
    let missing = match e.kind() {
        ConsumerInfoErrorKind::NotFound => true,
        ConsumerInfoErrorKind::JetStream(j) => j.error_code() == ErrorCode::CONSUMER_NOT_FOUND,
        _ => false,
    };
    if !missing {
        return Err(api(sink, lookup, e));
    }
    tracing::info!(sink, consumer = %source.consumer, "creating durable consumer");
    let creating = format!("creating consumer {}", source.consumer);
    let timed_out = |e: &ConsumerError| matches!(e.kind(), ConsumerErrorKind::TimedOut);
    ask_again(sink, &creating, timed_out, || {
        stream.create_consumer(wanted.clone())
    })
    .await
    .map_err(|e| {
        let server = consumer_error(&e);
        failed(sink, creating.clone(), e, server)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::consumer::{self, AckPolicy};
    use std::time::Duration;

    fn source(filter: &str) -> SourceConfig {
        serde_json::from_value(serde_json::json!({
            "stream": "S", "consumer": "c", "subjects": filter
        }))
        .unwrap()
    }

    fn existing(filter: &str, ack: AckPolicy) -> consumer::Config {
        consumer::Config {
            durable_name: Some("c".into()),
            filter_subject: filter.into(),
            ack_policy: ack,
            ..Default::default()
        }
    }

    #[test]
    fn switching_a_consumer_into_or_out_of_the_pinned_policy_is_refused_naming_both() {
        let mut pinned = source("a.>");
        pinned.pinned = Some(Default::default());
        let plain = existing("a.>", AckPolicy::Explicit);
        let t = check_drift("x", &pinned, &plain).unwrap_err().to_string();
        assert!(
            t.contains("priority_policy = none")
                && t.contains("wants pinned_client with group jetsink"),
            "{t}"
        );
        let wanted = wanted_consumer(&pinned, &BTreeMap::new());
        assert_eq!(wanted.priority_policy, PriorityPolicy::PinnedClient);
        assert_eq!(wanted.priority_groups, vec!["jetsink".to_string()]);
        assert_eq!(wanted.priority_timeout, Duration::from_secs(30));
        let wanted = consumer::Config {
            priority_policy: PriorityPolicy::PinnedClient,
            priority_groups: vec!["jetsink".into()],
            ..plain.clone()
        };
        assert!(check_drift("x", &pinned, &wanted).is_ok());
        let t = check_drift("x", &source("a.>"), &wanted)
            .unwrap_err()
            .to_string();
        assert!(
            t.contains("priority_policy = pinned_client (groups jetsink)"),
            "{t}"
        );
        let mut other = wanted.clone();
        other.priority_groups = vec!["blue".into()];
        let t = check_drift("x", &pinned, &other).unwrap_err().to_string();
        assert!(
            t.contains("priority_groups = blue, but the config wants jetsink"),
            "{t}"
        );
    }

    #[test]
    fn same_filter_and_explicit_ack_is_accepted() {
        assert!(check_drift("x", &source("a.>"), &existing("a.>", AckPolicy::Explicit)).is_ok());
    }

    #[test]
    fn ack_all_is_refused_naming_both_values() {
        let err = check_drift("x", &source("a.>"), &existing("a.>", AckPolicy::All)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ack_policy = all"), "{text}");
        assert!(text.contains("wants explicit"), "{text}");
        assert!(err.is_config());
    }

    #[test]
    fn a_different_filter_is_refused_naming_both_values() {
        let err =
            check_drift("x", &source("a.>"), &existing("b.>", AckPolicy::Explicit)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("filter_subject = b.>"), "{text}");
        assert!(text.contains("wants a.>"), "{text}");
    }

    #[test]
    fn filter_sets_compare_whatever_field_or_order_the_server_used() {
        let two: SourceConfig = serde_json::from_value(serde_json::json!({
            "stream": "S", "consumer": "c", "subjects": ["a.>", "b.>"]
        }))
        .unwrap();
        let mut c = existing("", AckPolicy::Explicit);
        c.filter_subjects = vec!["b.>".into(), "a.>".into()];
        assert!(check_drift("x", &two, &c).is_ok());
        c.filter_subjects = vec!["a.>".into()];
        let t = check_drift("x", &two, &c).unwrap_err().to_string();
        assert!(
            t.contains("filter_subjects = a.>, but the config") && t.contains("wants a.>, b.>"),
            "{t}"
        );
        let one = existing("a.>", AckPolicy::Explicit);
        assert!(
            check_drift("x", &two, &one).is_err(),
            "one filter is not two"
        );
        c.filter_subjects = vec!["a.>".into()];
        assert!(
            check_drift("x", &source("a.>"), &c).is_ok(),
            "one filter in either field"
        );
        let t = check_drift("x", &source(""), &one).unwrap_err().to_string();
        assert!(t.contains("(none: every subject)"), "{t}");
    }

    #[test]
    fn several_subjects_become_filter_subjects_and_the_owner_metadata() {
        let two: SourceConfig = serde_json::from_value(serde_json::json!({
            "stream": "S", "consumer": "c", "subjects": ["a.>", "b.>"]
        }))
        .unwrap();
        let owner = BTreeMap::from([("jetsink.sink".to_string(), "orders".to_string())]);
        let c = wanted_consumer(&two, &owner);
        assert_eq!(c.filter_subject, "");
        assert_eq!(c.filter_subjects, vec!["a.>", "b.>"]);
        assert_eq!(
            c.metadata.get("jetsink.sink").map(String::as_str),
            Some("orders")
        );
        let one = wanted_consumer(&source("a.>"), &BTreeMap::new());
        assert_eq!(one.filter_subject, "a.>");
        assert!(one.filter_subjects.is_empty() && one.metadata.is_empty());
    }

    #[test]
    fn a_push_consumer_is_refused() {
        let mut c = existing("a.>", AckPolicy::Explicit);
        c.deliver_subject = Some("deliver.x".into());
        assert!(check_drift("x", &source("a.>"), &c).is_err());
    }

    fn needs() -> Needs {
        Needs {
            batch: 500,
            max_bytes: 8 << 20,
            expires: Duration::from_millis(1_000),
            dead_letter: None,
            owner: BTreeMap::new(),
            subjects_path: "sinks.x.source.subjects".into(),
        }
    }

    #[test]
    fn a_headers_only_consumer_is_refused() {
        let mut c = existing("a.>", AckPolicy::Explicit);
        c.headers_only = true;
        let err = check_limits("x", &source("a.>"), &c, &needs()).unwrap_err();
        assert!(err.to_string().contains("headers_only = true"), "{err}");
        assert!(err.is_config());
    }

    #[test]
    fn request_limits_below_the_pull_are_refused_naming_both_values() {
        let src = source("a.>");
        let mut c = existing("a.>", AckPolicy::Explicit);
        assert!(
            check_limits("x", &src, &c, &needs()).is_ok(),
            "0 is no limit"
        );
        c.max_batch = 500;
        c.max_bytes = 8 << 20;
        c.max_expires = Duration::from_millis(1_000);
        assert!(
            check_limits("x", &src, &c, &needs()).is_ok(),
            "equal is enough"
        );
        c.max_batch = 100;
        let t = check_limits("x", &src, &c, &needs())
            .unwrap_err()
            .to_string();
        assert!(
            t.contains("max_batch = 100") && t.contains("batch_size = 500"),
            "{t}"
        );
        c.max_batch = 0;
        c.max_bytes = 1024;
        let t = check_limits("x", &src, &c, &needs())
            .unwrap_err()
            .to_string();
        assert!(
            t.contains("max_bytes = 1024") && t.contains("= 8388608"),
            "{t}"
        );
        c.max_bytes = 0;
        c.max_expires = Duration::from_millis(500);
        let t = check_limits("x", &src, &c, &needs())
            .unwrap_err()
            .to_string();
        assert!(
            t.contains("max_expires = 500 ms") && t.contains("= 1000"),
            "{t}"
        );
    }

    #[test]
    fn a_stream_capturing_the_dead_letters_of_an_unfiltered_consumer_is_a_loop() {
        let subjects = vec!["orders.>".to_string(), "dlq.>".to_string()];
        let err = check_read_back("x", &source(""), &subjects, Some("dlq.x.>")).unwrap_err();
        assert!(err.is_config());
        assert!(err.to_string().contains("every subject"), "{err}");
        assert!(check_read_back("x", &source("orders.>"), &subjects, Some("dlq.x.>")).is_ok());
        assert!(check_read_back("x", &source(""), &subjects[..1], Some("dlq.x.>")).is_ok());
        assert!(check_read_back("x", &source(""), &subjects, None).is_ok());
    }

    #[test]
    fn server_refusals_of_a_config_are_config_errors() {
        assert!(is_config_error_code(10065));
        assert!(is_config_error_code(10093));
        assert!(
            !is_config_error_code(10008),
            "JetStream not enabled is not config"
        );
    }

    #[test]
    fn wanted_consumer_is_explicit_ack_with_configured_tunables() {
        let c = wanted_consumer(&source("a.>"), &BTreeMap::new());
        assert_eq!(c.ack_policy, AckPolicy::Explicit);
        assert_eq!(c.filter_subject, "a.>");
        assert_eq!(c.ack_wait, Duration::from_secs(30));
        assert_eq!(c.max_ack_pending, 10_000);
    }
}
