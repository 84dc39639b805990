//! One row per sink from two scrapes of a daemon's `/metrics`, its `/readyz`, and the
//! consumers' backlog (from the server, or the daemon's own gauges): the numbers
//! `jetsink top` shows. Pure: the scrapes are passed in, so hostile metrics text is
//! tested without a daemon.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::state::{derive, label, Readiness, SinkState};
use crate::shared::prometheus_text::Sample;

/// A sink's consumers' backlog in the server, summed over its consumers (buckets, lanes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backlog {
    /// Messages not yet delivered (`num_pending`).
    pub pending: u64,
    /// Delivered and not yet acknowledged (`num_ack_pending`).
    pub ack_pending: u64,
    /// Unacknowledged and delivered more than once (`num_redelivered`).
    pub redelivered: u64,
}

/// A sink the config names, and which of its optional stages are on: with a config,
/// lanes and the randomizer's window are shown exactly where they are configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Configured {
    /// The sink's name.
    pub name: String,
    /// `delivery.priority_lanes.enabled`.
    pub lanes: bool,
    /// `delivery.randomizer.enabled`.
    pub randomizer: bool,
}

/// What one scrape read.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// `/metrics`.
    pub samples: Vec<Sample>,
    /// `/readyz`, when it answered with its JSON.
    pub ready: Option<Readiness>,
    /// Consumer info read from the server by sink (`--config`); `None` without a config
    /// or when the server could not be asked.
    pub server: Option<BTreeMap<String, Backlog>>,
}

/// One line of `jetsink top`. `None` is a number the daemon does not export (or not yet:
/// a rate needs two scrapes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The sink's name.
    pub sink: String,
    /// What it is doing.
    #[serde(serialize_with = "state_word")]
    pub state: SinkState,
    /// Messages committed (ACKed after their commit) per second between the scrapes.
    pub rate: Option<f64>,
    /// The consumers' backlog.
    pub pending: Option<u64>,
    /// Delivered and not yet acknowledged.
    pub ack_pending: Option<u64>,
    /// Unacknowledged and redelivered.
    pub redelivered: Option<u64>,
    /// Where the backlog was read: `server` (consumer info, `--config`) or `daemon` (its
    /// gauges, refreshed every 5 s).
    pub backlog_from: Option<&'static str>,
    /// The batch in hand: fetched and not yet ACKed or released.
    pub in_batch: Option<u64>,
    /// Held in the shuffle or rollover buffer.
    pub buffered: Option<u64>,
    /// Copies stored in the dead-letter queue, every reason.
    pub dead_lettered: Option<u64>,
    /// Write attempts that failed transiently and were retried.
    pub retries: Option<u64>,
    /// Destination errors, every class, and failed pulls and ACKs.
    pub errors: Option<u64>,
    /// Lanes in the last scheduled batch, when priority lanes are on.
    pub lanes_active: Option<u64>,
    /// Messages the randomizer delays now, when it is on.
    pub randomizer_window: Option<u64>,
    /// What `/readyz` names as the sink's problem or pause.
    pub last_error: Option<String>,
}

fn state_word<S: serde::Serializer>(state: &SinkState, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.as_str())
}

/// Per sink, the sum of every finite sample of each name.
struct Totals<'a>(HashMap<(&'a str, &'a str), f64>);

impl<'a> Totals<'a> {
    fn of(samples: &'a [Sample]) -> Totals<'a> {
        let mut map = HashMap::new();
        for s in samples {
            let (Some(sink), Ok(v)) = (label(s, "sink"), s.value.parse::<f64>()) else {
                continue;
            };
            // Retried batches are one outcome of their family, kept apart.
            let name = if s.name == BATCHES && label(s, "outcome") == Some("retried") {
                RETRIED
            } else {
                s.name.as_str()
            };
            if v.is_finite() {
                *map.entry((name, sink)).or_insert(0.0) += v;
            }
        }
        Totals(map)
    }

    fn get(&self, name: &str, sink: &str) -> Option<f64> {
        self.0.get(&(name, sink)).copied()
    }

    fn count(&self, name: &str, sink: &str) -> Option<u64> {
        self.get(name, sink).map(count)
    }

    /// The sum of several families, `None` when the daemon exports none of them.
    fn sum(&self, names: &[&str], sink: &str) -> Option<u64> {
        let found: Vec<f64> = names.iter().filter_map(|n| self.get(n, sink)).collect();
        (!found.is_empty()).then(|| count(found.iter().sum()))
    }
}

/// A metric value as a whole count: negative or not finite counts as 0, beyond u64 as
/// the largest.
fn count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        // `as` saturates at u64::MAX.
        v as u64
    } else {
        0
    }
}

/// Per second between two readings of a counter `seconds` apart. A counter that went
/// down was reset (the daemon restarted): what it counted since is the increase, as
/// Prometheus' `rate` reads it. `None` without a first reading or a positive interval.
pub fn rate(before: Option<f64>, now: f64, seconds: f64) -> Option<f64> {
    let before = before?;
    if !(seconds.is_finite() && seconds > 0.0 && before.is_finite() && now.is_finite()) {
        return None;
    }
    let increase = if now >= before {
        now - before
    } else {
        now.max(0.0)
    };
    // Milli-messages per second are noise; rounded, the JSON form reads cleanly.
    Some((increase / seconds * 1000.0).round() / 1000.0).filter(|r| r.is_finite())
}

/// Every sink name the scrape shows (any sample with a `sink` label) and the config names.
pub fn sink_names(samples: &[Sample], configured: &[Configured]) -> BTreeSet<String> {
    samples
        .iter()
        .filter_map(|s| label(s, "sink"))
        .map(str::to_string)
        .chain(configured.iter().map(|c| c.name.clone()))
        .collect()
}

const ACKED: &str = "jetsink_messages_acked_total";
const BATCHES: &str = "jetsink_batches_total";
/// The key retried batches are totalled under: `jetsink_batches_total{outcome="retried"}`.
const RETRIED: &str = "jetsink_batches_total{outcome=retried}";

/// The rows of `now`, with rates against `before` taken `seconds` earlier (`None` on the
/// first scrape), for the sinks the scrape shows and those `configured`.
pub fn rows(now: &Scrape, before: Option<(&Scrape, f64)>, configured: &[Configured]) -> Vec<Row> {
    let totals = Totals::of(&now.samples);
    let earlier = before.map(|(b, secs)| (Totals::of(&b.samples), secs));
    sink_names(&now.samples, configured)
        .into_iter()
        .map(|sink| {
            let rate = match (&earlier, totals.get(ACKED, &sink)) {
                (Some((b, secs)), Some(n)) => rate(b.get(ACKED, &sink), n, *secs),
                _ => None,
            };
            let conf = configured.iter().find(|c| c.name == sink);
            row(&totals, now, sink, rate, conf)
        })
        .collect()
}

/// One sink's row.
fn row(
    t: &Totals,
    now: &Scrape,
    sink: String,
    rate: Option<f64>,
    conf: Option<&Configured>,
) -> Row {
    let mut derived = derive(&now.samples, now.ready.as_ref(), &sink);
    // A configured sink the daemon shows nothing of is not known to run, whatever a
    // /readyz that does not name it implies.
    let shown = now
        .samples
        .iter()
        .any(|s| label(s, "sink") == Some(sink.as_str()));
    if !shown && derived.state == SinkState::Running {
        derived.state = SinkState::Unknown;
    }
    let (backlog, from) = backlog(t, now.server.as_ref(), &sink);
    let s = sink.as_str();
    // Without a config, a stage that has done something is taken to be on.
    let used =
        |a: &str, b: &str| t.get(a, s).unwrap_or(0.0) > 0.0 || t.get(b, s).unwrap_or(0.0) > 0.0;
    let lanes_on = conf.map_or_else(
        || {
            used(
                "jetsink_priority_lane_messages_total",
                "jetsink_current_priority_lanes_active",
            )
        },
        |c| c.lanes,
    );
    let randomizer_on = conf.map_or_else(
        || {
            used(
                "jetsink_randomizer_delayed_total",
                "jetsink_randomizer_window",
            )
        },
        |c| c.randomizer,
    );
    Row {
        state: derived.state,
        rate,
        pending: backlog.map(|b| b.pending),
        ack_pending: backlog.map(|b| b.ack_pending),
        redelivered: backlog.map(|b| b.redelivered),
        backlog_from: from,
        in_batch: t.count("jetsink_inflight_messages", s),
        buffered: t.sum(
            &["jetsink_shuffle_buffered", "jetsink_rollover_buffered"],
            s,
        ),
        dead_lettered: t.count("jetsink_dlq_published_total", s),
        retries: t.count(RETRIED, s),
        errors: t.sum(
            &[
                "jetsink_sink_errors_total",
                "jetsink_fetch_errors_total",
                "jetsink_ack_errors_total",
            ],
            s,
        ),
        lanes_active: lanes_on
            .then(|| t.count("jetsink_current_priority_lanes_active", s))
            .flatten(),
        randomizer_window: randomizer_on
            .then(|| t.count("jetsink_randomizer_window", s))
            .flatten(),
        last_error: derived.reason,
        sink,
    }
}

/// The consumers' backlog of `sink`: the server's answer when there is one for it, else
/// the daemon's gauges.
fn backlog(
    t: &Totals,
    server: Option<&BTreeMap<String, Backlog>>,
    sink: &str,
) -> (Option<Backlog>, Option<&'static str>) {
    if let Some(b) = server.and_then(|s| s.get(sink)) {
        return (Some(*b), Some("server"));
    }
    let pending = t.count("jetsink_consumer_pending_messages", sink);
    let ack_pending = t.count("jetsink_consumer_ack_pending_messages", sink);
    let redelivered = t.count("jetsink_consumer_redelivered_messages", sink);
    match (pending, ack_pending, redelivered) {
        (None, None, None) => (None, None),
        (p, a, r) => (
            Some(Backlog {
                pending: p.unwrap_or(0),
                ack_pending: a.unwrap_or(0),
                redelivered: r.unwrap_or(0),
            }),
            Some("daemon"),
        ),
    }
}
