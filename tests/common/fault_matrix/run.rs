//! One fault matrix test from start to end: the publisher and jetsink started, each fault
//! injected once every sink's ACK floor shows the drain part-way (the i-th of k faults at
//! i/(k+2) of the messages, the publisher held short of the drain's end until it is in) and,
//! as far as a few reads find it, every sink holds delivered messages it has not ACKed, the
//! drain completed, jetsink stopped, and every destination read back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::flow::{states, Publisher, SinkState, AHEAD, POLL};
use super::readback::Copies;
use super::sinks::{Dest, Mode};
use super::world::World;
use super::{DLQ, STREAM};
use crate::common::{stored, stream_messages, Daemon};

/// How many reads of the consumers' states seek every sink with messages in hand before a
/// fault ([`World::in_hand`]).
const IN_HAND_POLLS: usize = 30;

/// A fault the matrix injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// SIGKILL of jetsink while the proxy holds its ACKs (every sink has committed messages
    /// the server never saw ACKed), then a start.
    KillJetsink,
    /// SIGTERM of jetsink (it must exit 0), then a start.
    TermJetsink,
    /// SIGKILL of the source nats-server, restarted on its store; jetsink keeps running.
    KillServer,
    /// Every destination taken away until each sink shows it failing, then given back.
    Outage,
    /// SIGTERM of jetsink, a `jetsink replay` per sink from half its ACK floor to past every
    /// floor (written and unwritten messages), then a start.
    Replay,
}

/// What a test observed: every destination's copies and dead letters, the consumers'
/// state at each fault, and what went wrong outside the destinations.
pub struct Outcome {
    pub n: u64,
    pub copies: BTreeMap<Dest, Copies>,
    pub dead_lettered: BTreeMap<Dest, usize>,
    /// (fault, each sink's consumer when it was injected: the state that let it in).
    pub at_faults: Vec<(Event, BTreeMap<Dest, SinkState>)>,
    /// Failures of the run itself (a stop that was not clean, a replay that failed).
    pub notes: Vec<String>,
    /// The counter of the mode and its sum in each sink over the run's processes, if a mode.
    pub at_work: Option<(&'static str, BTreeMap<Dest, f64>)>,
    /// Each sink's warnings and errors over every jetsink run of the test: (message, times).
    pub warnings: BTreeMap<Dest, Vec<(String, usize)>>,
    /// Seconds: start to the last fault, to the end of the drain, to the end of the read.
    pub phases: [f64; 3],
}

impl World {
    /// How long any one wait of a test may take before it fails.
    pub fn patience(&self) -> Duration {
        Duration::from_secs(60 + self.n / 20)
    }

    /// Adds what the running process's counter of the mode says to `at_work`.
    async fn count_work(&self, at_work: &mut Option<(&'static str, BTreeMap<Dest, f64>)>) {
        if let Some((metric, sums)) = at_work {
            for (d, v) in self.sink_metric(metric).await {
                *sums.entry(d).or_default() += v;
            }
        }
    }

    /// Runs the messages through `events` and reads every destination back.
    pub async fn run(&mut self, events: &[Event]) -> Outcome {
        let started = Instant::now();
        let publisher = Publisher::start(self.js.clone(), self.n, self.dests.clone());
        let mut daemon = self.start();
        let mut at_faults = Vec::new();
        let mut notes = Vec::new();
        // The mode's own counter, summed over every process of the run: read before each
        // fault (a process ended by a fault is gone after it) and at the end.
        let mut at_work: Option<(&'static str, BTreeMap<Dest, f64>)> =
            self.mode.at_work().map(|m| (m, BTreeMap::new()));
        for (i, event) in events.iter().enumerate() {
            let share = (i as u64 + 1) * self.n / (events.len() as u64 + 2);
            publisher.hold_at(share + AHEAD);
            let floor = format!("every ACK floor at {share}");
            self.wait_for(&mut daemon, &floor, |s| s.ack_floor >= share)
                .await;
            self.running(&mut daemon).await;
            let at = self.in_hand(&publisher, share).await;
            self.count_work(&mut at_work).await;
            daemon = self
                .inject(*event, daemon, &publisher, &mut notes, &mut at_work)
                .await;
            at_faults.push((*event, at));
        }
        publisher.hold_at(u64::MAX);
        let faulted = started.elapsed().as_secs_f64();
        let patience = self.patience();
        daemon
            .eventually(patience, "every message published", || async {
                publisher.finished()
            })
            .await;
        let held = stored(&self.js, STREAM).await;
        if held != self.n {
            notes.push(format!(
                "the source stream holds {held} messages, not the {} published: the server \
                 lost or doubled some, and the cells' counts mean nothing",
                self.n
            ));
        }
        self.running(&mut daemon).await;
        self.wait_for(&mut daemon, "every consumer drained", |s| {
            s.pending == 0 && s.ack_pending == 0
        })
        .await;
        self.count_work(&mut at_work).await;
        stop(&mut daemon, "the final SIGTERM", &mut notes);
        let drained = started.elapsed().as_secs_f64();
        let mut copies = BTreeMap::new();
        let mut dead_lettered = BTreeMap::new();
        for d in self.dests.clone() {
            copies.insert(d, self.copies(d).await);
            let dead = stream_messages(&self.js, DLQ, &d.dead_letter_subject()).await;
            dead_lettered.insert(d, dead.len());
        }
        Outcome {
            n: self.n,
            copies,
            dead_lettered,
            at_faults,
            notes,
            warnings: self.warnings(),
            at_work,
            phases: [faulted, drained, started.elapsed().as_secs_f64()],
        }
    }

    /// Waits until every sink of this daemon runs: a SIGTERM before then would reach a
    /// process that has not yet installed its handler, and consumer states left by the
    /// process before would pass for this one's.
    async fn running(&self, daemon: &mut Daemon) {
        let log = daemon.log.clone();
        let sinks = self.dests.len();
        daemon
            .eventually(self.patience(), "every sink running", || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                async move { text.matches("sink running").count() >= sinks }
            })
            .await;
    }

    /// The moment for the fault at `share`: every sink holding messages it has not ACKed,
    /// sought for up to [`IN_HAND_POLLS`] reads while the publisher feeds the sinks (never
    /// past `share` + 2 × [`AHEAD`], so the fault still lands mid-drain); the states of
    /// the read that found it, or of the last read. A sink holds messages only while it
    /// pulls and writes (after a partial pull it waits for the next batch with the messages
    /// still in the stream), so all of them at once is a matter of timing, which no test
    /// may wait on; that the fault lands mid-drain is what the cells require.
    async fn in_hand(&self, publisher: &Publisher, share: u64) -> BTreeMap<Dest, SinkState> {
        let cap = (share + 2 * AHEAD).min(self.n.saturating_sub(1));
        let mut last = BTreeMap::new();
        for _ in 0..IN_HAND_POLLS {
            publisher.allow((publisher.published() + 50).min(cap));
            tokio::time::sleep(POLL).await;
            let Some(s) = states(&self.js, &self.dests).await else {
                continue;
            };
            let all = s.len() == self.dests.len() && s.values().all(|s| s.ack_pending > 0);
            last = s;
            if all {
                break;
            }
        }
        last
    }

    /// Waits until every sink's consumer satisfies `ok` (failing with jetsink's log if it
    /// exits or the test's patience runs out); the states that did.
    async fn wait_for(
        &self,
        daemon: &mut Daemon,
        what: &str,
        ok: impl Fn(&SinkState) -> bool,
    ) -> BTreeMap<Dest, SinkState> {
        let (js, dests) = (&self.js, &self.dests);
        let seen = std::sync::Mutex::new(BTreeMap::new());
        daemon
            .eventually(self.patience(), what, || async {
                tokio::time::sleep(POLL).await;
                match states(js, dests).await {
                    Some(s) if s.len() == dests.len() && s.values().all(&ok) => {
                        *seen.lock().unwrap() = s;
                        true
                    }
                    _ => false,
                }
            })
            .await;
        seen.into_inner().unwrap()
    }

    async fn inject(
        &mut self,
        event: Event,
        mut daemon: Daemon,
        publisher: &Publisher,
        notes: &mut Vec<String>,
        at_work: &mut Option<(&'static str, BTreeMap<Dest, f64>)>,
    ) -> Daemon {
        match event {
            Event::KillJetsink => {
                self.nats_proxy.hold_acks();
                self.wait_unacked(&mut daemon, publisher).await;
                daemon.kill();
                self.nats_proxy.cut_and_release();
            }
            Event::TermJetsink => {
                if self.mode == Mode::InFlight {
                    // Two writes of a sink seen waiting at once are the mode at work, as
                    // much as its counter: the batch written ahead commits only after the
                    // SIGTERM, in a process whose counters are gone once it exits (with a
                    // linger, a fast destination may write no batch ahead before that).
                    let both = self
                        .term_with_two_batches_waiting(&mut daemon, publisher)
                        .await;
                    if let Some((_, sums)) = at_work {
                        for d in both {
                            *sums.entry(d).or_default() += 1.0;
                        }
                    }
                }
                stop(&mut daemon, "a SIGTERM mid-drain", notes)
            }
            Event::KillServer => {
                let log = daemon.log.clone();
                let lost = move || {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    text.matches("NATS connection lost").count()
                };
                let before = lost();
                self.server.kill();
                daemon
                    .eventually(self.patience(), "jetsink sees the server gone", || {
                        let now = lost();
                        async move { now > before }
                    })
                    .await;
                self.server.restart();
                return daemon;
            }
            Event::Outage => {
                self.outage(&mut daemon, publisher).await;
                return daemon;
            }
            Event::Replay => {
                stop(&mut daemon, "the SIGTERM before the replay", notes);
                self.replay_overlapping(publisher, notes).await;
            }
        }
        self.start()
    }

    /// Waits until every sink has committed and ACKed messages since the proxy began to
    /// hold ACKs: messages stored whose ACKs the server will never see. Messages keep
    /// coming meanwhile, whatever the (frozen) floors say, so a sink that was idle gets some.
    async fn wait_unacked(&self, daemon: &mut Daemon, publisher: &Publisher) {
        let acked = "jetsink_messages_acked_total";
        let before = self.sink_metric(acked).await;
        let what = "every sink ACKed into the hold";
        daemon
            .eventually(self.patience(), what, || async {
                publisher.allow(publisher.published() + 20);
                tokio::time::sleep(POLL).await;
                let now = self.sink_metric(acked).await;
                self.dests.iter().all(|d| now.get(d) > before.get(d))
            })
            .await;
    }
}

impl World {
    /// Each sink's WARN and ERROR messages in every jetsink log of the test, with how often
    /// each came (fields after the sink's name left out).
    fn warnings(&self) -> BTreeMap<Dest, Vec<(String, usize)>> {
        let mut text = String::new();
        for entry in std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("jetsink-") && name.ends_with(".log") {
                text += &std::fs::read_to_string(entry.path()).unwrap_or_default();
            }
        }
        let mut out = BTreeMap::new();
        for d in &self.dests {
            let field = format!(" sink={}", d.sink());
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for line in text
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            {
                let Some(at) = line.find(&field) else {
                    continue;
                };
                let after = &line[at + field.len()..];
                if !(after.is_empty() || after.starts_with(' ')) {
                    continue;
                }
                let message = line[..at].split_once(": ").map_or(&line[..at], |(_, m)| m);
                *counts.entry(message.to_string()).or_default() += 1;
            }
            out.insert(*d, counts.into_iter().collect());
        }
        out
    }
}

/// SIGTERM; a stop that is not clean (exit 0 within 30 s) is noted, not fatal, so the
/// destinations are still read and judged.
fn stop(daemon: &mut Daemon, what: &str, notes: &mut Vec<String>) {
    let status = daemon.terminate(Duration::from_secs(30));
    if !status.is_some_and(|s| s.success()) {
        let log = daemon.log_text();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        notes.push(format!(
            "{what}: jetsink exited {status:?}; its last log lines: {tail:#?}"
        ));
    }
}
