//! Whether a sink's consumers are paused in the server (JetStream consumer pause, set by
//! `jetsink pause`), as this daemon last saw it, and what it does about it: a paused
//! consumer is not pulled, and while every consumer of the sink is paused the sink shows
//! `jetsink_paused` 1 and a `paused` line in `/readyz`, and logs once when that starts and
//! once when it ends.
//!
//! The server enforces the pause by itself: it delivers nothing to a paused consumer and
//! answers its pulls empty (a no-wait pull at once, a long poll at its expiry), so they
//! idle rather than fail. This keeps the daemon from sending those pulls for nothing and
//! says what is going on. It learns the state from the consumer info the backlog gauges
//! read every 5 s, and ends a pause by itself at the deadline the server stated (the
//! server resumes the consumer then), measured on the monotonic clock from when the answer
//! came, so a wall clock set differently from the server's does not move it earlier.
//!
//! [`PauseBook`] is the pure part (the clock is passed in); [`Pause`] is the handle the
//! backlog watcher and the puller share.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::consumer::Info;
use prometheus::IntGauge;
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::health::SinkHealth;
use crate::nats::pause::{describe_until, paused, Paused};

/// Until when one consumer is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until {
    /// The local instant the pause ends (`None`: too far to count, or not reported).
    pub ends: Option<Instant>,
    /// The server's deadline, for people to read.
    pub at: Option<OffsetDateTime>,
}

/// What changed for the sink as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Every consumer of the sink is paused now; the earliest of their pauses.
    Paused(Until),
    /// At least one consumer of the sink is no longer paused.
    Resumed,
}

/// The pause of each consumer of one sink, and the sink's state last reported. Pure.
#[derive(Debug, Clone)]
pub struct PauseBook {
    consumers: Vec<String>,
    until: BTreeMap<String, Until>,
    reported: bool,
}

impl PauseBook {
    /// Nothing paused yet, for a sink reading `consumers`.
    pub fn new(consumers: Vec<String>) -> PauseBook {
        PauseBook {
            consumers,
            until: BTreeMap::new(),
            reported: false,
        }
    }

    /// Records what a consumer info answer of `consumer`, received at `now`, says.
    pub fn record(&mut self, consumer: &str, state: Option<Paused>, now: Instant) {
        match state {
            Some(p) => {
                let ends = p.remaining.and_then(|r| now.checked_add(r));
                self.until
                    .insert(consumer.to_string(), Until { ends, at: p.until });
            }
            None => {
                self.until.remove(consumer);
            }
        }
    }

    /// Whether `consumer` is paused at `now`.
    pub fn consumer_paused(&self, consumer: &str, now: Instant) -> bool {
        self.until
            .get(consumer)
            .is_some_and(|u| u.ends.is_none_or(|e| now < e))
    }

    /// The sink's pause at `now`: every consumer paused, until the earliest end.
    pub fn sink_paused(&self, now: Instant) -> Option<Until> {
        if self.consumers.is_empty() || !self.consumers.iter().all(|c| self.consumer_paused(c, now))
        {
            return None;
        }
        self.consumers
            .iter()
            .filter_map(|c| self.until.get(c).copied())
            .min_by_key(|u| (u.ends.is_none(), u.ends))
    }

    /// The change of the sink's state since it was last reported, if any.
    pub fn change(&mut self, now: Instant) -> Option<Change> {
        let now_paused = self.sink_paused(now);
        if now_paused.is_some() == self.reported {
            return None;
        }
        self.reported = now_paused.is_some();
        Some(now_paused.map_or(Change::Resumed, Change::Paused))
    }
}

struct Inner {
    sink: String,
    book: Mutex<PauseBook>,
    /// Woken whenever the sink's state changes.
    changed: Notify,
    gauge: IntGauge,
    health: SinkHealth,
}

/// One sink's pause state, shared by the backlog watcher (which reads consumer info) and
/// the puller (which does not pull a paused consumer).
#[derive(Clone)]
pub struct Pause {
    inner: Arc<Inner>,
}

impl Pause {
    /// A sink reading `consumers`, not paused; the gauge starts at 0.
    pub fn new(sink: &str, consumers: Vec<String>, gauge: IntGauge, health: SinkHealth) -> Pause {
        gauge.set(0);
        Pause {
            inner: Arc::new(Inner {
                sink: sink.to_string(),
                book: Mutex::new(PauseBook::new(consumers)),
                changed: Notify::new(),
                gauge,
                health,
            }),
        }
    }

    /// Records a consumer info answer just received.
    pub fn observe(&self, info: &Info) {
        let now = Instant::now();
        let change = self.with_book(|b| {
            b.record(&info.name, paused(info), now);
            b.change(now)
        });
        self.report(change.flatten());
    }

    /// Whether `consumer` is paused now.
    pub fn consumer_paused(&self, consumer: &str) -> bool {
        let now = Instant::now();
        self.with_book(|b| b.consumer_paused(consumer, now))
            .unwrap_or(false)
    }

    /// The sink's pause now, if every consumer is paused; a pause whose end has come is
    /// reported as over here.
    pub fn sink_paused(&self) -> Option<Until> {
        let now = Instant::now();
        let (until, change) = self
            .with_book(|b| (b.sink_paused(now), b.change(now)))
            .unwrap_or((None, None));
        self.report(change);
        until
    }

    /// Waits until the sink's state changes, its pause ends, or `up_to`.
    pub async fn wait(&self, up_to: Instant) {
        let changed = self.inner.changed.notified();
        let end = self
            .sink_paused()
            .and_then(|u| u.ends)
            .map_or(up_to, |e| e.min(up_to));
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep_until(end) => {}
        }
        // A pause that ended is reported now, not at the next look.
        self.sink_paused();
    }

    fn with_book<T>(&self, f: impl FnOnce(&mut PauseBook) -> T) -> Option<T> {
        self.inner.book.lock().ok().map(|mut b| f(&mut b))
    }

    /// Shows a change of the sink's state: `/readyz`, then the gauge (so whoever sees the
    /// gauge change finds `/readyz` changed too), and one log line.
    fn report(&self, change: Option<Change>) {
        let Some(change) = change else {
            return;
        };
        let i = &self.inner;
        match change {
            Change::Paused(u) => {
                let until = describe_until(u.at);
                i.health.set_paused(Some(format!("paused until {until}")));
                i.gauge.set(1);
                tracing::info!(sink = %i.sink, until = %until, "sink paused: its consumer is paused in the server, so nothing is pulled until it resumes (what was pulled before is still written and ACKed)");
            }
            Change::Resumed => {
                i.health.set_paused(None);
                i.gauge.set(0);
                tracing::info!(sink = %i.sink, "sink resumed: its consumer is no longer paused; pulling again");
            }
        }
        i.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn paused_for(secs: u64) -> Option<Paused> {
        Some(Paused {
            remaining: Some(Duration::from_secs(secs)),
            until: None,
        })
    }

    #[test]
    fn a_sink_is_paused_while_every_consumer_is_and_resumes_at_the_earliest_end() {
        let t0 = Instant::now();
        let mut b = PauseBook::new(vec!["a".into(), "b".into()]);
        assert_eq!(b.change(t0), None);
        b.record("a", paused_for(60), t0);
        assert!(b.consumer_paused("a", t0) && !b.consumer_paused("b", t0));
        assert_eq!(b.sink_paused(t0), None);
        assert_eq!(b.change(t0), None);
        b.record("b", paused_for(30), t0);
        let until = b.sink_paused(t0).unwrap();
        assert_eq!(until.ends, Some(t0 + Duration::from_secs(30)));
        assert_eq!(b.change(t0), Some(Change::Paused(until)));
        assert_eq!(b.change(t0), None, "reported once");
        let later = t0 + Duration::from_secs(30);
        assert!(!b.consumer_paused("b", later) && b.consumer_paused("a", later));
        assert_eq!(b.change(later), Some(Change::Resumed));
        assert_eq!(b.change(later), None);
    }

    #[test]
    fn an_answer_saying_not_paused_resumes_at_once() {
        let t0 = Instant::now();
        let mut b = PauseBook::new(vec!["a".into()]);
        b.record("a", paused_for(3_600), t0);
        assert!(matches!(b.change(t0), Some(Change::Paused(_))));
        b.record("a", None, t0 + Duration::from_secs(1));
        assert_eq!(b.change(t0), Some(Change::Resumed));
    }

    #[test]
    fn a_pause_without_a_countable_end_lasts_until_an_answer_ends_it() {
        let t0 = Instant::now();
        let mut b = PauseBook::new(vec!["a".into()]);
        b.record(
            "a",
            Some(Paused {
                remaining: None,
                until: None,
            }),
            t0,
        );
        let far = t0 + Duration::from_secs(10 * 365 * 86_400);
        assert_eq!(b.sink_paused(far).map(|u| u.ends), Some(None));
        // An end that overflows the clock counts as none.
        b.record("a", paused_for(u64::MAX), t0);
        assert!(b.consumer_paused("a", far));
    }

    #[test]
    fn a_sink_without_consumers_is_never_paused() {
        let t0 = Instant::now();
        let mut b = PauseBook::new(vec![]);
        b.record("x", paused_for(60), t0);
        assert_eq!(b.sink_paused(t0), None);
        assert_eq!(b.change(t0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_handle_shows_the_pause_and_ends_it_at_the_deadline() {
        let registry = prometheus::Registry::new();
        let gauge = IntGauge::new("p", "p").unwrap();
        registry.register(Box::new(gauge.clone())).unwrap();
        let health = crate::health::Health::default();
        let pause = Pause::new("s", vec!["to-db".into()], gauge.clone(), health.sink("s"));
        let info: Info = serde_json::from_value(serde_json::json!({
            "stream_name": "ORDERS", "name": "to-db", "created": "2026-01-01T00:00:00Z",
            "config": {"durable_name": "to-db", "ack_policy": "explicit", "deliver_policy": "all",
                       "replay_policy": "instant", "pause_until": "2026-03-01T12:10:00Z"},
            "delivered": {"consumer_seq": 0, "stream_seq": 0},
            "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
            "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0, "num_pending": 0,
            "paused": true, "pause_remaining": 10_000_000_000u64
        }))
        .unwrap();
        pause.observe(&info);
        assert_eq!(gauge.get(), 1);
        assert!(pause.consumer_paused("to-db"));
        assert_eq!(
            health.readiness(&[]).paused,
            vec!["sink s: paused until 2026-03-01T12:10:00Z"]
        );
        let start = Instant::now();
        pause.wait(start + Duration::from_secs(3)).await;
        assert_eq!(gauge.get(), 1, "still paused after a wait bounded earlier");
        pause.wait(start + Duration::from_secs(60)).await;
        assert_eq!(Instant::now(), start + Duration::from_secs(10));
        assert_eq!(gauge.get(), 0);
        assert!(pause.sink_paused().is_none());
        assert!(health.readiness(&[]).paused.is_empty());
    }
}
