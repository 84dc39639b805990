//! Listens for the server's MAX_DELIVERIES and MSG_TERMINATED advisories of a sink's
//! consumer, counts them, and dead-letters a message the server gave up on while the
//! stream still holds it.
//!
//! jetsink dead-letters a failing message on its last delivery itself; this listener
//! covers the deliveries it never saw fail (a crash, an AckWait expiry while the process
//! was stopped), so no message leaves the consumer without a trace. In job-queue mode it
//! also publishes the job's `dead_lettered` result (after the copy is stored, or at once
//! without a dead-letter queue), so a client waiting for it gets an answer, not a timeout.

use async_nats::jetstream;
use futures::StreamExt;
use prometheus::IntCounter;
use serde::Deserialize;
use tokio::sync::watch;

use super::{DeadLetters, Reason};
use crate::config::IdempotencyKey;
use crate::envelope::{self, Delivery};
use crate::jobs::ResultPublisher;

/// The fields jetsink reads from an advisory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Advisory {
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
    /// The message's stream sequence.
    pub stream_seq: u64,
    /// Deliveries made (MAX_DELIVERIES only).
    #[serde(default)]
    pub deliveries: u64,
}

/// Which advisory a subject carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The server stopped redelivering.
    MaxDeliveries,
    /// A client TERMed the message.
    Terminated,
}

/// The subjects to subscribe to for a stream's consumer.
pub fn subjects(stream: &str, consumer: &str) -> [(Kind, String); 2] {
    [
        (
            Kind::MaxDeliveries,
            format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"),
        ),
        (
            Kind::Terminated,
            format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{consumer}"),
        ),
    ]
}

/// Parses an advisory body.
pub fn parse(body: &[u8]) -> Result<Advisory, serde_json::Error> {
    serde_json::from_slice(body)
}

/// Counters the listener updates.
pub struct Counters {
    /// MAX_DELIVERIES advisories.
    pub max_deliveries: IntCounter,
    /// MSG_TERMINATED advisories.
    pub terminated: IntCounter,
    /// Copies published for advisories.
    pub dlq_published: IntCounter,
    /// Copies that could not be published.
    pub dlq_failures: IntCounter,
}

/// Runs until `shutdown` turns true.
pub async fn listen(
    client: async_nats::Client,
    stream: jetstream::stream::Stream,
    consumer: String,
    dead_letters: Option<DeadLetters>,
    results: Option<ResultPublisher>,
    counters: Counters,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream_name = stream.cached_info().config.name.clone();
    let [(_, max_subject), (_, term_subject)] = subjects(&stream_name, &consumer);
    let (max_sub, term_sub) = match (
        client.subscribe(max_subject.clone()).await,
        client.subscribe(term_subject.clone()).await,
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(stream = %stream_name, consumer = %consumer, error = %e, "cannot subscribe to consumer advisories");
            return;
        }
    };
    let mut merged = futures::stream::select(
        max_sub.map(|m| (Kind::MaxDeliveries, m)),
        term_sub.map(|m| (Kind::Terminated, m)),
    );
    loop {
        let (kind, msg) = tokio::select! {
            next = merged.next() => match next {
                Some(x) => x,
                None => return,
            },
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let advisory = match parse(&msg.payload) {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "unreadable advisory");
                continue;
            }
        };
        match kind {
            Kind::Terminated => counters.terminated.inc(),
            Kind::MaxDeliveries => {
                counters.max_deliveries.inc();
                tracing::warn!(stream = %advisory.stream, consumer = %advisory.consumer, stream_sequence = advisory.stream_seq, deliveries = advisory.deliveries, "the server stopped redelivering a message (max_deliver reached)");
                if dead_letters.is_some() || results.is_some() {
                    let given_up = GivenUp {
                        dl: dead_letters.as_ref(),
                        results: results.as_ref(),
                    };
                    rescue(&stream, given_up, &advisory, &counters).await;
                }
            }
        }
    }
}

/// Where a message the server gave up on goes.
struct GivenUp<'a> {
    dl: Option<&'a DeadLetters>,
    results: Option<&'a ResultPublisher>,
}

/// Dead-letters the message an advisory names, if the stream still has it, and publishes
/// its `dead_lettered` result in job-queue mode.
async fn rescue(
    stream: &jetstream::stream::Stream,
    to: GivenUp<'_>,
    advisory: &Advisory,
    counters: &Counters,
) {
    let raw = match stream.get_raw_message(advisory.stream_seq).await {
        Ok(m) => m,
        Err(e) => {
            tracing::info!(stream_sequence = advisory.stream_seq, error = %e, "message no longer in the stream; nothing to dead-letter");
            return;
        }
    };
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for (name, values) in raw.headers.iter() {
        for v in values {
            pairs.push((name.as_ref(), v.as_str()));
        }
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let e = envelope::normalize(
        raw.subject.as_str(),
        Delivery {
            stream: &advisory.stream,
            consumer: &advisory.consumer,
            stream_sequence: raw.sequence,
            consumer_sequence: 0,
            delivered: advisory.deliveries,
            published: raw.time,
        },
        pairs,
        raw.payload.clone(),
        to.results
            .map_or(IdempotencyKey::StreamSequence, |r| r.idempotency_key()),
    );
    let why = format!(
        "the server stopped redelivering after {} deliveries (max_deliver)",
        advisory.deliveries
    );
    if let Some(dl) = to.dl {
        match dl
            .publish(&e, "max_deliveries", &why, Reason::MaxDeliveries)
            .await
        {
            Ok(()) => counters.dlq_published.inc(),
            Err(err) => {
                counters.dlq_failures.inc();
                tracing::error!(stream_sequence = advisory.stream_seq, error = %err, "could not dead-letter a message the server gave up on");
                return;
            }
        }
    }
    if let Some(results) = to.results {
        // A failure is counted and logged by the publisher; nothing is left to retry it.
        results.dead_lettered(&e, &why).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_server_advisory_shape() {
        let body = br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2024-01-01T00:00:00Z","stream":"ORDERS","consumer":"sink","stream_seq":42,"deliveries":3}"#;
        assert_eq!(
            parse(body).unwrap(),
            Advisory {
                stream: "ORDERS".into(),
                consumer: "sink".into(),
                stream_seq: 42,
                deliveries: 3
            }
        );
    }

    #[test]
    fn subjects_name_stream_and_consumer() {
        let [(k1, s1), (k2, s2)] = subjects("S", "c");
        assert_eq!(
            (k1, s1.as_str()),
            (
                Kind::MaxDeliveries,
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.c"
            )
        );
        assert_eq!(
            (k2, s2.as_str()),
            (
                Kind::Terminated,
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.c"
            )
        );
    }
}
