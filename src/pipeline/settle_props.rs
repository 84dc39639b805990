//! Generated tests of the settle machinery, on tokio's paused clock: random destinations
//! (batch or per message, random outcomes, writes that take random time), dead-letter
//! queues that fail or are slow, consumers with a finite MaxDeliver, and shutdown at a
//! random moment. Whatever happens:
//!
//! - every message ends with exactly one acknowledgement: ACK after its commit, or a NAK,
//!   or ACK/TERM after its dead-letter copy was stored;
//! - no message is ACKed as committed before a write holding it committed, and none is
//!   ACKed or TERMed as dead-lettered before its copy was stored;
//! - no message in hand goes longer than the consumer's redelivery interval without a
//!   `+WPI` (from its delivery to its acknowledgement), and none gets a `+WPI` after it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use proptest::prelude::*;
use tokio::sync::watch;
use tokio::time::Instant;

use super::disposal::{DeadLetterOut, Disposal, Policy, Redelivery};
use super::keeper::Keeper;
use super::puller::Ahead;
use super::settle::{Settler, SettlerParts, Stop};
use super::testing::{batch_of, Event, Kind, Log, RecordingAcks};
use crate::config::{Jitter, RetryConfig};
use crate::dlq::{PublishFailed, Reason};
use crate::envelope::Envelope;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::sinks::{Outcome, Output, Sink, SinkError, Written};

/// The consumer's redelivery interval in these tests: the keeper beats every half of it.
const REDELIVERY: Duration = Duration::from_secs(10);

/// What one message of a per-message answer comes to.
#[derive(Debug, Clone, Copy)]
enum One {
    Commit,
    Later,
    Refuse,
    Hold,
    Unknown,
}

/// One write's answer.
#[derive(Debug, Clone)]
enum Step {
    Ok,
    Transient,
    Permanent(Option<usize>),
    Unclassified,
    Each(Vec<One>),
}

/// A destination answering from a plan, each write taking its planned time; once the plan
/// is used up, everything commits (so every case ends).
struct PlannedSink {
    log: Log,
    plan: Vec<(Step, Duration)>,
    calls: usize,
}

impl PlannedSink {
    fn answer(&mut self, batch: &[Envelope]) -> (Step, Duration) {
        let step = self.plan.get(self.calls).cloned();
        self.calls += 1;
        let _ = batch;
        step.unwrap_or((Step::Ok, Duration::ZERO))
    }
}

fn seqs(batch: &[Envelope]) -> Vec<u64> {
    batch.iter().map(|e| e.stream_sequence).collect()
}

#[async_trait]
impl Sink for PlannedSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        match self.write(batch).await {
            Written::Batch(r) => r,
            Written::Each(_) => Err(SinkError::transient("per message")),
        }
    }

    async fn write(&mut self, batch: &[Envelope]) -> Written {
        let (step, takes) = self.answer(batch);
        tokio::time::sleep(takes).await;
        let all = seqs(batch);
        let written = match step {
            Step::Ok => Written::Batch(Ok(())),
            Step::Transient => Written::Batch(Err(SinkError::transient("down"))),
            Step::Permanent(index) => Written::Batch(Err(SinkError::Permanent {
                index,
                message: "bad row".into(),
            })),
            Step::Unclassified => Written::Batch(Err(SinkError::unclassified("E9"))),
            Step::Each(ones) => Written::Each(
                (0..batch.len())
                    .map(|i| match ones[i % ones.len()] {
                        One::Commit => Outcome::Committed {
                            output: Some(Output::default()),
                        },
                        One::Later => Outcome::Later {
                            message: "exit 75".into(),
                        },
                        One::Refuse => Outcome::Failed(SinkError::Permanent {
                            index: None,
                            message: "exit 1".into(),
                        }),
                        One::Hold => Outcome::Failed(SinkError::transient("cannot start")),
                        One::Unknown => Outcome::Failed(SinkError::unclassified("E9")),
                    })
                    .collect(),
            ),
        };
        // What committed, as the log records it: a whole batch, or the messages of a
        // per-message answer that committed.
        let committed: Vec<u64> = match &written {
            Written::Batch(Ok(())) => all.clone(),
            Written::Batch(Err(_)) => Vec::new(),
            Written::Each(o) => all
                .iter()
                .zip(o)
                .filter(|(_, o)| o.is_committed())
                .map(|(s, _)| *s)
                .collect(),
        };
        self.log.push(Event::Write {
            seqs: committed,
            ok: true,
        });
        written
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A dead-letter queue whose publishes take `takes` and fail where `fails` says.
struct PlannedDeadLetters {
    log: Log,
    takes: Duration,
    fails: Vec<bool>,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl DeadLetterOut for PlannedDeadLetters {
    async fn publish(
        &self,
        e: &Envelope,
        _class: &str,
        _why: &str,
        reason: Reason,
    ) -> Result<(), PublishFailed> {
        tokio::time::sleep(self.takes).await;
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.fails.get(n).copied().unwrap_or(false) {
            return Err(PublishFailed {
                subject: "dlq.t".into(),
                message: "no acknowledgement in time".into(),
            });
        }
        self.log.push(Event::DeadLetter {
            seq: e.stream_sequence,
            reason,
        });
        Ok(())
    }
}

/// One generated case.
#[derive(Debug, Clone)]
struct Case {
    delivered: Vec<u64>,
    plan: Vec<(Step, Duration)>,
    dead_letters: Option<(Duration, Vec<bool>)>,
    max_deliver: i64,
    term: bool,
    stop_at: Option<Duration>,
}

fn one() -> impl Strategy<Value = One> {
    prop_oneof![
        4 => Just(One::Commit),
        1 => Just(One::Later),
        1 => Just(One::Refuse),
        1 => Just(One::Hold),
        1 => Just(One::Unknown),
    ]
}

fn step(per_message: bool) -> BoxedStrategy<Step> {
    if per_message {
        prop::collection::vec(one(), 1..5)
            .prop_map(Step::Each)
            .boxed()
    } else {
        prop_oneof![
            3 => Just(Step::Ok),
            2 => Just(Step::Transient),
            2 => proptest::option::of(0usize..12).prop_map(Step::Permanent),
            1 => Just(Step::Unclassified),
        ]
        .boxed()
    }
}

fn case() -> impl Strategy<Value = Case> {
    (any::<bool>(), 1usize..10).prop_flat_map(|(per_message, n)| {
        (
            prop::collection::vec(1u64..4, n),
            prop::collection::vec(
                (step(per_message), (0u64..13).prop_map(Duration::from_secs)),
                0..7,
            ),
            proptest::option::of((
                (0u64..8).prop_map(Duration::from_secs),
                prop::collection::vec(any::<bool>(), 0..4),
            )),
            prop_oneof![Just(-1i64), 1i64..4],
            any::<bool>(),
            proptest::option::of((0u64..60).prop_map(Duration::from_secs)),
        )
            .prop_map(
                move |(delivered, plan, dead_letters, max_deliver, term, stop_at)| Case {
                    delivered,
                    plan,
                    dead_letters,
                    max_deliver,
                    term,
                    stop_at,
                },
            )
    })
}

/// Runs a case to its end on a paused clock; the log, the start, and the sequences.
fn run(case: &Case) -> (Vec<(Instant, Event)>, Instant, Vec<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let log = Log::default();
        let acks = RecordingAcks(log.clone());
        let metrics = crate::pipeline::SinkMetrics::new(&Metrics::new(), "t");
        let dl = case.dead_letters.clone().map(|(takes, fails)| {
            Arc::new(PlannedDeadLetters {
                log: log.clone(),
                takes,
                fails,
                calls: Default::default(),
            }) as Arc<dyn DeadLetterOut>
        });
        let policy = Policy {
            redelivery: Redelivery::Fixed(Duration::from_secs(30)),
            attempts: if dl.is_some() { 1 } else { u64::MAX },
            max_deliver: case.max_deliver,
            term: case.term,
        };
        let disposal = Disposal::new("t", policy, metrics.clone(), dl);
        let keeper = Keeper::new(acks.clone(), REDELIVERY / 2, metrics.progress_acks.clone());
        let parts = SettlerParts {
            name: "t".into(),
            disposal,
            metrics: metrics.clone(),
            health: Health::default().sink("t"),
            retry: RetryConfig {
                initial_backoff_ms: 1_000,
                max_backoff_ms: 4_000,
                multiplier: 2.0,
                jitter: Jitter::None,
                max_held_ms: 20_000,
                refused_delay_ms: None,
            },
            keeper,
        };
        let sink = PlannedSink {
            log: log.clone(),
            plan: case.plan.clone(),
            calls: 0,
        };
        let mut settler = Settler::new(Box::new(sink), acks, parts);
        let (signal, rx) = watch::channel(false);
        let mut stop = Stop::new(rx, Duration::from_secs(6));
        if let Some(at) = case.stop_at {
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                let _ = signal.send(true);
            });
        } else {
            std::mem::forget(signal);
        }
        let pairs: Vec<(u64, u64)> = case
            .delivered
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u64 + 1, *d))
            .collect();
        let seqs = pairs.iter().map(|p| p.0).collect();
        let start = Instant::now();
        let mut ahead = Ahead::new("t", settler.keeper().slot());
        settler
            .settle(batch_of(&pairs), None, &mut ahead, &mut stop)
            .await;
        let by = Instant::now() + Duration::from_secs(3_600);
        settler.finish(&mut ahead, &mut stop, by).await;
        settler.drain_acks(by).await;
        assert!(
            settler.keeper().unsettled().await.is_empty(),
            "nothing left held after the batch settled"
        );
        (log.timed(), start, seqs)
    })
}

/// What ends a message: an ACK after commit, or another acknowledgement that is not +WPI.
fn terminal(e: &Event) -> Option<&[u64]> {
    match e {
        Event::Ack(s) => Some(s),
        Event::Send(k, s) if *k != Kind::Progress => Some(s),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn every_message_ends_once_after_its_commit_or_copy_and_is_kept_alive_until_then(c in case()) {
        let (events, start, seqs) = run(&c);
        let mut ended: HashMap<u64, (Instant, &Event)> = HashMap::new();
        let mut committed: HashMap<u64, Instant> = HashMap::new();
        let mut copied: HashMap<u64, Instant> = HashMap::new();
        let mut beats: HashMap<u64, Vec<Instant>> = HashMap::new();
        for (t, e) in &events {
            match e {
                Event::Write { seqs, ok: true } => {
                    for s in seqs {
                        committed.entry(*s).or_insert(*t);
                    }
                }
                Event::DeadLetter { seq, .. } => {
                    copied.entry(*seq).or_insert(*t);
                }
                Event::Send(Kind::Progress, s) => {
                    for seq in s {
                        prop_assert!(!ended.contains_key(seq), "+WPI for {seq} after its end: {events:?}");
                        beats.entry(*seq).or_default().push(*t);
                    }
                }
                _ => {}
            }
            if let Some(s) = terminal(e) {
                for seq in s {
                    prop_assert!(ended.insert(*seq, (*t, e)).is_none(), "{seq} acknowledged twice: {events:?}");
                    match e {
                        Event::Ack(_) => prop_assert!(
                            committed.get(seq).is_some_and(|c| c <= t),
                            "{seq} ACKed before a commit: {events:?}"
                        ),
                        Event::Send(Kind::Ack | Kind::Term, _) => prop_assert!(
                            copied.get(seq).is_some_and(|c| c <= t),
                            "{seq} settled as dead-lettered without a copy: {events:?}"
                        ),
                        _ => {}
                    }
                }
            }
        }
        for seq in &seqs {
            let Some((end, _)) = ended.get(seq) else {
                return Err(TestCaseError::fail(format!("{seq} never acknowledged: {events:?}")));
            };
            let mut last = start;
            for t in beats.get(seq).into_iter().flatten().chain(std::iter::once(end)) {
                prop_assert!(
                    t.duration_since(last) <= REDELIVERY,
                    "{seq} went {:?} without a +WPI (case {c:?}): {events:?}",
                    t.duration_since(last)
                );
                last = *t;
            }
        }
    }
}
