//! The consumer a `jetsink replay` reads through: a durable of its own, never the sink's.
//!
//! A replay must not move the sink's durable consumer, so it creates another one, named
//! `<consumer>-replay-<pid>`, starting at a stream sequence or a time, with the sink's
//! filter subjects and explicit acknowledgement. It is durable (so it can be named, looked
//! up and deleted on every server from 2.9 on) with an `inactive_threshold`, so the server
//! removes it by itself if the process dies before deleting it at the end.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::stream::Stream;
use time::OffsetDateTime;

use crate::config::SourceConfig;

/// How long a replay consumer may go without a pull or an acknowledgement before the
/// server removes it: long enough to outlast a held batch against a destination that is
/// down for a while, short enough that a killed replay leaves nothing behind for long.
pub const INACTIVE_THRESHOLD: Duration = Duration::from_secs(600);

/// Where a replay consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayStart {
    /// At this stream sequence.
    Sequence(u64),
    /// At the first message stored at or after this time.
    Time(OffsetDateTime),
}

/// Why a replay consumer could not be created, read or deleted.
#[derive(Debug, thiserror::Error)]
#[error("{action} (stream {stream}): {message}")]
pub struct ReplayConsumerError {
    /// What was being done, naming the consumer.
    pub action: String,
    /// The stream.
    pub stream: String,
    /// The server's or client's reason.
    pub message: String,
}

/// The durable name of a replay consumer of `consumer`, unique per process; `role` tells
/// apart the consumers one replay creates (`""` for the one it reads through).
pub fn replay_consumer_name(consumer: &str, pid: u32, role: &str) -> String {
    if role.is_empty() {
        format!("{consumer}-replay-{pid}")
    } else {
        format!("{consumer}-replay-{pid}-{role}")
    }
}

/// The configuration of a replay consumer over `filters` (the sink's filter subjects;
/// empty for every subject), taking AckWait, MaxDeliver, MaxAckPending and backoff from
/// the sink's source, so refused messages come back as they do for `jetsink run`. Pure.
pub fn replay_consumer_config(
    name: &str,
    source: &SourceConfig,
    filters: &[String],
    start: ReplayStart,
) -> pull::Config {
    let (filter_subject, filter_subjects) = match filters {
        [one] => (one.clone(), Vec::new()),
        many => (String::new(), many.to_vec()),
    };
    pull::Config {
        durable_name: Some(name.to_string()),
        description: Some(format!(
            "jetsink replay of consumer {}; removed when the replay ends",
            source.consumer
        )),
        filter_subject,
        filter_subjects,
        ack_policy: AckPolicy::Explicit,
        ack_wait: source.effective_ack_wait(),
        max_deliver: source.max_deliver(),
        max_ack_pending: source.max_ack_pending,
        backoff: source
            .backoff_ms
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect(),
        deliver_policy: match start {
            ReplayStart::Sequence(start_sequence) => {
                DeliverPolicy::ByStartSequence { start_sequence }
            }
            ReplayStart::Time(start_time) => DeliverPolicy::ByStartTime { start_time },
        },
        inactive_threshold: INACTIVE_THRESHOLD,
        ..Default::default()
    }
}

fn failed(action: String, stream: &Stream, e: impl std::fmt::Display) -> ReplayConsumerError {
    ReplayConsumerError {
        action,
        stream: stream.cached_info().config.name.clone(),
        message: e.to_string(),
    }
}

/// Creates the replay consumer `config` describes.
pub async fn create(
    stream: &Stream,
    config: pull::Config,
) -> Result<PullConsumer, ReplayConsumerError> {
    let name = config.durable_name.clone().unwrap_or_default();
    stream
        .create_consumer(config)
        .await
        .map_err(|e| failed(format!("creating replay consumer {name}"), stream, e))
}

/// What a replay consumer's state says, read from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayState {
    /// Matching messages not yet delivered.
    pub pending: u64,
    /// Delivered and not yet acknowledged (or terminated).
    pub ack_pending: u64,
    /// The stream sequence every message up to which is acknowledged.
    pub ack_floor: u64,
    /// The stream sequence of the last delivery (the one before the start, before any).
    pub delivered: u64,
}

impl ReplayState {
    /// Whether every message up to `bound` is settled: acknowledged (or terminated) up to
    /// it, or nothing is left at all.
    pub fn settled_up_to(&self, bound: u64) -> bool {
        self.ack_floor >= bound || (self.pending == 0 && self.ack_pending == 0)
    }
}

/// The state of consumer `name` on `stream`.
pub async fn state(stream: &Stream, name: &str) -> Result<ReplayState, ReplayConsumerError> {
    let info = stream
        .consumer_info(name)
        .await
        .map_err(|e| failed(format!("reading replay consumer {name}"), stream, e))?;
    Ok(ReplayState {
        pending: info.num_pending,
        ack_pending: info.num_ack_pending as u64,
        ack_floor: info.ack_floor.stream_sequence,
        delivered: info.delivered.stream_sequence,
    })
}

/// Deletes consumer `name` from `stream`.
pub async fn delete(stream: &Stream, name: &str) -> Result<(), ReplayConsumerError> {
    stream
        .delete_consumer(name)
        .await
        .map(|_| ())
        .map_err(|e| failed(format!("deleting replay consumer {name}"), stream, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceConfig {
        serde_json::from_value(serde_json::json!({
            "stream": "S", "consumer": "c", "subjects": "a.>", "ack_wait_ms": 7000,
            "max_deliver": 5, "max_ack_pending": 2000
        }))
        .unwrap()
    }

    #[test]
    fn a_replay_consumer_is_explicit_filtered_and_starts_where_asked() {
        let c = replay_consumer_config(
            "c-replay-7",
            &source(),
            &["a.>".into()],
            ReplayStart::Sequence(42),
        );
        assert_eq!(c.durable_name.as_deref(), Some("c-replay-7"));
        assert_eq!(c.ack_policy, AckPolicy::Explicit);
        assert_eq!(c.filter_subject, "a.>");
        assert!(c.filter_subjects.is_empty());
        assert_eq!(
            c.deliver_policy,
            DeliverPolicy::ByStartSequence { start_sequence: 42 }
        );
        assert_eq!(c.ack_wait, Duration::from_secs(7));
        assert_eq!((c.max_deliver, c.max_ack_pending), (5, 2000));
        assert_eq!(c.inactive_threshold, INACTIVE_THRESHOLD);
        let two = replay_consumer_config(
            "x",
            &source(),
            &["a.>".into(), "b.>".into()],
            ReplayStart::Time(OffsetDateTime::UNIX_EPOCH),
        );
        assert_eq!(two.filter_subject, "");
        assert_eq!(two.filter_subjects, vec!["a.>", "b.>"]);
        assert!(matches!(
            two.deliver_policy,
            DeliverPolicy::ByStartTime { .. }
        ));
    }

    #[test]
    fn names_are_per_process_and_role() {
        assert_eq!(replay_consumer_name("c", 12, ""), "c-replay-12");
        assert_eq!(replay_consumer_name("c", 12, "until"), "c-replay-12-until");
    }

    #[test]
    fn settled_means_acknowledged_past_the_bound_or_nothing_left() {
        let s = ReplayState {
            pending: 3,
            ack_pending: 1,
            ack_floor: 10,
            delivered: 14,
        };
        assert!(s.settled_up_to(10));
        assert!(!s.settled_up_to(11));
        let empty = ReplayState {
            pending: 0,
            ack_pending: 0,
            ack_floor: 4,
            delivered: 4,
        };
        assert!(empty.settled_up_to(100));
    }
}
