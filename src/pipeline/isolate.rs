//! Finds and settles the messages of a sink that the NATS client cannot read.
//!
//! A message whose header block the client cannot parse (a header name with a space, a
//! block that is not UTF-8, ...) is stored by the server like any other, but each delivery
//! of it drops the sink's connection: the client never hands it over, and the messages
//! delivered after it in the same pull are lost with the connection. Left alone it would
//! come back after every AckWait forever, dragging its batch-mates with it.
//!
//! So after every drop of the sink's connection (seen through its drop count, which a
//! pull that merely timed out leaves unchanged; a pull ends as soon as its connection
//! drops, keeping what it received), once the connection is back, the isolator
//! reads each consumer's outstanding range — stream sequences above the ack floor up to
//! the last delivered one, at most [`Isolator::scan_limit`] of them, lowest first since an
//! unreadable message pins the ack floor just below itself — and reads each stored message
//! raw ([`crate::nats::raw_read`]), never through the client's parser. Messages the sink
//! holds need no exclusion: the client delivered them, so their headers are readable. A
//! message on a subject the consumer does not filter, or deleted since, is skipped.
//! A message whose block [`header_block::check`] refuses is:
//!
//! - with a dead-letter queue: copied there with class `malformed_message` and its raw
//!   header block ([`crate::dlq::malformed`]), then ACKed, or TERMed with
//!   `ack_term_after_publish`. If the copy cannot be stored it stays unsettled and is
//!   tried again after its next delivery, which drops the connection again;
//! - without one: TERMed and logged at ERROR (sink, stream, sequence — never content).
//!
//! There is no client `Message` to acknowledge, so the acknowledgement is published to the
//! v1 subject `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`, which
//! nats-server 2.9 to 2.14 subscribes for every explicit-ack consumer. The server looks
//! the pending entry up by stream sequence (`processAckMsg`) and takes the delivery
//! sequence from it; the delivery sequence sent is the consumer's last one, so it is in
//! range for the server's checks, and the delivery count sent (1) only appears in the
//! TERM advisory.
//!
//! The batch-mates delivered after the culprit and lost with the connection are left for
//! the server to redeliver after AckWait: they are not NAKed, because from outside the
//! pipeline a lost one cannot be told from one another instance of the sink holds.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::Client;

use crate::dlq::malformed::Unreadable;
use crate::dlq::{DeadLetters, Reason};
use crate::metadata::subject_matches;
use crate::nats::header_block::{self, Malformed};
use crate::nats::raw_read::{self, Outstanding, RawReadError, RawStored};
use crate::nats::Drops;
use crate::pipeline::metrics::SinkMetrics;

/// Most stream sequences read after one drop when the consumer's MaxAckPending is
/// unlimited (or larger): the scan runs only after a drop, but must stay bounded.
const MAX_SCAN: u64 = 10_000;

/// Longest wait for the connection to come back before a scan; the reconnect delay starts
/// at 100 ms, so a reachable server is back well within it.
const RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Bound on the flush after an acknowledgement.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// The acknowledgement subject of stream sequence `sequence` (pure): the v1 layout, with
/// the consumer's last delivery sequence and a delivery count of 1.
pub(super) fn ack_subject(o: &Outstanding, sequence: u64) -> String {
    format!(
        "$JS.ACK.{}.{}.1.{}.{}.0.0",
        o.stream, o.consumer, sequence, o.delivered_consumer_seq
    )
}

/// Whether a stored message is one this consumer delivers and the client cannot read
/// (pure); `Ok` when it is fine or not this consumer's.
pub(super) fn judge(o: &Outstanding, m: &RawStored) -> Result<(), Malformed> {
    if !o.filters.is_empty() && !o.filters.iter().any(|f| subject_matches(f, &m.subject)) {
        return Ok(());
    }
    match &m.headers {
        Some(block) => header_block::check(block),
        None => Ok(()),
    }
}

/// One sink's isolator of unreadable messages.
pub(super) struct Isolator {
    sink: String,
    client: Client,
    drops: Drops,
    /// The drop count at the last complete scan.
    seen: u64,
    dead_letters: Option<DeadLetters>,
    /// TERM instead of ACK after a stored copy.
    term: bool,
    scan_limit: u64,
    /// (consumer, stream sequence) already settled, until the ack floor passes them.
    settled: BTreeSet<(String, u64)>,
    metrics: SinkMetrics,
}

impl Isolator {
    /// An isolator for a sink reading through `client`, whose drops `drops` counts.
    pub(super) fn new(
        sink: &str,
        client: Client,
        drops: Drops,
        dead_letters: Option<DeadLetters>,
        max_ack_pending: i64,
        metrics: SinkMetrics,
    ) -> Isolator {
        let term = dead_letters
            .as_ref()
            .is_some_and(|d| d.config().ack_term_after_publish);
        Isolator {
            sink: sink.to_string(),
            seen: drops.count(),
            client,
            drops,
            dead_letters,
            term,
            scan_limit: Isolator::scan_limit(max_ack_pending),
            settled: BTreeSet::new(),
            metrics,
        }
    }

    /// How many stream sequences one scan reads per consumer: the consumer's
    /// MaxAckPending (it cannot have more outstanding), at most [`MAX_SCAN`].
    pub(super) fn scan_limit(max_ack_pending: i64) -> u64 {
        match u64::try_from(max_ack_pending) {
            Ok(n) if n > 0 => n.min(MAX_SCAN),
            _ => MAX_SCAN,
        }
    }

    /// After a pull: if the connection dropped since the last scan, waits (up to
    /// [`RECONNECT_WAIT`]) for it to be back, scans every consumer and settles what the
    /// client cannot read. A scan that cannot finish (the connection is still down, a
    /// request failed) is tried again after the next pull.
    pub(super) async fn after_pull(&mut self, consumers: &[PullConsumer]) {
        let drops = self.drops.count();
        if drops == self.seen || !self.reconnected().await {
            return;
        }
        for c in consumers {
            if let Err(e) = self.scan(c).await {
                tracing::warn!(sink = %self.sink, error = %e, "looking for unreadable messages after a connection drop failed; trying again after the next pull");
                return;
            }
        }
        self.seen = drops;
        self.metrics.unreadable_scans.inc();
    }

    /// Whether the connection is up, waiting a bounded time for the reconnect.
    async fn reconnected(&self) -> bool {
        let deadline = tokio::time::Instant::now() + RECONNECT_WAIT;
        while self.client.connection_state() != State::Connected {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Settles what the client cannot read of `consumer`'s outstanding messages.
    async fn scan(&mut self, consumer: &PullConsumer) -> Result<(), RawReadError> {
        let o = raw_read::outstanding(consumer).await?;
        self.settled
            .retain(|(c, s)| c != &o.consumer || *s > o.floor);
        let range = o.candidates(self.scan_limit);
        tracing::debug!(sink = %self.sink, consumer = %o.consumer, from = range.start(), to = range.end(), "connection dropped; reading outstanding messages raw");
        for seq in range {
            if self.settled.contains(&(o.consumer.clone(), seq)) {
                continue;
            }
            let Some(m) = raw_read::read(&self.client, &o.stream, seq).await? else {
                continue;
            };
            if let Err(why) = judge(&o, &m) {
                if self.isolate(&o, &m, &why).await {
                    self.settled.insert((o.consumer.clone(), seq));
                }
            }
        }
        Ok(())
    }

    /// Dead-letters (or only terminates) one unreadable message; whether it is settled.
    async fn isolate(&self, o: &Outstanding, m: &RawStored, why: &Malformed) -> bool {
        let why = why.to_string();
        let Some(dl) = &self.dead_letters else {
            tracing::error!(sink = %self.sink, stream = %o.stream, consumer = %o.consumer, stream_sequence = m.sequence, error = %why, "the NATS client cannot read this message's headers and the sink has no dead-letter queue; terminating it (TERM: on a limits stream it stays stored until the stream's limits remove it; on a work-queue stream it is deleted now; on an interest stream once no other consumer still needs it). Add dead_letter to keep a copy");
            return self.settle(o, m.sequence, "+TERM").await;
        };
        let raw = Unreadable {
            stream: &o.stream,
            subject: &m.subject,
            sequence: m.sequence,
            headers: m.headers.as_deref().unwrap_or_default(),
            payload: m.payload.clone(),
        };
        if let Err(e) = dl.publish_unreadable(&raw, &why).await {
            self.metrics.dlq.failures.inc();
            tracing::error!(sink = %self.sink, stream = %o.stream, stream_sequence = m.sequence, error = %e, "cannot dead-letter a message the NATS client cannot read; it stays unsettled and is tried again after its next delivery");
            return false;
        }
        self.metrics.dlq.published(Reason::Malformed).inc();
        tracing::warn!(sink = %self.sink, stream = %o.stream, consumer = %o.consumer, stream_sequence = m.sequence, error = %why, "dead-lettered a message the NATS client cannot read");
        self.settle(o, m.sequence, if self.term { "+TERM" } else { "+ACK" })
            .await
    }

    /// Sends `kind` for stream sequence `sequence` and flushes; counts the message once
    /// the acknowledgement left.
    async fn settle(&self, o: &Outstanding, sequence: u64, kind: &'static str) -> bool {
        let subject = ack_subject(o, sequence);
        let sent = match self.client.publish(subject, kind.into()).await {
            Ok(()) => tokio::time::timeout(FLUSH_LIMIT, self.client.flush())
                .await
                .map_err(|_| "flush timed out".to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(()) => {
                self.metrics.malformed.inc();
                if kind == "+TERM" {
                    self.metrics.dlq.terminated.inc();
                }
                true
            }
            Err(e) => {
                self.metrics.ack_errors.inc();
                tracing::warn!(sink = %self.sink, stream = %o.stream, stream_sequence = sequence, error = %e, "cannot settle an unreadable message; tried again after its next delivery");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn outstanding(filters: &[&str]) -> Outstanding {
        Outstanding {
            stream: "ORDERS".into(),
            consumer: "db".into(),
            filters: filters.iter().map(|f| f.to_string()).collect(),
            floor: 10,
            delivered: 60,
            delivered_consumer_seq: 75,
        }
    }

    fn stored(subject: &str, headers: Option<&'static [u8]>) -> RawStored {
        RawStored {
            subject: subject.into(),
            sequence: 11,
            headers: headers.map(Bytes::from_static),
            payload: Bytes::from_static(b"x"),
        }
    }

    #[test]
    fn the_crafted_subject_reads_back_as_the_message_it_settles() {
        let o = outstanding(&[]);
        let s = ack_subject(&o, 42);
        assert_eq!(s, "$JS.ACK.ORDERS.db.1.42.75.0.0");
        let d = crate::nats::reply::parse(&s).unwrap();
        assert_eq!((d.stream, d.consumer), ("ORDERS", "db"));
        assert_eq!(d.stream_sequence, 42);
        assert_eq!(d.consumer_sequence, 75);
        assert_eq!(d.delivered, 1);
    }

    #[test]
    fn only_an_unreadable_block_on_a_filtered_subject_is_judged_malformed() {
        let bad: &'static [u8] = b"NATS/1.0\r\nBad Name: x\r\n\r\n";
        let o = outstanding(&["orders.>"]);
        assert!(judge(&o, &stored("orders.new", Some(bad))).is_err());
        assert!(judge(&o, &stored("other.new", Some(bad))).is_ok());
        assert!(judge(&o, &stored("orders.new", None)).is_ok());
        assert!(judge(&o, &stored("orders.new", Some(b"NATS/1.0\r\nA: b\r\n\r\n"))).is_ok());
        assert!(judge(&outstanding(&[]), &stored("any", Some(bad))).is_err());
    }

    #[test]
    fn the_scan_is_bounded_by_max_ack_pending() {
        assert_eq!(Isolator::scan_limit(500), 500);
        assert_eq!(Isolator::scan_limit(-1), MAX_SCAN);
        assert_eq!(Isolator::scan_limit(1_000_000), MAX_SCAN);
    }
}
