//! Liveness and readiness as the HTTP endpoints report them.
//!
//! Each runner updates its own entry: a heartbeat every loop turn (liveness: the loop is
//! not stuck) and whether its consumer is bound and its destination is usable
//! (readiness). The state of each NATS connection is read from its client, and readiness
//! needs every one of them up.
//!
//! A sink whose destination could not be opened yet (a database still starting) waits for
//! it: `/readyz` names it as waiting, and it is not ready meanwhile.
//!
//! Each sink's state (running, paused, holding, waiting, not bound) is also exported as the
//! one-hot gauge `jetsink_sink_state{sink,state}` when the health state was made with
//! [`Health::exporting`], so a dashboard or `jetsink top` reads it without parsing `/readyz`.
//!
//! A sink paused by an operator (`jetsink pause`) stays ready: it is connected, bound and
//! its destination is usable, it was only told to wait. `/readyz` names it in `paused`
//! instead of `problems`, so a pause neither fails readiness probes and rollouts nor
//! blocks a node drain (a PodDisruptionBudget counts only ready pods).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// A loop that has not turned for this long is reported as stuck by `/healthz`.
pub const STALL_AFTER: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
struct SinkState {
    consumer_bound: bool,
    destination_ok: bool,
    last_error: Option<String>,
    /// `paused until …` while every consumer of the sink is paused in the server.
    paused: Option<String>,
    /// Why the destination could not be opened yet, while the sink waits for it.
    waiting: Option<String>,
    heartbeat: Instant,
    /// The state last set in the state gauge, so a loop turn's heartbeat costs no lookup.
    shown: Option<&'static str>,
}

impl SinkState {
    /// The one state the gauge shows: what keeps the sink from writing comes first.
    fn state(&self) -> &'static str {
        if !self.consumer_bound {
            "not_bound"
        } else if self.waiting.is_some() {
            "waiting"
        } else if !self.destination_ok {
            "holding"
        } else if self.paused.is_some() {
            "paused"
        } else {
            "running"
        }
    }
}

/// Every value of the `state` label of `jetsink_sink_state`.
pub const STATES: [&str; 5] = ["running", "paused", "holding", "waiting", "not_bound"];

const STATE_HELP: &str = "1 for the sink's current state (running, paused, holding: the destination failed and the batch is held, waiting: the destination could not be opened yet, not_bound: the consumer is not bound), 0 for the others.";

/// Shared readiness state of every sink.
#[derive(Clone, Default)]
pub struct Health {
    sinks: Arc<Mutex<BTreeMap<String, SinkState>>>,
    /// Where `jetsink_sink_state` is exported, if anywhere.
    metrics: Option<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("sinks", &self.sinks)
            .finish()
    }
}

/// What `/readyz` or `/healthz` answers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Whether the answer is 200.
    pub ok: bool,
    /// One line per thing that is not ready or not alive.
    pub problems: Vec<String>,
    /// One line per sink paused by an operator (`/readyz` only; absent when none is):
    /// ready, but pulling nothing until it resumes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paused: Vec<String>,
}

impl Health {
    /// A health state that also exports each sink's state as `jetsink_sink_state`.
    pub fn exporting(metrics: &crate::metrics::Metrics) -> Health {
        Health {
            sinks: Arc::default(),
            metrics: Some(metrics.clone()),
        }
    }

    /// The handle one runner uses to report its state.
    pub fn sink(&self, name: &str) -> SinkHealth {
        let fresh = SinkState {
            consumer_bound: false,
            destination_ok: false,
            last_error: None,
            paused: None,
            waiting: None,
            heartbeat: Instant::now(),
            shown: None,
        };
        if let Ok(mut map) = self.sinks.lock() {
            map.insert(name.to_string(), fresh);
        }
        self.update(name, |_| {});
        SinkHealth {
            name: name.to_string(),
            health: self.clone(),
        }
    }

    /// Forgets a sink a reload removed: it no longer counts for readiness, and its state
    /// gauge reads 0 for every state.
    pub fn remove(&self, name: &str) {
        if let Ok(mut map) = self.sinks.lock() {
            map.remove(name);
        }
        self.show(name, None);
    }

    /// The names of the sinks with an entry.
    pub fn names(&self) -> Vec<String> {
        self.sinks
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut SinkState)) {
        let changed = match self.sinks.lock() {
            Ok(mut map) => map.get_mut(name).and_then(|s| {
                f(s);
                let now = s.state();
                (s.shown != Some(now)).then(|| {
                    s.shown = Some(now);
                    now
                })
            }),
            Err(_) => None,
        };
        if let Some(state) = changed {
            self.show(name, Some(state));
        }
    }

    /// Sets the one-hot state gauge of `name` (every state 0 with `None`).
    fn show(&self, name: &str, state: Option<&str>) {
        let Some(m) = &self.metrics else {
            return;
        };
        for s in STATES {
            let labels = [("sink", name), ("state", s)];
            m.gauge("jetsink_sink_state", STATE_HELP, &labels)
                .set(i64::from(state == Some(s)));
        }
    }

    /// Readiness: every NATS connection up (`down` names those that are not) and every
    /// sink bound with a usable destination. Paused sinks are listed, and ready.
    pub fn readiness(&self, down: &[&str]) -> Report {
        let mut problems: Vec<String> = down
            .iter()
            .map(|c| format!("nats connection {c}: not connected"))
            .collect();
        let mut paused = Vec::new();
        if let Ok(map) = self.sinks.lock() {
            for (name, s) in map.iter() {
                if let Some(p) = &s.paused {
                    paused.push(format!("sink {name}: {p}"));
                }
                if !s.consumer_bound {
                    problems.push(format!("sink {name}: consumer not bound"));
                }
                if let Some(why) = &s.waiting {
                    problems.push(format!("sink {name}: waiting for its destination: {why}"));
                } else if !s.destination_ok {
                    let why = s.last_error.as_deref().unwrap_or("not open yet");
                    problems.push(format!("sink {name}: destination unavailable: {why}"));
                }
            }
        }
        Report {
            ok: problems.is_empty(),
            problems,
            paused,
        }
    }

    /// Liveness: every runner loop has turned recently.
    pub fn liveness(&self, now: Instant) -> Report {
        let mut problems = Vec::new();
        if let Ok(map) = self.sinks.lock() {
            for (name, s) in map.iter() {
                let idle = now.saturating_duration_since(s.heartbeat);
                if idle > STALL_AFTER {
                    problems.push(format!("sink {name}: loop stalled for {}s", idle.as_secs()));
                }
            }
        }
        Report {
            ok: problems.is_empty(),
            problems,
            paused: Vec::new(),
        }
    }
}

/// One runner's view of [`Health`].
#[derive(Debug, Clone)]
pub struct SinkHealth {
    name: String,
    health: Health,
}

impl SinkHealth {
    /// The loop is alive.
    pub fn beat(&self) {
        self.health
            .update(&self.name, |s| s.heartbeat = Instant::now());
    }

    /// The consumer is (or is no longer) bound.
    pub fn set_bound(&self, bound: bool) {
        self.health.update(&self.name, |s| s.consumer_bound = bound);
    }

    /// The destination works again.
    pub fn destination_ok(&self) {
        self.health.update(&self.name, |s| {
            s.destination_ok = true;
            s.last_error = None;
        });
    }

    /// The destination could not be opened yet and the sink waits for it
    /// (`Some(reason)`), or no longer waits (`None`).
    pub fn set_waiting(&self, why: Option<String>) {
        self.health.update(&self.name, |s| s.waiting = why);
    }

    /// Every consumer of the sink is paused in the server (`Some("paused until …")`), or
    /// no longer (`None`).
    pub fn set_paused(&self, paused: Option<String>) {
        self.health.update(&self.name, |s| s.paused = paused);
    }

    /// The destination failed; `why` is shown by `/readyz` (no payloads, no secrets).
    pub fn destination_failed(&self, why: &str) {
        self.health.update(&self.name, |s| {
            s.destination_ok = false;
            s.last_error = Some(why.to_string());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_connected_bound_and_open() {
        let h = Health::default();
        let s = h.sink("a");
        assert!(!h.readiness(&[]).ok);
        s.set_bound(true);
        s.destination_ok();
        assert!(h.readiness(&[]).ok);
        let r = h.readiness(&["orders"]);
        assert_eq!(r.problems, vec!["nats connection orders: not connected"]);
        s.destination_failed("disk full");
        let r = h.readiness(&[]);
        assert_eq!(
            r.problems,
            vec!["sink a: destination unavailable: disk full"]
        );
    }

    #[test]
    fn a_paused_sink_is_ready_and_named() {
        let h = Health::default();
        let s = h.sink("a");
        s.set_bound(true);
        s.destination_ok();
        s.set_paused(Some("paused until resumed".into()));
        let r = h.readiness(&[]);
        assert!(r.ok);
        assert_eq!(r.paused, vec!["sink a: paused until resumed"]);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"ok":true,"problems":[],"paused":["sink a: paused until resumed"]}"#
        );
        s.set_paused(None);
        assert_eq!(
            serde_json::to_string(&h.readiness(&[])).unwrap(),
            r#"{"ok":true,"problems":[]}"#
        );
    }

    #[test]
    fn a_waiting_sink_is_not_ready_and_named_with_its_reason() {
        let h = Health::default();
        let s = h.sink("pg");
        s.set_bound(true);
        s.set_waiting(Some("connection refused".into()));
        let r = h.readiness(&[]);
        assert!(!r.ok);
        assert_eq!(
            r.problems,
            vec!["sink pg: waiting for its destination: connection refused"]
        );
        s.set_waiting(None);
        s.destination_ok();
        assert!(h.readiness(&[]).ok);
    }

    #[test]
    fn the_state_gauge_is_one_hot_and_follows_the_sink() {
        let metrics = crate::metrics::Metrics::new();
        let h = Health::exporting(&metrics);
        let state = |st: &str| {
            let line = format!("jetsink_sink_state{{sink=\"a\",state=\"{st}\"}} ");
            let text = metrics.render();
            let v = text.lines().find_map(|l| l.strip_prefix(line.as_str()));
            v.map(|v| v.to_string())
        };
        let s = h.sink("a");
        assert_eq!(state("not_bound").as_deref(), Some("1"));
        s.set_bound(true);
        s.set_waiting(Some("refused".into()));
        assert_eq!(state("waiting").as_deref(), Some("1"));
        assert_eq!(state("not_bound").as_deref(), Some("0"));
        s.set_waiting(None);
        s.destination_ok();
        assert_eq!(state("running").as_deref(), Some("1"));
        s.destination_failed("disk full");
        assert_eq!(state("holding").as_deref(), Some("1"));
        s.destination_ok();
        s.set_paused(Some("paused until resumed".into()));
        assert_eq!(state("paused").as_deref(), Some("1"));
        assert_eq!(state("running").as_deref(), Some("0"));
        h.remove("a");
        for st in STATES {
            assert_eq!(state(st).as_deref(), Some("0"), "{st}");
        }
        assert!(h.readiness(&[]).ok, "a removed sink no longer counts");
    }

    #[test]
    fn a_loop_that_stops_beating_is_not_alive() {
        let h = Health::default();
        let s = h.sink("a");
        s.beat();
        let now = Instant::now();
        assert!(h.liveness(now).ok);
        assert!(!h.liveness(now + STALL_AFTER + Duration::from_secs(1)).ok);
    }
}
