//! JetStream consumer pause (nats-server 2.11+): the server delivers nothing to a paused
//! consumer until its `pause_until` deadline, then resumes it by itself. `jetsink pause`
//! and `jetsink resume` set and clear that deadline through
//! `$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`; the daemon reads it back from consumer
//! info. A pause is the server's state, not a process's, so every instance on the consumer
//! stops at once, and a restarted daemon finds it.
//!
//! The server has no "paused until resumed": a pause always has a deadline (an empty one
//! resumes). Without `--until` or `--for`, jetsink pauses until [`until_resumed`], the
//! last second of year 9999, the latest time RFC 3339 can write.

use std::time::Duration;

use async_nats::jetstream::consumer::Info;
use async_nats::jetstream::stream::Stream;
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, PrimitiveDateTime};

/// 9999-12-31T23:59:59Z: the deadline of a pause that lasts until someone resumes it.
pub fn until_resumed() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(253_402_300_799)
        .unwrap_or_else(|_| PrimitiveDateTime::MAX.assume_utc())
}

/// A consumer's pause, as its info states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paused {
    /// How long it stays paused, counted from when the server answered (`None` when the
    /// answer did not say).
    pub remaining: Option<Duration>,
    /// The deadline (`config.pause_until`), for people to read.
    pub until: Option<OffsetDateTime>,
}

/// The pause a consumer info answer reports, `None` when the consumer is not paused (or
/// the server, older than 2.11, knows no pause). Pure.
pub fn paused(info: &Info) -> Option<Paused> {
    info.paused.then_some(Paused {
        remaining: info.pause_remaining,
        until: info.config.pause_until,
    })
}

/// A deadline as the commands and `/readyz` show it: RFC 3339 in UTC to the second, or
/// `resumed` for [`until_resumed`] (so "paused until resumed"). Pure.
pub fn describe_until(until: Option<OffsetDateTime>) -> String {
    let Some(t) = until else {
        return "a deadline the server did not report".into();
    };
    if t >= until_resumed() {
        return "resumed".into();
    }
    let t = t.to_offset(time::UtcOffset::UTC);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// Why a pause or resume request failed.
#[derive(Debug, thiserror::Error)]
#[error("{action} consumer {consumer} of stream {stream}: {message}")]
pub struct PauseError {
    /// `pausing` or `resuming`.
    pub action: &'static str,
    /// The stream.
    pub stream: String,
    /// The consumer.
    pub consumer: String,
    /// The server's or client's reason.
    pub message: String,
}

/// Pauses `consumer` until `until`; what the server then reports.
pub async fn pause(
    stream: &Stream,
    consumer: &str,
    until: OffsetDateTime,
) -> Result<Option<Paused>, PauseError> {
    let r = stream
        .pause_consumer(consumer, until)
        .await
        .map_err(|e| failed("pausing", stream, consumer, e))?;
    Ok(r.paused.then_some(Paused {
        remaining: r.pause_remaining,
        until: Some(r.pause_until),
    }))
}

/// Resumes `consumer` at once (it may not have been paused).
pub async fn resume(stream: &Stream, consumer: &str) -> Result<(), PauseError> {
    stream
        .resume_consumer(consumer)
        .await
        .map(|_| ())
        .map_err(|e| failed("resuming", stream, consumer, e))
}

fn failed(
    action: &'static str,
    stream: &Stream,
    consumer: &str,
    e: impl std::fmt::Display,
) -> PauseError {
    PauseError {
        action,
        stream: stream.cached_info().config.name.clone(),
        consumer: consumer.to_string(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(extra: serde_json::Value) -> Info {
        let mut v = serde_json::json!({
            "stream_name": "ORDERS", "name": "to-db", "created": "2026-01-01T00:00:00Z",
            "config": {"durable_name": "to-db", "ack_policy": "explicit", "deliver_policy": "all", "replay_policy": "instant"},
            "delivered": {"consumer_seq": 0, "stream_seq": 0},
            "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
            "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0, "num_pending": 0
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                o.insert(k.clone(), x.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_paused_consumer_info_gives_the_remaining_time_and_the_deadline() {
        let i = info(serde_json::json!({
            "config": {"durable_name": "to-db", "ack_policy": "explicit", "deliver_policy": "all",
                       "replay_policy": "instant", "pause_until": "2026-03-01T12:10:00.123456789Z"},
            "paused": true, "pause_remaining": 90_000_000_000u64
        }));
        let p = paused(&i).unwrap();
        assert_eq!(p.remaining, Some(Duration::from_secs(90)));
        assert_eq!(describe_until(p.until), "2026-03-01T12:10:00Z");
    }

    #[test]
    fn an_answer_without_the_fields_is_not_paused() {
        // nats-server 2.9 and 2.10 say nothing of a pause.
        assert_eq!(paused(&info(serde_json::json!({}))), None);
        // A deadline that passed stays in the config, but the server says not paused.
        let i = info(serde_json::json!({
            "config": {"durable_name": "to-db", "ack_policy": "explicit", "deliver_policy": "all",
                       "replay_policy": "instant", "pause_until": "2026-03-01T12:10:00Z"},
            "paused": false
        }));
        assert_eq!(paused(&i), None);
    }

    #[test]
    fn the_far_deadline_reads_as_until_resumed() {
        assert_eq!(
            until_resumed().format(&Rfc3339).unwrap(),
            "9999-12-31T23:59:59Z"
        );
        assert_eq!(describe_until(Some(until_resumed())), "resumed");
        let t = OffsetDateTime::from_unix_timestamp(1_772_366_400)
            .unwrap()
            .to_offset(time::UtcOffset::from_hms(1, 0, 0).unwrap());
        assert_eq!(describe_until(Some(t)), "2026-03-01T12:00:00Z");
        assert_eq!(describe_until(None), "a deadline the server did not report");
    }
}
