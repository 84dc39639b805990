//! What an existing consumer and the server must match before a sink binds: the server
//! version's features, the consumer jetsink would create, the drift `bind` refuses and the
//! tunables it updates, the request limits, and the dead-letter loop check. Pure
//! comparisons of configs, shared by `bind` and `jetsink validate --online`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::consumer::{self, pull, AckPolicy};

use super::binding_terms::{BindError, Needs};
use super::pin;
use super::server_version::ServerVersion;
use crate::config::{DeliverPolicy, SourceConfig};
use crate::shared::subject_match::overlap;

/// Whether the server (version `reported`, as its INFO states it) keeps consumer
/// metadata and several filter subjects (2.10+); refuses a consumer that needs several
/// subjects on an older server, which would silently drop the filters and deliver every
/// subject of the stream, naming the config path of those subjects and the version.
pub fn check_server_version(
    sink: &str,
    source: &SourceConfig,
    needs: &Needs,
    reported: &str,
) -> Result<bool, BindError> {
    let modern = ServerVersion::parse(reported)
        .is_some_and(ServerVersion::has_consumer_filters_and_metadata);
    let wanted = filters(source);
    if wanted.len() > 1 && !modern {
        return Err(BindError::ServerTooOld {
            sink: sink.to_string(),
            detail: format!(
                "{} lists {} subjects ({}), but nats-server {reported} filters a consumer by one subject only and would silently deliver every subject of stream {}; several subjects need nats-server 2.10 or later: upgrade the server, or give one subject (a wildcard such as orders.>)",
                needs.subjects_path,
                wanted.len(),
                wanted.join(", "),
                source.stream
            ),
        });
    }
    if let Some(pinned) = &source.pinned {
        if !ServerVersion::parse(reported).is_some_and(ServerVersion::has_priority_groups) {
            return Err(BindError::ServerTooOld {
                sink: sink.to_string(),
                detail: format!(
                    "sinks.{sink}.source.pinned asks for active/standby through a pinned priority group ({}), but nats-server {reported} has no priority groups and would deliver to every instance sharing consumer {}; pinned needs nats-server 2.11 or later: upgrade the server, or remove source.pinned and run one instance",
                    pinned.group, source.consumer
                ),
            });
        }
    }
    Ok(modern)
}

/// The tunables of an existing consumer that differ from the wanted ones, as
/// `(field, on the server, in the config)`; `bind` updates them to the configured values.
pub fn tunable_differences(
    existing: &consumer::Config,
    wanted: &pull::Config,
) -> Vec<(&'static str, String, String)> {
    let ms = |d: Duration| format!("{} ms", d.as_millis());
    let list = |b: &[Duration]| {
        let v: Vec<String> = b.iter().map(|d| d.as_millis().to_string()).collect();
        format!("[{}] ms", v.join(", "))
    };
    let mut out = Vec::new();
    if existing.ack_wait != wanted.ack_wait {
        out.push(("ack_wait", ms(existing.ack_wait), ms(wanted.ack_wait)));
    }
    if existing.max_deliver != wanted.max_deliver {
        out.push((
            "max_deliver",
            existing.max_deliver.to_string(),
            wanted.max_deliver.to_string(),
        ));
    }
    if existing.max_ack_pending != wanted.max_ack_pending {
        out.push((
            "max_ack_pending",
            existing.max_ack_pending.to_string(),
            wanted.max_ack_pending.to_string(),
        ));
    }
    if existing.backoff != wanted.backoff {
        out.push(("backoff", list(&existing.backoff), list(&wanted.backoff)));
    }
    if existing.priority_timeout != wanted.priority_timeout {
        out.push((
            "priority_timeout",
            ms(existing.priority_timeout),
            ms(wanted.priority_timeout),
        ));
    }
    out
}

/// The source's filter subjects; an empty string (a one-element list holding "") is no
/// filter.
fn filters(source: &SourceConfig) -> Vec<String> {
    source
        .subjects
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect()
}

/// The consumer configuration a source asks for: one subject as `filter_subject` (which
/// every server version honours), several as `filter_subjects` (2.10+), and `owner` as
/// its metadata (empty on servers that do not keep it).
pub fn wanted_consumer(source: &SourceConfig, owner: &BTreeMap<String, String>) -> pull::Config {
    let (filter_subject, filter_subjects) = match filters(source).as_slice() {
        [one] => (one.clone(), Vec::new()),
        many => (String::new(), many.to_vec()),
    };
    let (priority_policy, priority_groups, priority_timeout) =
        pin::consumer_priority(source.pinned.as_ref());
    pull::Config {
        durable_name: Some(source.consumer.clone()),
        filter_subject,
        filter_subjects,
        metadata: owner.clone().into_iter().collect(),
        ack_policy: AckPolicy::Explicit,
        // What the server stores and reports: with a backoff, its first step.
        ack_wait: source.effective_ack_wait(),
        max_deliver: source.max_deliver(),
        max_ack_pending: source.max_ack_pending,
        backoff: source
            .backoff_ms
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect(),
        deliver_policy: match source.deliver_policy {
            DeliverPolicy::All => consumer::DeliverPolicy::All,
            DeliverPolicy::New => consumer::DeliverPolicy::New,
            DeliverPolicy::Last => consumer::DeliverPolicy::Last,
            DeliverPolicy::LastPerSubject => consumer::DeliverPolicy::LastPerSubject,
        },
        priority_policy,
        priority_groups,
        priority_timeout,
        ..Default::default()
    }
}

/// Refuses an existing consumer whose settings would break commit-then-ACK or read the
/// wrong messages.
pub fn check_drift(
    sink: &str,
    source: &SourceConfig,
    existing: &consumer::Config,
) -> Result<(), BindError> {
    let drift = |field: &str, existing: String, wanted: String| BindError::Drift {
        sink: sink.to_string(),
        detail: format!(
            "{} on stream {} has {field} = {existing}, but the config wants {wanted}",
            source.consumer, source.stream
        ),
    };
    if let Some(subject) = &existing.deliver_subject {
        return Err(drift(
            "deliver_subject (a push consumer)",
            subject.clone(),
            "a pull consumer".into(),
        ));
    }
    if existing.ack_policy != AckPolicy::Explicit {
        return Err(drift(
            "ack_policy",
            format!("{:?}", existing.ack_policy).to_lowercase(),
            "explicit".into(),
        ));
    }
    if let Some((field, has, wants)) = pin::drift(source.pinned.as_ref(), existing) {
        return Err(drift(field, has, wants));
    }
    let wanted = filters(source);
    let wanted_filters: BTreeSet<&str> = wanted.iter().map(String::as_str).collect();
    let existing_filters: BTreeSet<&str> = existing
        .filter_subjects
        .iter()
        .map(String::as_str)
        .chain(Some(existing.filter_subject.as_str()).filter(|s| !s.is_empty()))
        .collect();
    if existing_filters != wanted_filters {
        let show = |set: &BTreeSet<&str>| {
            if set.is_empty() {
                "(none: every subject)".to_string()
            } else {
                set.iter().copied().collect::<Vec<_>>().join(", ")
            }
        };
        let field = if existing_filters.len() > 1 || wanted_filters.len() > 1 {
            "filter_subjects"
        } else {
            "filter_subject"
        };
        return Err(drift(field, show(&existing_filters), show(&wanted_filters)));
    }
    Ok(())
}

/// Refuses an existing consumer that would hand jetsink messages without their payload,
/// or refuse the pulls jetsink makes: `headers_only` delivers empty payloads that would be
/// written and ACKed (lost for good on a work-queue stream); a `max_batch`, `max_bytes` or
/// `max_expires` below the configured pull makes the server refuse every pull. Zero on
/// the server means no limit.
pub fn check_limits(
    sink: &str,
    source: &SourceConfig,
    existing: &consumer::Config,
    needs: &Needs,
) -> Result<(), BindError> {
    let drift = |detail: String| BindError::Drift {
        sink: sink.to_string(),
        detail: format!(
            "{} on stream {} has {detail}",
            source.consumer, source.stream
        ),
    };
    if existing.headers_only {
        return Err(drift(
            "headers_only = true (messages arrive without their payload), but jetsink writes payloads and needs headers_only = false".into(),
        ));
    }
    let below = |limit: i64, wanted: usize| limit > 0 && (limit as u64) < wanted as u64;
    if below(existing.max_batch, needs.batch) {
        return Err(drift(format!(
            "max_batch = {} (most messages per pull), but the config pulls up to delivery.batch_size = {}",
            existing.max_batch, needs.batch
        )));
    }
    if below(existing.max_bytes, needs.max_bytes) {
        return Err(drift(format!(
            "max_bytes = {} (most bytes per pull), but the config pulls up to delivery.max_batch_bytes = {}",
            existing.max_bytes, needs.max_bytes
        )));
    }
    if !existing.max_expires.is_zero() && existing.max_expires < needs.expires {
        return Err(drift(format!(
            "max_expires = {} ms (longest pull), but the config waits up to delivery.batch_timeout_ms = {}",
            existing.max_expires.as_millis(),
            needs.expires.as_millis()
        )));
    }
    Ok(())
}

/// Refuses a source stream that captures the sink's own dead-letter copies when the
/// consumer would read them: each copy would come back to the sink that made it. The
/// config check sees only named filters; here the stream's subjects stand in for a
/// consumer without one.
pub fn check_read_back(
    sink: &str,
    source: &SourceConfig,
    stream_subjects: &[String],
    capture: Option<&str>,
) -> Result<(), BindError> {
    let Some(capture) = capture else {
        return Ok(());
    };
    if !stream_subjects.iter().any(|s| overlap(s, capture)) {
        return Ok(());
    }
    let filters = filters(source);
    if !filters.is_empty() && !filters.iter().any(|f| overlap(f, capture)) {
        return Ok(());
    }
    let joined = filters.join(", ");
    let reads = if filters.is_empty() {
        "every subject of the stream"
    } else {
        joined.as_str()
    };
    Err(BindError::DeadLetterLoop {
        sink: sink.to_string(),
        detail: format!(
            "stream {} captures the dead-letter subject {capture} ({}) and consumer {} reads {reads}",
            source.stream,
            stream_subjects.join(", "),
            source.consumer
        ),
    })
}
