//! Unit tests of [`Settler::settle`] with a scripted destination, a recording acknowledger
//! and a recording dead-letter queue, on tokio's paused clock: no wall-clock waits. The
//! one exception is a write that blocks its thread, which needs the multi-threaded
//! runtime; it waits on the recorder, not on the clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::batch::Prepared;
use super::disposal::{DeadLetterOut, Disposal, Policy, Redelivery};
use super::keeper::{Keeper, Slot};
use super::puller::Ahead;
use super::settle::{Settler, SettlerParts, Stop};
use super::testing::{batch, Event, FakeDeadLetters, FakeSink, Kind, Log, RecordingAcks, Script};
use crate::config::{Jitter, RetryConfig};
use crate::dlq::Reason;
use crate::envelope::Envelope;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::sinks::{Sink, SinkError, Written};

/// AckWait of the tests: `+WPI` is due every 5 s.
/// A wind-down deadline no test reaches.
fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(3_600)
}

const ACK_WAIT: Duration = Duration::from_secs(10);
/// The delay of a NAK that hands a refused message back.
const HAND_BACK: Duration = Duration::from_secs(30);
/// `delivery.retry.max_held_ms` of the tests: ten minutes.
const MAX_HELD: Duration = Duration::from_secs(600);

struct Rig {
    log: Log,
    settler: Settler<RecordingAcks>,
    metrics: crate::pipeline::SinkMetrics,
    stop: Stop,
    signal: watch::Sender<bool>,
}

/// A settler over `sink`; with `dead_letters`, refused messages are dead-lettered on their
/// first delivery (TERM instead of ACK with `term`).
fn rig(log: &Log, sink: FakeSink, dead_letters: bool, term: bool) -> Rig {
    rig_waiting(log, Box::new(sink), dead_letters, term, ACK_WAIT)
}

/// [`rig`] with any destination and AckWait.
fn rig_waiting(
    log: &Log,
    sink: Box<dyn Sink>,
    dead_letters: bool,
    term: bool,
    ack_wait: Duration,
) -> Rig {
    rig_delivering(log, sink, dead_letters, term, ack_wait, -1)
}

/// [`rig_waiting`] over a consumer with MaxDeliver `max_deliver`.
fn rig_delivering(
    log: &Log,
    sink: Box<dyn Sink>,
    dead_letters: bool,
    term: bool,
    ack_wait: Duration,
    max_deliver: i64,
) -> Rig {
    let acks = RecordingAcks(log.clone());
    let metrics = crate::pipeline::SinkMetrics::new(&Metrics::new(), "t");
    let policy = Policy {
        redelivery: Redelivery::Fixed(HAND_BACK),
        attempts: if dead_letters { 1 } else { u64::MAX },
        max_deliver,
        term,
    };
    let dl = dead_letters.then(|| Arc::new(FakeDeadLetters(log.clone())) as Arc<dyn DeadLetterOut>);
    let disposal = Disposal::new("t", policy, metrics.clone(), dl);
    let keeper = Keeper::new(acks.clone(), ack_wait / 2, metrics.progress_acks.clone());
    let parts = SettlerParts {
        name: "t".into(),
        disposal,
        metrics: metrics.clone(),
        health: Health::default().sink("t"),
        retry: RetryConfig {
            initial_backoff_ms: 8_000,
            max_backoff_ms: 30_000,
            multiplier: 2.0,
            jitter: Jitter::None,
            max_held_ms: MAX_HELD.as_millis() as u64,
            refused_delay_ms: None,
        },
        keeper,
    };
    let (signal, rx) = watch::channel(false);
    Rig {
        log: log.clone(),
        settler: Settler::new(sink, acks, parts),
        metrics,
        stop: Stop::new(rx, Duration::from_secs(20)),
        signal,
    }
}

fn script(f: impl FnMut(&[u64], usize) -> Result<(), SinkError> + Send + 'static) -> Script {
    Box::new(f)
}

impl Rig {
    /// The slot the keeper watches, where a pull task would leave its batch.
    fn slot(&self) -> Slot {
        self.settler.keeper().slot().clone()
    }

    /// Nothing pulled ahead, pulling into the keeper's slot.
    fn ahead(&self) -> Ahead {
        Ahead::new("t", &self.slot())
    }

    /// Settles `seqs` and waits for the ACK tasks.
    async fn settle(&mut self, seqs: std::ops::RangeInclusive<u64>) {
        let mut ahead = self.ahead();
        self.settler
            .settle(batch(seqs), None, &mut ahead, &mut self.stop)
            .await;
        self.settler.finish(&mut ahead, &mut self.stop, far()).await;
        self.settler.drain_acks(far()).await;
    }

    /// Settles `1..=3` while the batch in the slot (`4..=6`) is written ahead, then takes
    /// that batch into hand and settles it, and waits for the ACK tasks.
    async fn settle_with_one_written_ahead(&mut self, ahead: &mut Ahead) {
        self.settler
            .settle(batch(1..=3), None, ahead, &mut self.stop)
            .await;
        let writing = ahead.take_writing().expect("4..=6 is written ahead");
        let (p, first) = self
            .settler
            .take_written(writing, ahead, None, &self.stop)
            .await
            .expect("not cancelled");
        self.settler
            .settle(p.batch, Some(first), ahead, &mut self.stop)
            .await;
        self.settler.finish(ahead, &mut self.stop, far()).await;
        self.settler.drain_acks(far()).await;
    }

    /// Every sequence ACKed after commit, in order of the ACKs.
    fn acked(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for e in self.log.events() {
            if let Event::Ack(s) = e {
                out.extend(s);
            }
        }
        out
    }

    fn sent(&self, kind: Kind) -> Vec<Vec<u64>> {
        self.log
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Send(k, s) if k == kind => Some(s),
                _ => None,
            })
            .collect()
    }
}

/// Fails the part holding `culprit`, naming its index.
fn refuse(culprit: u64) -> Script {
    script(
        move |seqs, _| match seqs.iter().position(|s| *s == culprit) {
            Some(i) => Err(SinkError::Permanent {
                index: Some(i),
                message: "bad row".into(),
            }),
            None => Ok(()),
        },
    )
}

#[tokio::test(start_paused = true)]
async fn a_commit_acks_every_message_after_the_write() {
    let log = Log::default();
    let mut r = rig(
        &log,
        FakeSink::new(log.clone(), script(|_, _| Ok(()))),
        false,
        false,
    );
    r.settle(1..=5).await;
    assert_eq!(
        log.events(),
        vec![
            Event::Write {
                seqs: vec![1, 2, 3, 4, 5],
                ok: true
            },
            Event::Ack(vec![1, 2, 3, 4, 5]),
        ]
    );
    assert_eq!(r.metrics.batches_committed.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_named_culprit_is_split_off_and_handed_back_the_rest_commits() {
    let log = Log::default();
    let mut r = rig(&log, FakeSink::new(log.clone(), refuse(3)), false, false);
    r.settle(1..=6).await;
    let writes: Vec<Event> = log
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Write { .. }))
        .collect();
    let w = |seqs: Vec<u64>, ok| Event::Write { seqs, ok };
    assert_eq!(
        writes,
        vec![
            w(vec![1, 2, 3, 4, 5, 6], false),
            w(vec![1, 2], true),
            w(vec![3], false),
            w(vec![4, 5, 6], true),
        ]
    );
    let mut acked = r.acked();
    acked.sort_unstable();
    assert_eq!(acked, vec![1, 2, 4, 5, 6]);
    // Without a dead-letter queue the culprit is NAKed with a delay, never ACKed.
    assert_eq!(r.sent(Kind::Nak(Some(HAND_BACK))), vec![vec![3]]);
    assert!(r.sent(Kind::Ack).is_empty());
    assert_eq!(r.metrics.batches_isolated.get(), 1);
    assert_eq!(r.metrics.poison_isolated.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_culprit_is_dead_lettered_then_acked_or_termed() {
    for term in [false, true] {
        let log = Log::default();
        let mut r = rig(&log, FakeSink::new(log.clone(), refuse(2)), true, term);
        r.settle(1..=4).await;
        let mut acked = r.acked();
        acked.sort_unstable();
        assert_eq!(acked, vec![1, 3, 4]);
        let events = log.events();
        let copied = events
            .iter()
            .position(|e| {
                *e == Event::DeadLetter {
                    seq: 2,
                    reason: Reason::Destination,
                }
            })
            .unwrap_or_else(|| panic!("no dead-letter copy in {events:?}"));
        let kind = if term { Kind::Term } else { Kind::Ack };
        let settled = events
            .iter()
            .position(|e| *e == Event::Send(kind, vec![2]))
            .unwrap_or_else(|| panic!("culprit not settled in {events:?}"));
        assert!(
            copied < settled,
            "the original is settled only after the copy"
        );
        assert!(r.sent(Kind::Nak(Some(HAND_BACK))).is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_without_an_index_halves_until_the_culprit_stands_alone() {
    let log = Log::default();
    let sink = FakeSink::new(
        log.clone(),
        script(|seqs, _| match seqs.contains(&4) {
            true => Err(SinkError::Permanent {
                index: None,
                message: "bad row".into(),
            }),
            false => Ok(()),
        }),
    );
    let mut r = rig(&log, sink, false, false);
    r.settle(1..=4).await;
    let mut acked = r.acked();
    acked.sort_unstable();
    assert_eq!(acked, vec![1, 2, 3]);
    assert_eq!(r.sent(Kind::Nak(Some(HAND_BACK))), vec![vec![4]]);
}

#[tokio::test(start_paused = true)]
async fn the_parts_of_a_split_batch_waiting_behind_a_held_part_are_kept_alive() {
    let log = Log::default();
    // The whole batch is refused for its last message; the part before the culprit then
    // fails once transiently (held 8 s) before it commits, while the culprit's own part
    // waits behind it.
    let sink = FakeSink::new(
        log.clone(),
        script(
            |seqs, call| match (call, seqs.iter().position(|s| *s == 4)) {
                (1, None) => Err(SinkError::Transient {
                    message: "connection refused".into(),
                }),
                (_, Some(i)) => Err(SinkError::Permanent {
                    index: Some(i),
                    message: "bad row".into(),
                }),
                _ => Ok(()),
            },
        ),
    );
    let mut r = rig(&log, sink, false, false);
    r.settle(1..=4).await;
    let events = log.events();
    let progress = r.sent(Kind::Progress);
    assert_eq!(progress, vec![vec![1, 2, 3, 4]], "{events:?}");
    assert_eq!(r.acked(), vec![1, 2, 3]);
    assert_eq!(
        r.sent(Kind::Nak(Some(HAND_BACK))),
        vec![vec![4]],
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_holds_with_keep_alive_and_acks_only_after_the_commit() {
    let log = Log::default();
    let sink = FakeSink::new(
        log.clone(),
        script(|_, call| match call {
            0 | 1 => Err(SinkError::Transient {
                message: "connection refused".into(),
            }),
            _ => Ok(()),
        }),
    );
    let mut r = rig(&log, sink, false, false);
    // A batch pulled ahead meanwhile is kept alive too.
    let mut ahead = Ahead::with_waiting(
        "t",
        &r.slot(),
        super::batch::Prepared {
            pulled: 1,
            batch: batch(9..=9),
            ..Default::default()
        },
    )
    .await;
    let started = tokio::time::Instant::now();
    r.settler
        .settle(batch(1..=3), None, &mut ahead, &mut r.stop)
        .await;
    let mut rest = r.ahead();
    r.settler.finish(&mut rest, &mut r.stop, far()).await;
    r.settler.drain_acks(far()).await;
    // Backoff 8 s then 16 s: the commit comes 24 s in, on the paused clock.
    assert_eq!(started.elapsed(), Duration::from_secs(24));
    let events = log.events();
    let commit = events
        .iter()
        .position(|e| matches!(e, Event::Write { ok: true, .. }))
        .unwrap_or_else(|| panic!("no commit in {events:?}"));
    let first_ack = events
        .iter()
        .position(|e| matches!(e, Event::Ack(_)))
        .unwrap_or_else(|| panic!("no ACK in {events:?}"));
    assert!(first_ack > commit, "no ACK before the commit: {events:?}");
    let writes = events
        .iter()
        .filter(|e| matches!(e, Event::Write { .. }))
        .count();
    assert_eq!(writes, 3);
    // +WPI every 5 s of the 24 s hold, for the held messages and the waiting batch.
    let progress = r.sent(Kind::Progress);
    assert_eq!(progress.len(), 4, "{events:?}");
    assert!(progress.iter().all(|p| *p == vec![1, 2, 3, 9]));
    assert_eq!(r.acked(), vec![1, 2, 3]);
    assert_eq!(r.metrics.batches_retried.get(), 2);
    assert!(r.settler.healthy());
}

#[tokio::test(start_paused = true)]
async fn a_long_write_is_kept_alive_while_it_blocks() {
    let log = Log::default();
    let mut sink = FakeSink::new(log.clone(), script(|_, _| Ok(())));
    sink.takes = Duration::from_secs(12);
    let mut r = rig(&log, sink, false, false);
    r.settle(1..=2).await;
    assert_eq!(r.sent(Kind::Progress), vec![vec![1, 2], vec![1, 2]]);
    let events = log.events();
    assert!(matches!(events.last(), Some(Event::Ack(s)) if *s == vec![1, 2]));
}

/// A destination like the file and SQLite sinks: its write blocks the runner's thread in
/// `block_in_place`. Meanwhile a batch pulled ahead arrives, and the write returns only
/// once the recorder has seen `+WPI` for both (or after a bound a broken build hits).
struct BlockingSink {
    log: Log,
    /// Where the pull task would leave the batch pulled ahead (the keeper's slot, set once
    /// the settler exists).
    arrives: Arc<std::sync::Mutex<Option<Slot>>>,
}

#[async_trait]
impl Sink for BlockingSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        let slot = self.arrives.lock().ok().and_then(|s| s.clone());
        tokio::task::block_in_place(|| {
            if let Some(slot) = slot {
                tokio::runtime::Handle::current().block_on(slot.put(
                    Prepared {
                        pulled: 1,
                        batch: super::testing::batch(9..=9),
                        ..Default::default()
                    },
                    crate::pipeline::room::Room::batches(1),
                    false,
                ));
            }
            let kept = self.log.block_until(
                Duration::from_secs(30),
                |e| matches!(e, Event::Send(Kind::Progress, s) if s.contains(&1) && s.contains(&9)),
            );
            self.log.push_write(batch, kept);
            Ok(())
        })
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_blocking_its_thread_is_kept_alive_while_it_blocks() {
    let log = Log::default();
    let arrives = Arc::new(std::sync::Mutex::new(None::<Slot>));
    // +WPI due every 100 ms; the write blocks until one was sent.
    let ack_wait = Duration::from_millis(200);
    let sink = BlockingSink {
        log: log.clone(),
        arrives: arrives.clone(),
    };
    let mut r = rig_waiting(&log, Box::new(sink), false, false, ack_wait);
    if let Ok(mut a) = arrives.lock() {
        *a = Some(r.slot());
    }
    let mut ahead = r.ahead();
    r.settler
        .settle(batch(1..=2), None, &mut ahead, &mut r.stop)
        .await;
    r.settler.finish(&mut ahead, &mut r.stop, far()).await;
    r.settler.drain_acks(far()).await;
    let events = log.events();
    // The write returned only after the recorder saw +WPI: the runner's thread was
    // blocked in it all along.
    let write = events
        .iter()
        .position(|e| {
            *e == Event::Write {
                seqs: vec![1, 2],
                ok: true,
            }
        })
        .unwrap_or_else(|| panic!("no +WPI while the write blocked: {events:?}"));
    // Before it, only +WPI: for the held part, and with the batch that arrived meanwhile
    // (a first one may come before that batch on a loaded machine).
    let progress = Event::Send(Kind::Progress, vec![1, 2, 9]);
    assert!(events[..write].contains(&progress), "{events:?}");
    assert!(
        events[..write]
            .iter()
            .all(|e| *e == progress || *e == Event::Send(Kind::Progress, vec![1, 2])),
        "{events:?}"
    );
    // The keep-alive lets go of the written part before its ACK: no +WPI for it follows
    // (the batch pulled ahead is still kept until the wind-down hands it back).
    let acked = events
        .iter()
        .position(|e| *e == Event::Ack(vec![1, 2]))
        .unwrap_or_else(|| panic!("no ACK: {events:?}"));
    assert!(
        events[acked..].iter().all(
            |e| !matches!(e, Event::Send(Kind::Progress, s) if s.contains(&1) || s.contains(&2))
        ),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_held_past_the_shutdown_deadline_is_handed_back() {
    let log = Log::default();
    let sink = FakeSink::new(
        log.clone(),
        script(|_, _| {
            Err(SinkError::Transient {
                message: "down".into(),
            })
        }),
    );
    let mut r = rig(&log, sink, false, false);
    let signal = r.signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let _ = signal.send(true);
    });
    let started = tokio::time::Instant::now();
    r.settle(1..=3).await;
    // Signalled at 3 s, abandoned at the 20 s shutdown timeout after it.
    assert_eq!(started.elapsed(), Duration::from_secs(23));
    assert_eq!(r.sent(Kind::Nak(None)), vec![vec![1, 2, 3]]);
    assert!(r.acked().is_empty());
    assert_eq!(r.metrics.batches_abandoned.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_wind_down_ends_by_its_deadline_even_with_a_pull_that_never_returns() {
    let log = Log::default();
    let sink = FakeSink::new(log.clone(), script(|_, _| Ok(())));
    let mut r = rig(&log, sink, false, false);
    let mut ahead = Ahead::with_stuck_pull("t", &r.slot());
    let by = tokio::time::Instant::now() + Duration::from_secs(3);
    r.settler.finish(&mut ahead, &mut r.stop, by).await;
    r.settler.drain_acks(by).await;
    // On the paused clock: time moved only as far as the deadline, not to the pull's end.
    assert_eq!(tokio::time::Instant::now(), by);
}

#[tokio::test(start_paused = true)]
async fn the_wind_down_never_ends_later_than_shortly_after_the_shutdown_deadline() {
    let (tx, rx) = watch::channel(false);
    let mut stop = Stop::new(rx, Duration::from_secs(10));
    let start = tokio::time::Instant::now();
    // Before shutdown, only the wait bounds it.
    assert_eq!(
        stop.finish_by(Duration::from_secs(60)),
        start + Duration::from_secs(60)
    );
    tx.send_replace(true);
    assert!(stop.stopping());
    // A long batch timeout cannot carry the wind-down past deadline + 2 s...
    assert_eq!(
        stop.finish_by(Duration::from_secs(60)),
        start + Duration::from_secs(12)
    );
    // ...and a short one ends sooner.
    assert_eq!(
        stop.finish_by(Duration::from_secs(1)),
        start + Duration::from_secs(1)
    );
}

/// When each write happened on tokio's (paused) clock, with its sequences.
type Writes = Arc<std::sync::Mutex<Vec<(Duration, Vec<u64>)>>>;

/// Fails every part holding `culprit` with an error nobody recognised, and records each
/// write in `writes`.
fn unclassified_for(culprit: u64, writes: Writes) -> Script {
    let started = tokio::time::Instant::now();
    script(move |seqs, _| {
        if let Ok(mut w) = writes.lock() {
            w.push((started.elapsed(), seqs.to_vec()));
        }
        if seqs.contains(&culprit) {
            Err(SinkError::Unclassified {
                message: "postgres SQLSTATE 99999 (error)".into(),
            })
        } else {
            Ok(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn an_unclassified_failure_is_held_for_max_held_then_split_and_the_culprit_dead_lettered_as_unclassified(
) {
    let log = Log::default();
    let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = FakeSink::new(log.clone(), unclassified_for(3, writes.clone()));
    let mut r = rig(&log, sink, true, false);
    r.settle(1..=4).await;
    let writes = writes.lock().map(|w| w.clone()).unwrap_or_default();
    // The whole batch is retried with backoff while the bound runs...
    let whole: Vec<Duration> = writes
        .iter()
        .filter(|(_, s)| s.len() == 4)
        .map(|(t, _)| *t)
        .collect();
    assert!(whole.len() > 1, "{writes:?}");
    assert!(
        whole.iter().rev().skip(1).all(|t| *t < MAX_HELD),
        "{writes:?}"
    );
    // ... and split only once it has failed that way for the whole bound.
    let first_split = writes
        .iter()
        .position(|(_, s)| s.len() < 4)
        .unwrap_or_else(|| panic!("never split: {writes:?}"));
    assert!(writes[first_split].0 >= MAX_HELD, "{writes:?}");
    // Its parts are not held again: each unclassified failure of a part splits it at once.
    let parts: Vec<Vec<u64>> = writes[first_split..]
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    assert_eq!(parts, vec![vec![1, 2], vec![3, 4], vec![3], vec![4]]);
    assert!(writes[first_split..]
        .iter()
        .all(|(t, _)| *t == writes[first_split].0));
    let mut acked = r.acked();
    acked.sort_unstable();
    assert_eq!(acked, vec![1, 2, 4]);
    assert_eq!(
        log.dead_letter_classes(),
        vec![(3, "unclassified".to_string())]
    );
    assert_eq!(
        r.sent(Kind::Ack),
        vec![vec![3]],
        "ACKed after its copy was stored"
    );
    assert_eq!(
        r.metrics.errors_of(crate::sinks::ErrorClass::Unclassified) as usize,
        writes.len() - 2
    );
    assert_eq!(r.metrics.batches_isolated.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_known_transient_failure_is_held_without_bound_and_dead_letters_nothing() {
    let log = Log::default();
    // Down for two hours of the paused clock: twelve times the bound.
    let started = tokio::time::Instant::now();
    let sink = FakeSink::new(
        log.clone(),
        script(move |_, _| {
            if started.elapsed() < Duration::from_secs(7_200) {
                Err(SinkError::Transient {
                    message: "connection refused".into(),
                })
            } else {
                Ok(())
            }
        }),
    );
    let mut r = rig(&log, sink, true, false);
    r.settle(1..=4).await;
    let events = log.events();
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, Event::Write { seqs, .. } if seqs.len() != 4)),
        "never split: {events:?}"
    );
    assert!(log.dead_letter_classes().is_empty());
    assert_eq!(r.acked(), vec![1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn without_a_dead_letter_queue_an_unclassified_culprit_is_handed_back_and_split_at_once_when_it_returns(
) {
    let log = Log::default();
    let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = FakeSink::new(log.clone(), unclassified_for(3, writes.clone()));
    let mut r = rig(&log, sink, false, false);
    r.settle(1..=4).await;
    assert_eq!(r.sent(Kind::Nak(Some(HAND_BACK))), vec![vec![3]]);
    assert!(r.sent(Kind::Ack).is_empty());
    // It comes back in a new batch: split at its first failure, not held again.
    let back = tokio::time::Instant::now();
    r.settler
        .settle(
            super::testing::batch_of(&[(3, 2), (5, 1), (6, 1)]),
            None,
            &mut r.ahead(),
            &mut r.stop,
        )
        .await;
    let mut rest = r.ahead();
    r.settler.finish(&mut rest, &mut r.stop, far()).await;
    r.settler.drain_acks(far()).await;
    assert_eq!(
        back.elapsed(),
        Duration::ZERO,
        "not held for the bound again"
    );
    assert_eq!(r.sent(Kind::Nak(Some(HAND_BACK))), vec![vec![3], vec![3]]);
    let mut acked = r.acked();
    acked.sort_unstable();
    assert_eq!(acked, vec![1, 2, 4, 5, 6]);
}

/// A per-message destination: sequence 2 asks to run later, 3 is refused, 4 cannot be
/// started the first time; the others commit with an output. Each call takes 12 s.
struct EachSink {
    log: Log,
    calls: usize,
}

#[async_trait]
impl Sink for EachSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn write_batch(&mut self, _batch: &[Envelope]) -> Result<(), SinkError> {
        unreachable!("a per-message destination is written through write")
    }
    async fn write(&mut self, batch: &[Envelope]) -> Written {
        Written::Each(self.outcomes(batch).await)
    }
    async fn health(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

impl EachSink {
    async fn outcomes(&mut self, batch: &[Envelope]) -> Vec<crate::sinks::Outcome> {
        use crate::sinks::{Outcome, Output};
        tokio::time::sleep(Duration::from_secs(12)).await;
        self.calls += 1;
        self.log.push_write(batch, true);
        let first = self.calls == 1;
        batch
            .iter()
            .map(|e| match e.stream_sequence {
                2 => Outcome::Later {
                    message: "exit 75".into(),
                },
                3 => Outcome::Failed(SinkError::Permanent {
                    index: None,
                    message: "exit 1".into(),
                }),
                4 if first => Outcome::Failed(SinkError::transient("cannot start")),
                _ => Outcome::Committed {
                    output: Some(Output {
                        text: "out".into(),
                        truncated: false,
                    }),
                },
            })
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn per_message_outcomes_settle_each_message_alone_and_keep_only_the_held_alive() {
    let log = Log::default();
    let sink = EachSink {
        log: log.clone(),
        calls: 0,
    };
    let mut r = rig_waiting(&log, Box::new(sink), true, false, ACK_WAIT);
    r.settle(1..=5).await;
    let events = log.events();
    // The committed ones are ACKed after the first call, without waiting for 4.
    let first_ack = events
        .iter()
        .position(|e| *e == Event::Ack(vec![1, 5]))
        .expect("1 and 5 ACKed together");
    let retry = events
        .iter()
        .position(|e| matches!(e, Event::Write { seqs, .. } if *seqs == vec![4]))
        .expect("4 written again alone");
    assert!(first_ack < retry, "{events:?}");
    assert_eq!(r.acked(), vec![1, 5, 4]);
    // 2 handed back with the redelivery delay; 3 dead-lettered then ACKed.
    assert_eq!(r.sent(Kind::Nak(Some(HAND_BACK))), vec![vec![2]]);
    assert!(events.contains(&Event::DeadLetter {
        seq: 3,
        reason: Reason::Destination
    }));
    assert_eq!(r.sent(Kind::Ack), vec![vec![3]]);
    // +WPI for the whole batch during the 12 s call, then only for the held one.
    let progress = r.sent(Kind::Progress);
    assert_eq!(progress[..2], [vec![1, 2, 3, 4, 5], vec![1, 2, 3, 4, 5]]);
    assert!(progress.len() > 2);
    for p in &progress[2..] {
        assert_eq!(*p, vec![4], "{progress:?}");
    }
    assert_eq!(r.metrics.batches_isolated.get(), 1);
}

/// A settler whose destination takes `first` per write, with a second writer taking
/// `second` lent to a slot holding `4..=6`: the batch pulled ahead.
async fn with_second_writer(
    log: &Log,
    first: (Duration, Script),
    second: (Duration, Script),
) -> (Rig, Ahead) {
    let mut a = FakeSink::new(log.clone(), first.1);
    a.takes = first.0;
    let mut b = FakeSink::new(log.clone(), second.1);
    b.takes = second.0;
    let r = rig(log, a, false, false);
    let pulled = Prepared {
        pulled: 3,
        batch: batch(4..=6),
        ..Default::default()
    };
    let mut ahead = Ahead::with_waiting("t", &r.slot(), pulled).await;
    ahead.lend(r.settler.second_writer(Box::new(b)));
    (r, ahead)
}

#[tokio::test(start_paused = true)]
async fn a_batch_pulled_ahead_is_written_while_the_one_in_hand_commits_and_each_is_acked_after_its_own_commit(
) {
    let log = Log::default();
    let (mut r, mut ahead) = with_second_writer(
        &log,
        (Duration::from_secs(10), script(|_, _| Ok(()))),
        (Duration::from_secs(4), script(|_, _| Ok(()))),
    )
    .await;
    r.settle_with_one_written_ahead(&mut ahead).await;
    // The second batch's write ended first: it ran while the first one's did.
    let events: Vec<Event> = log
        .events()
        .into_iter()
        .filter(|e| !matches!(e, Event::Send(Kind::Progress, _)))
        .collect();
    assert_eq!(
        events,
        [
            Event::Write {
                seqs: vec![4, 5, 6],
                ok: true
            },
            Event::Write {
                seqs: vec![1, 2, 3],
                ok: true
            },
            Event::Ack(vec![1, 2, 3]),
            Event::Ack(vec![4, 5, 6]),
        ]
    );
    assert_eq!(r.metrics.batches_committed.get(), 2);
    assert_eq!(r.metrics.written_ahead.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_batch_written_ahead_is_kept_alive_until_its_ack() {
    let log = Log::default();
    let (mut r, mut ahead) = with_second_writer(
        &log,
        (Duration::ZERO, script(|_, _| Ok(()))),
        (ACK_WAIT * 3, script(|_, _| Ok(()))),
    )
    .await;
    r.settle_with_one_written_ahead(&mut ahead).await;
    let events = log.events();
    let acked = events
        .iter()
        .position(|e| *e == Event::Ack(vec![4, 5, 6]))
        .unwrap_or_else(|| panic!("4..=6 not ACKed: {events:?}"));
    // Three AckWaits of writing: a `+WPI` every half AckWait, none after the ACK.
    let kept: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::Send(Kind::Progress, s) if s.contains(&5)))
        .map(|(i, _)| i)
        .collect();
    assert!(kept.len() >= 5, "{events:?}");
    assert!(kept.iter().all(|&i| i < acked), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn a_write_ahead_that_failed_is_held_and_written_again_before_its_ack() {
    let log = Log::default();
    let (mut r, mut ahead) = with_second_writer(
        &log,
        (Duration::from_secs(1), script(|_, _| Ok(()))),
        (
            Duration::from_secs(1),
            script(|_, call| match call {
                0 => Err(SinkError::Transient {
                    message: "connection reset".into(),
                }),
                _ => Ok(()),
            }),
        ),
    )
    .await;
    r.settle_with_one_written_ahead(&mut ahead).await;
    let writes: Vec<Event> = log
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Write { seqs, .. } if seqs[0] == 4))
        .collect();
    assert_eq!(
        writes,
        [
            Event::Write {
                seqs: vec![4, 5, 6],
                ok: false
            },
            Event::Write {
                seqs: vec![4, 5, 6],
                ok: true
            },
        ]
    );
    assert_eq!(r.acked(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(r.metrics.batches_retried.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_batch_with_messages_refused_before_the_write_is_not_written_ahead() {
    let log = Log::default();
    let (mut r, _) = with_second_writer(
        &log,
        (Duration::from_secs(1), script(|_, _| Ok(()))),
        (Duration::from_secs(1), script(|_, _| Ok(()))),
    )
    .await;
    // The slot holds a pull with a message refused early instead.
    let slot = r.slot();
    let _ = slot.take().await;
    let refused = super::batch::Refused {
        envelope: super::testing::envelope(9, 1),
        reply: super::testing::reply(9),
        by: super::batch::RefusedBy::Metadata,
        reason: "bad priority".into(),
    };
    let pulled = Prepared {
        pulled: 4,
        batch: batch(4..=6),
        refused: vec![refused],
        ..Default::default()
    };
    let mut ahead = Ahead::with_waiting("t", &slot, pulled).await;
    ahead.lend(
        r.settler
            .second_writer(Box::new(FakeSink::new(log.clone(), script(|_, _| Ok(()))))),
    );
    r.settler
        .settle(batch(1..=3), None, &mut ahead, &mut r.stop)
        .await;
    assert!(ahead.take_writing().is_none());
    assert!(slot.take().await.is_some(), "left for the runner");
}

/// A message on its last allowed delivery cannot be handed back at shutdown: NAKed or left
/// to AckWait, the server would never deliver it again (with the randomizer at P = 0 and
/// `max_deliver: 2`, every redelivery is one). Those pulled ahead are written instead,
/// and ACKed after their commit; the others are handed back at once.
#[tokio::test(start_paused = true)]
async fn at_shutdown_a_message_on_its_last_delivery_pulled_ahead_is_written_not_handed_back() {
    let log = Log::default();
    let sink = FakeSink::new(log.clone(), script(|_, _| Ok(())));
    let mut r = rig_delivering(&log, Box::new(sink), false, false, ACK_WAIT, 2);
    let mut ahead = Ahead::with_waiting(
        "t",
        &r.slot(),
        Prepared {
            pulled: 4,
            batch: super::testing::batch_of(&[(1, 1), (2, 2), (3, 1), (4, 3)]),
            ..Default::default()
        },
    )
    .await;
    let _ = r.signal.send(true);
    r.settler.finish(&mut ahead, &mut r.stop, far()).await;
    r.settler.drain_acks(far()).await;
    assert_eq!(r.sent(Kind::Nak(None)), vec![vec![1, 3]]);
    assert_eq!(
        log.events()
            .iter()
            .filter(|e| matches!(e, Event::Write { .. }))
            .cloned()
            .collect::<Vec<_>>(),
        vec![Event::Write {
            seqs: vec![2, 4],
            ok: true
        }]
    );
    assert_eq!(r.acked(), vec![2, 4]);
}
