//! Liveness and readiness as the HTTP endpoints report them.
//!
//! Each runner updates its own entry: a heartbeat every loop turn (liveness: the loop is
//! not stuck) and whether its consumer is bound and its destination is usable
//! (readiness). The state of each NATS connection is read from its client, and readiness
//! needs every one of them up.
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
    heartbeat: Instant,
}

/// Shared readiness state of every sink.
#[derive(Debug, Clone, Default)]
pub struct Health {
    sinks: Arc<Mutex<BTreeMap<String, SinkState>>>,
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
    /// The handle one runner uses to report its state.
    pub fn sink(&self, name: &str) -> SinkHealth {
        if let Ok(mut map) = self.sinks.lock() {
            map.insert(
                name.to_string(),
                SinkState {
                    consumer_bound: false,
                    destination_ok: false,
                    last_error: None,
                    paused: None,
                    heartbeat: Instant::now(),
                },
            );
        }
        SinkHealth {
            name: name.to_string(),
            health: self.clone(),
        }
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut SinkState)) {
        if let Ok(mut map) = self.sinks.lock() {
            if let Some(s) = map.get_mut(name) {
                f(s);
            }
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
                if !s.destination_ok {
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
    fn a_loop_that_stops_beating_is_not_alive() {
        let h = Health::default();
        let s = h.sink("a");
        s.beat();
        let now = Instant::now();
        assert!(h.liveness(now).ok);
        assert!(!h.liveness(now + STALL_AFTER + Duration::from_secs(1)).ok);
    }
}
