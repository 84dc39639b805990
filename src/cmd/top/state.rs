//! What a sink is doing, for `jetsink top`'s state column. A daemon that exports
//! `jetsink_sink_state{sink,state}` (one-hot) says it directly; an older one is read
//! from `/readyz` (its `problems` and `paused` lines name the sink) and `jetsink_paused`,
//! so `top` works against every daemon version in a rolling upgrade. Pure.

use serde::Deserialize;

use crate::shared::prometheus_text::Sample;

/// The gauge family a daemon with per-sink states exports.
pub const STATE_FAMILY: &str = "jetsink_sink_state";

/// One sink's state, most severe last in the order [`SinkState::severity`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SinkState {
    /// Pulling and writing.
    Running,
    /// Its consumers are paused in the server (`jetsink pause`).
    Paused,
    /// Holding its batch after a destination failure, retrying.
    Holding,
    /// Waiting for its destination to appear (not opened yet).
    Waiting,
    /// Its consumer is not bound (NATS down, or re-binding failed).
    NotBound,
    /// Neither the gauge nor `/readyz` said anything about it.
    Unknown,
}

impl SinkState {
    /// The word shown, as the gauge's `state` label spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkState::Running => "running",
            SinkState::Paused => "paused",
            SinkState::Holding => "holding",
            SinkState::Waiting => "waiting",
            SinkState::NotBound => "not_bound",
            SinkState::Unknown => "unknown",
        }
    }

    /// The state a `state` label names.
    pub fn from_label(word: &str) -> Option<SinkState> {
        Some(match word {
            "running" => SinkState::Running,
            "paused" => SinkState::Paused,
            "holding" => SinkState::Holding,
            "waiting" => SinkState::Waiting,
            "not_bound" => SinkState::NotBound,
            _ => return None,
        })
    }
}

/// The body of `/readyz`; fields a newer daemon adds are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Readiness {
    /// Whether the daemon is ready.
    #[serde(default)]
    pub ok: bool,
    /// `sink <name>: …` and `nats connection <name>: …` lines.
    #[serde(default)]
    pub problems: Vec<String>,
    /// `sink <name>: paused until …` lines.
    #[serde(default)]
    pub paused: Vec<String>,
}

/// A sink's state and the reason `/readyz` gives for it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// The state.
    pub state: SinkState,
    /// The last error or reason `/readyz` names for this sink (`None` when it names none).
    pub reason: Option<String>,
}

/// The state the one-hot `jetsink_sink_state` gauge gives `sink`, when the daemon exports
/// it: the state whose series is 1 (the most severe, should several be).
pub fn from_gauge(samples: &[Sample], sink: &str) -> Option<SinkState> {
    samples
        .iter()
        .filter(|s| s.name == STATE_FAMILY && label(s, "sink") == Some(sink))
        .filter(|s| s.value.parse::<f64>().is_ok_and(|v| v == 1.0))
        .filter_map(|s| label(s, "state").and_then(SinkState::from_label))
        .max()
}

/// What `/readyz` says about `sink`, with `jetsink_paused` (`paused_gauge`) for a daemon
/// whose `/readyz` predates the `paused` list. The most severe line wins: a sink that is
/// paused and not bound is not bound.
pub fn from_readiness(ready: &Readiness, paused_gauge: bool, sink: &str) -> Derived {
    let prefix = format!("sink {sink}: ");
    let mut state = SinkState::Running;
    let mut reason = None;
    for line in &ready.problems {
        let Some(what) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (found, why) = problem_state(what);
        if found >= state {
            state = found;
            reason = Some(why.to_string());
        }
    }
    let paused_line = ready.paused.iter().find_map(|l| l.strip_prefix(&prefix));
    if state == SinkState::Running && (paused_line.is_some() || paused_gauge) {
        state = SinkState::Paused;
        reason = paused_line.map(str::to_string);
    }
    Derived { state, reason }
}

/// The state one `/readyz` problem of a sink stands for, and its reason.
fn problem_state(what: &str) -> (SinkState, &str) {
    if what.starts_with("consumer not bound") {
        return (SinkState::NotBound, what);
    }
    if let Some(why) = what.strip_prefix("destination unavailable: ") {
        // A destination not opened yet is waited for; one that failed after opening is
        // held for.
        let state = if why == "not open yet" || why.contains("waiting") {
            SinkState::Waiting
        } else {
            SinkState::Holding
        };
        return (state, why);
    }
    if what.contains("waiting") {
        return (SinkState::Waiting, what);
    }
    (SinkState::Holding, what)
}

/// The state of `sink`: the gauge's when the daemon exports it, else derived from
/// `/readyz` and `jetsink_paused`; [`SinkState::Unknown`] when neither could be read.
/// The reason always comes from `/readyz`.
pub fn derive(samples: &[Sample], ready: Option<&Readiness>, sink: &str) -> Derived {
    let paused_gauge = samples.iter().any(|s| {
        s.name == "jetsink_paused"
            && label(s, "sink") == Some(sink)
            && s.value.parse::<f64>().is_ok_and(|v| v == 1.0)
    });
    let from_ready = ready.map(|r| from_readiness(r, paused_gauge, sink));
    let reason = from_ready.as_ref().and_then(|d| d.reason.clone());
    match (from_gauge(samples, sink), from_ready) {
        (Some(state), _) => Derived { state, reason },
        (None, Some(d)) => d,
        (None, None) if paused_gauge => Derived {
            state: SinkState::Paused,
            reason: None,
        },
        (None, None) => Derived {
            state: SinkState::Unknown,
            reason: None,
        },
    }
}

/// The value of label `key` of `sample`.
pub fn label<'a>(sample: &'a Sample, key: &str) -> Option<&'a str> {
    sample
        .labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::prometheus_text::parse;

    fn ready(problems: &[&str], paused: &[&str]) -> Readiness {
        Readiness {
            ok: problems.is_empty(),
            problems: problems.iter().map(|s| s.to_string()).collect(),
            paused: paused.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_one_hot_gauge_names_the_state_when_the_daemon_exports_it() {
        let s = parse(
            "# TYPE jetsink_sink_state gauge\n\
             jetsink_sink_state{sink=\"a\",state=\"running\"} 0\n\
             jetsink_sink_state{sink=\"a\",state=\"waiting\"} 1\n\
             jetsink_sink_state{sink=\"b\",state=\"running\"} 1\n\
             jetsink_sink_state{sink=\"b\",state=\"future_state\"} 0\n",
        )
        .unwrap();
        assert_eq!(from_gauge(&s, "a"), Some(SinkState::Waiting));
        assert_eq!(from_gauge(&s, "b"), Some(SinkState::Running));
        assert_eq!(from_gauge(&s, "c"), None);
        // The gauge wins over /readyz; the reason still comes from /readyz.
        let r = ready(
            &["sink a: destination unavailable: connection refused"],
            &[],
        );
        assert_eq!(
            derive(&s, Some(&r), "a"),
            Derived {
                state: SinkState::Waiting,
                reason: Some("connection refused".into())
            }
        );
    }

    #[test]
    fn without_the_gauge_readyz_lines_give_the_state_and_the_reason() {
        let r = ready(
            &[
                "nats connection shared: not connected",
                "sink a: consumer not bound",
                "sink a: destination unavailable: disk full",
                "sink b: destination unavailable: database is locked",
                "sink c: destination unavailable: not open yet",
                "sink ab: consumer not bound",
            ],
            &[
                "sink d: paused until resumed",
                "sink a: paused until resumed",
            ],
        );
        let state = |sink| from_readiness(&r, false, sink).state;
        assert_eq!(state("a"), SinkState::NotBound, "most severe wins");
        assert_eq!(state("b"), SinkState::Holding);
        assert_eq!(state("c"), SinkState::Waiting);
        assert_eq!(state("d"), SinkState::Paused);
        assert_eq!(state("e"), SinkState::Running);
        assert_eq!(
            from_readiness(&r, false, "b").reason.as_deref(),
            Some("database is locked")
        );
        assert_eq!(
            from_readiness(&r, false, "d").reason.as_deref(),
            Some("paused until resumed")
        );
    }

    #[test]
    fn the_paused_gauge_pauses_a_sink_readyz_does_not_name() {
        let s = parse("jetsink_paused{sink=\"a\"} 1\njetsink_paused{sink=\"b\"} 0\n").unwrap();
        let r = ready(&[], &[]);
        assert_eq!(derive(&s, Some(&r), "a").state, SinkState::Paused);
        assert_eq!(derive(&s, Some(&r), "b").state, SinkState::Running);
        assert_eq!(derive(&s, None, "a").state, SinkState::Paused);
        assert_eq!(derive(&s, None, "b").state, SinkState::Unknown);
    }

    #[test]
    fn readyz_bodies_parse_with_fields_missing_or_added() {
        let r: Readiness = serde_json::from_str(r#"{"ok":true,"problems":[],"later":1}"#).unwrap();
        assert_eq!(r, ready(&[], &[]));
        let r: Readiness = serde_json::from_str("{}").unwrap();
        assert!(!r.ok && r.problems.is_empty());
    }
}
