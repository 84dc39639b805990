//! Fakes for the pipeline's unit tests: envelopes and batches, a scripted destination, a
//! recording acknowledger and a recording dead-letter queue, all writing into one ordered
//! log so a test can assert what happened before what.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use async_trait::async_trait;
use bytes::Bytes;
use time::OffsetDateTime;

use super::acks::Acknowledger;
use super::batch::Batch;
use super::disposal::DeadLetterOut;
use crate::config::IdempotencyKey;
use crate::dlq::{PublishFailed, Reason};
use crate::envelope::{normalize, Delivery, Envelope};
use crate::sinks::{Sink, SinkError};

/// A first-or-later delivery of stream sequence `seq`.
pub(super) fn envelope(seq: u64, delivered: u64) -> Envelope {
    normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "sink",
            stream_sequence: seq,
            consumer_sequence: seq + 100,
            delivered,
            published: OffsetDateTime::UNIX_EPOCH,
        },
        Vec::new(),
        Bytes::from_static(b"{}"),
        IdempotencyKey::StreamSequence,
    )
}

/// The reply subject the fakes give stream sequence `seq`.
pub(super) fn reply(seq: u64) -> Subject {
    Subject::from(format!("reply.{seq}"))
}

/// A batch of `(stream sequence, delivered)` pairs.
pub(super) fn batch_of(pairs: &[(u64, u64)]) -> Batch {
    Batch {
        envelopes: pairs.iter().map(|&(s, d)| envelope(s, d)).collect(),
        replies: pairs.iter().map(|&(s, _)| reply(s)).collect(),
    }
}

/// First deliveries of `seqs`.
pub(super) fn batch(seqs: std::ops::RangeInclusive<u64>) -> Batch {
    let pairs: Vec<(u64, u64)> = seqs.map(|s| (s, 1)).collect();
    batch_of(&pairs)
}

/// One thing that happened, in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Event {
    /// The destination was asked to write these sequences, with this outcome.
    Write { seqs: Vec<u64>, ok: bool },
    /// Committed messages ACKed.
    Ack(Vec<u64>),
    /// Another acknowledgement (`+WPI`, NAK, TERM, ACK after a dead-letter copy).
    Send(Kind, Vec<u64>),
    /// A dead-letter copy stored.
    DeadLetter { seq: u64, reason: Reason },
}

/// The acknowledgement kinds, comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Ack,
    Nak(Option<Duration>),
    Progress,
    Term,
}

impl From<AckKind> for Kind {
    fn from(k: AckKind) -> Kind {
        match k {
            AckKind::Ack => Kind::Ack,
            AckKind::Nak(d) => Kind::Nak(d),
            AckKind::Progress => Kind::Progress,
            AckKind::Term => Kind::Term,
            AckKind::Next => panic!("the runner never sends +NXT"),
        }
    }
}

/// The ordered log every fake writes into.
#[derive(Debug, Clone, Default)]
pub(super) struct Log(Arc<Recorded>);

#[derive(Debug, Default)]
pub(super) struct Recorded {
    events: Mutex<Vec<Event>>,
    /// Signalled on every event, for a fake that blocks its thread until one comes.
    changed: Condvar,
    /// The error class of each dead-letter copy, by stream sequence, in order.
    classes: Mutex<Vec<(u64, String)>>,
    /// When each event happened, on tokio's clock (same order as `events`).
    times: Mutex<Vec<tokio::time::Instant>>,
}

impl Log {
    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        self.0.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn push(&self, e: Event) {
        let mut events = self.lock();
        events.push(e);
        self.0
            .times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tokio::time::Instant::now());
        drop(events);
        self.0.changed.notify_all();
    }

    /// Everything so far, each with when it happened on tokio's clock.
    pub(super) fn timed(&self) -> Vec<(tokio::time::Instant, Event)> {
        let events = self.lock().clone();
        let times = self
            .0
            .times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        times.into_iter().zip(events).collect()
    }

    /// A write of `batch` with its outcome.
    pub(super) fn push_write(&self, batch: &[Envelope], ok: bool) {
        let seqs = batch.iter().map(|e| e.stream_sequence).collect();
        self.push(Event::Write { seqs, ok });
    }

    /// Everything so far.
    pub(super) fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// The error class of each dead-letter copy stored, with its stream sequence.
    pub(super) fn dead_letter_classes(&self) -> Vec<(u64, String)> {
        self.0
            .classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Blocks the thread until an event satisfies `seen`, or `limit` passes (so a broken
    /// build fails instead of hanging); whether one did.
    pub(super) fn block_until(&self, limit: Duration, seen: impl Fn(&Event) -> bool) -> bool {
        let events = self.lock();
        let (events, _) = self
            .0
            .changed
            .wait_timeout_while(events, limit, |events| !events.iter().any(&seen))
            .unwrap_or_else(|p| p.into_inner());
        events.iter().any(seen)
    }
}

fn seqs_of(replies: &[Subject]) -> Vec<u64> {
    replies
        .iter()
        .map(|r| {
            r.as_str()
                .trim_start_matches("reply.")
                .parse()
                .unwrap_or(u64::MAX)
        })
        .collect()
}

/// An acknowledger that records instead of sending.
#[derive(Debug, Clone, Default)]
pub(super) struct RecordingAcks(pub(super) Log);

impl Acknowledger for RecordingAcks {
    async fn committed(&self, replies: Vec<Subject>) {
        self.0.push(Event::Ack(seqs_of(&replies)));
    }

    async fn send(&self, replies: Vec<Subject>, kind: AckKind) {
        self.0.push(Event::Send(kind.into(), seqs_of(&replies)));
    }

    async fn nak_each(&self, items: Vec<(Subject, Duration)>) {
        for (reply, delay) in items {
            self.0
                .push(Event::Send(Kind::Nak(Some(delay)), seqs_of(&[reply])));
        }
    }
}

/// What the fake destination answers to a write: the sequences of the part and the call
/// number (0 for the first write).
pub(super) type Script = Box<dyn FnMut(&[u64], usize) -> Result<(), SinkError> + Send>;

/// A destination that answers from a script and may take time (on tokio's clock).
pub(super) struct FakeSink {
    log: Log,
    script: Script,
    calls: usize,
    /// How long each write takes.
    pub(super) takes: Duration,
}

impl FakeSink {
    /// A destination answering with `script`.
    pub(super) fn new(log: Log, script: Script) -> FakeSink {
        FakeSink {
            log,
            script,
            calls: 0,
            takes: Duration::ZERO,
        }
    }
}

#[async_trait]
impl Sink for FakeSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if !self.takes.is_zero() {
            tokio::time::sleep(self.takes).await;
        }
        let seqs: Vec<u64> = batch.iter().map(|e| e.stream_sequence).collect();
        let out = (self.script)(&seqs, self.calls);
        self.calls += 1;
        self.log.push_write(batch, out.is_ok());
        out
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A dead-letter queue that records and stores every copy.
pub(super) struct FakeDeadLetters(pub(super) Log);

#[async_trait]
impl DeadLetterOut for FakeDeadLetters {
    async fn publish(
        &self,
        e: &Envelope,
        class: &str,
        _why: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed> {
        self.0
             .0
            .classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((e.stream_sequence, class.to_string()));
        self.0.push(Event::DeadLetter {
            seq: e.stream_sequence,
            reason,
        });
        Ok(())
    }
}
