//! Binds a sink to its stream and durable pull consumer, safely.
//!
//! The stream is created only when the config asks for it; a missing stream otherwise
//! fails start-up, because silently creating one with guessed subjects could capture
//! traffic meant for another stream. The consumer is created when missing. When it exists,
//! settings that would break commit-then-ACK (a non-explicit ack policy, a different
//! filter, a push consumer) are refused with both values named; tunables (AckWait,
//! MaxDeliver, MaxAckPending, backoff) are updated to the configured ones.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, pull, AckPolicy, PullConsumer};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, Stream};
use async_nats::jetstream::{self, ErrorCode};

use crate::config::{DeliverPolicy, Retention, SourceConfig, StorageKind};

/// Why a sink could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The stream does not exist and `create_stream` is not configured (exit 69).
    #[error("sink {sink}: stream {stream} does not exist on the server; create it, or add `source.create_stream` to let jetsink create it")]
    StreamMissing {
        /// Sink name.
        sink: String,
        /// Stream name.
        stream: String,
    },
    /// The existing consumer differs in a way that is unsafe to change (exit 78).
    #[error("sink {sink}: existing consumer {detail}; delete the consumer or change the config")]
    Drift {
        /// Sink name.
        sink: String,
        /// Which consumer, which setting, its value on the server and in the config.
        detail: String,
    },
    /// A JetStream API call failed (exit 69 at start-up).
    #[error("sink {sink}: {action} failed: {message}")]
    Api {
        /// Sink name.
        sink: String,
        /// What was being done.
        action: String,
        /// The server's or client's reason.
        message: String,
    },
}

impl BindError {
    /// Whether the error is a configuration problem (exit 78) rather than an unavailable
    /// dependency (exit 69).
    pub fn is_config(&self) -> bool {
        matches!(self, BindError::Drift { .. })
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
) -> Result<Bound, BindError> {
    let stream = match js.get_stream(&source.stream).await {
        Ok(s) => s,
        Err(e) => {
            let missing = matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND);
            match (&source.create_stream, missing) {
                (Some(cs), true) => {
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
                    js.get_or_create_stream(cfg)
                        .await
                        .map_err(|e| api(sink, format!("creating stream {}", source.stream), e))?
                }
                (None, true) => {
                    return Err(BindError::StreamMissing {
                        sink: sink.to_string(),
                        stream: source.stream.clone(),
                    })
                }
                (_, false) => {
                    return Err(api(sink, format!("looking up stream {}", source.stream), e))
                }
            }
        }
    };

    let wanted = wanted_consumer(source);
    let consumer = match stream.consumer_info(&source.consumer).await {
        Ok(info) => {
            check_drift(sink, source, &info.config)?;
            let c = &info.config;
            let tunables_differ = c.ack_wait != wanted.ack_wait
                || c.max_deliver != wanted.max_deliver
                || c.max_ack_pending != wanted.max_ack_pending
                || c.backoff != wanted.backoff;
            if tunables_differ {
                tracing::info!(sink, consumer = %source.consumer, "updating consumer settings to the configured ones");
                // Keep the settings that only matter at creation as the server has them.
                let mut update = wanted.clone();
                update.deliver_policy = c.deliver_policy;
                stream
                    .update_consumer(update)
                    .await
                    .map_err(|e| api(sink, format!("updating consumer {}", source.consumer), e))?
            } else {
                stream
                    .get_consumer(&source.consumer)
                    .await
                    .map_err(|e| api(sink, format!("binding consumer {}", source.consumer), e))?
            }
        }
        Err(e) => {
            let missing = match e.kind() {
                ConsumerInfoErrorKind::NotFound => true,
                ConsumerInfoErrorKind::JetStream(j) => {
                    j.error_code() == ErrorCode::CONSUMER_NOT_FOUND
                }
                _ => false,
            };
            if !missing {
                return Err(api(
                    sink,
                    format!("looking up consumer {}", source.consumer),
                    e,
                ));
            }
            tracing::info!(sink, consumer = %source.consumer, "creating durable consumer");
            stream
                .create_consumer(wanted)
                .await
                .map_err(|e| api(sink, format!("creating consumer {}", source.consumer), e))?
        }
    };
    Ok(Bound { stream, consumer })
}

/// The consumer configuration a source asks for.
pub fn wanted_consumer(source: &SourceConfig) -> pull::Config {
    pull::Config {
        durable_name: Some(source.consumer.clone()),
        filter_subject: source.subjects.first().cloned().unwrap_or_default(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(source.ack_wait_ms),
        max_deliver: source.max_deliver,
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
    let wanted_filter = source.subjects.first().cloned().unwrap_or_default();
    let existing_filter =
        if existing.filter_subject.is_empty() && existing.filter_subjects.len() == 1 {
            existing.filter_subjects[0].clone()
        } else if !existing.filter_subjects.is_empty() {
            existing.filter_subjects.join(",")
        } else {
            existing.filter_subject.clone()
        };
    if existing_filter != wanted_filter {
        let show = |s: &str| {
            if s.is_empty() {
                "(none: every subject)".to_string()
            } else {
                s.to_string()
            }
        };
        return Err(drift(
            "filter_subject",
            show(&existing_filter),
            show(&wanted_filter),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_push_consumer_is_refused() {
        let mut c = existing("a.>", AckPolicy::Explicit);
        c.deliver_subject = Some("deliver.x".into());
        assert!(check_drift("x", &source("a.>"), &c).is_err());
    }

    #[test]
    fn wanted_consumer_is_explicit_ack_with_configured_tunables() {
        let c = wanted_consumer(&source("a.>"));
        assert_eq!(c.ack_policy, AckPolicy::Explicit);
        assert_eq!(c.filter_subject, "a.>");
        assert_eq!(c.ack_wait, Duration::from_secs(30));
        assert_eq!(c.max_ack_pending, 10_000);
    }
}
