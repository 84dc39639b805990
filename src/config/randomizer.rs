//! The `delivery.randomizer` section: its shape, its defaults, its validation, and the pure
//! checks made against the live consumer at start-up. (`source.buckets`, the other way to
//! break order, is [`super::buckets`].)
//!
//! Both sections exist to break strict publish order cheaply and within a bound, as the
//! specification recommends instead of a global shuffle:
//!
//! - the delayed-NAK randomizer (`delivery.randomizer`, off by default) NAKs a random part
//!   of the first deliveries with a random delay, so later messages overtake them; the
//!   delayed set (the *window*) is capped by `max_window`. A delayed message stays
//!   outstanding on the server until it is redelivered and ACKed, so it counts toward the
//!   consumer's MaxAckPending and costs one extra delivery: [`check_consumer`] refuses a
//!   consumer on which that would throttle delivery or exhaust MaxDeliver;
//! - random subject buckets (`source.buckets`) spread messages over `prefix.0` …
//!   `prefix.N-1` at publish time and read each bucket through its own filtered durable
//!   consumer, so buckets advance at independent rates (one wildcard consumer would still
//!   deliver in strict stream order).
//!
//! Every problem is reported with its JSON path, all at once. The run-time object built
//! from [`RandomizerConfig`] is [`crate::pipeline::randomizer::Randomizer`], built only from
//! a section these checks accepted, without checking it again.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::issue::Issue;

/// Largest `max_delay_ms` (and `min_delay_ms`): one hour. A longer delay keeps a message
/// outstanding, and counted against MaxAckPending, for longer than any useful shuffle.
pub const MAX_DELAY_MS: u64 = 3_600_000;
/// Largest `max_window`, and the largest number of messages the randomizer may leave
/// unacknowledged at once (`max_window` + `delivery.batch_size`): the specification's rule
/// of thumb of keeping a consumer's unacknowledged count below roughly 100,000.
pub const MAX_UNACKED: usize = 100_000;
/// The least time, in milliseconds, that AckWait must leave after a fetch for NAKing the
/// delayed messages and writing and committing the kept ones (see [`check_consumer`]).
pub const MIN_WRITE_BUDGET_MS: u64 = 5_000;
/// Longest stream or consumer name the server accepts, in bytes.
pub const MAX_NAME_LENGTH: usize = 255;

// ---------------------------------------------------------------------------------------
// delivery.randomizer
// ---------------------------------------------------------------------------------------

/// `delivery.randomizer`: delay a random part of the first deliveries with a delayed NAK so
/// that later messages overtake them, within a bounded window.
///
/// For each message of a fetched batch delivered for the first time: with probability
/// `process_immediately_probability` it stays in the batch; otherwise it is NAKed with a
/// delay drawn uniformly from [`min_delay_ms`, `max_delay_ms`] and removed from the batch. A
/// redelivered message is always processed at once, never delayed again.
///
/// [`min_delay_ms`]: RandomizerConfig::min_delay_ms
/// [`max_delay_ms`]: RandomizerConfig::max_delay_ms
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomizerConfig {
    /// Delay first deliveries at random. Default false: every message is processed in
    /// fetched order.
    #[serde(default)]
    pub enabled: bool,
    /// Probability that a first delivery is processed at once, 0 to 1. Default 0.8 (one
    /// first delivery in five is delayed). 1 delays nothing; 0 delays every first delivery
    /// while the window has room, so each message is written on its second delivery.
    #[serde(default = "default_process_immediately_probability")]
    pub process_immediately_probability: f64,
    /// Shortest NAK delay, in milliseconds, 0 to `max_delay_ms`. Default 100.
    #[serde(default = "default_min_delay_ms")]
    pub min_delay_ms: u64,
    /// Longest NAK delay, in milliseconds, 1 to 3600000 and at least `min_delay_ms`.
    /// Default 2000. The window grows toward rate × mean delay × (1 − probability): lower
    /// it when throughput is high.
    #[serde(default = "default_max_delay_ms")]
    pub max_delay_ms: u64,
    /// Most messages delayed and not yet redelivered, 1 to 100000; no message is delayed
    /// while this many are out. `max_window` + `delivery.batch_size` must stay at or below
    /// 100000, and the consumer's `max_ack_pending` must be -1 or at least `max_window` +
    /// 2 × `delivery.batch_size` (the window, the batch being written and the one pulled
    /// ahead are unacknowledged at once). Default 1000.
    #[serde(default = "default_max_window")]
    pub max_window: usize,
    /// Lower the delay probability smoothly toward 0 as the window fills, so the window
    /// settles below `max_window` instead of hitting it. Default false: the source
    /// document's algorithm, where a first delivery is delayed with probability exactly
    /// 1 − P while the window has room. A jetsink extension, opt-in.
    #[serde(default)]
    pub adaptive: bool,
    /// What `adaptive` measures the fill by: `"window"` (the default), this instance's own
    /// delayed messages; `"server"`, also what the server counts outstanding on the
    /// consumer (consumer info `num_ack_pending`, read every second, less the two batches
    /// this instance may hold), so that instances sharing one consumer see each other's
    /// delays and `max_window` bounds the consumer's delayed set, as the source document
    /// advises ("reduce the probability of delaying messages when pending counts grow").
    /// Needs `adaptive: true`. A jetsink extension, opt-in.
    #[serde(default)]
    pub adaptive_source: AdaptiveSource,
    /// Start even when the live consumer fails the randomizer's start-up checks
    /// (`max_ack_pending`, `max_deliver`, `ack_wait_ms`); the problems are logged as
    /// warnings instead of refusing to start. Default false.
    #[serde(default)]
    pub skip_startup_checks: bool,
}

/// `delivery.randomizer.adaptive_source`: whose count of delayed messages the adaptive
/// probability follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AdaptiveSource {
    /// This instance's own window.
    #[default]
    Window,
    /// The larger of the own window and the consumer's outstanding count in the server.
    Server,
}

impl Default for RandomizerConfig {
    fn default() -> Self {
        RandomizerConfig {
            enabled: false,
            process_immediately_probability: default_process_immediately_probability(),
            min_delay_ms: default_min_delay_ms(),
            max_delay_ms: default_max_delay_ms(),
            max_window: default_max_window(),
            adaptive: false,
            adaptive_source: AdaptiveSource::Window,
            skip_startup_checks: false,
        }
    }
}

fn default_process_immediately_probability() -> f64 {
    0.8
}
fn default_min_delay_ms() -> u64 {
    100
}
fn default_max_delay_ms() -> u64 {
    2_000
}
fn default_max_window() -> usize {
    1_000
}

/// Checks `delivery.randomizer` found at `path` (empty for the section itself) against the
/// sink's `delivery.batch_size`, and returns every problem. A disabled randomizer is
/// checked too, so turning it on later cannot surprise.
pub fn validate_randomizer(cfg: &RandomizerConfig, path: &str, batch_size: usize) -> Vec<Issue> {
    let mut out = validate_randomizer_fields(cfg, path);
    let unacked = cfg.max_window.saturating_add(batch_size);
    if (1..=MAX_UNACKED).contains(&cfg.max_window) && unacked > MAX_UNACKED {
        out.push(issue(
            at(path, "max_window"),
            format!(
                "max_window ({}) + delivery.batch_size ({batch_size}) = {unacked} messages could be \
                 unacknowledged at once (delayed plus in hand); keep it at or below {MAX_UNACKED}, \
                 above which a large pending set slows the consumer",
                cfg.max_window
            ),
        ));
    }
    out
}

/// The checks of [`validate_randomizer`] that need nothing but the section: what
/// [`crate::pipeline::randomizer::Randomizer::new`] requires to run correctly.
pub(crate) fn validate_randomizer_fields(cfg: &RandomizerConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let p = cfg.process_immediately_probability;
    // Written so that NaN fails too. P = 0 is the source document's "delay every first
    // delivery": each message is delayed once (while the window has room), then written.
    if !((0.0..=1.0).contains(&p)) {
        out.push(issue(
            at(path, "process_immediately_probability"),
            format!("must be between 0 and 1, got {p}"),
        ));
    }
    if cfg.min_delay_ms > MAX_DELAY_MS {
        out.push(issue(
            at(path, "min_delay_ms"),
            format!(
                "must be between 0 and {MAX_DELAY_MS}, got {}",
                cfg.min_delay_ms
            ),
        ));
    }
    if cfg.max_delay_ms < cfg.min_delay_ms.max(1) || cfg.max_delay_ms > MAX_DELAY_MS {
        out.push(issue(
            at(path, "max_delay_ms"),
            format!(
                "must be between min_delay_ms ({}) and {MAX_DELAY_MS}, and at least 1, got {}",
                cfg.min_delay_ms, cfg.max_delay_ms
            ),
        ));
    }
    if !(1..=MAX_UNACKED).contains(&cfg.max_window) {
        out.push(issue(
            at(path, "max_window"),
            format!(
                "must be between 1 and {MAX_UNACKED}, got {}",
                cfg.max_window
            ),
        ));
    }
    if cfg.adaptive_source == AdaptiveSource::Server && !cfg.adaptive {
        out.push(issue(
            at(path, "adaptive_source"),
            "\"server\" is what adaptive measures the window by, and adaptive is false: \
             set adaptive to true, or remove adaptive_source"
                .to_string(),
        ));
    }
    out
}

/// The start-up checks of an enabled randomizer against the live consumer's settings.
/// Returns one explanation per problem (empty when all is well, and always empty for a
/// disabled randomizer). The runner refuses to start with them (exit 78) unless
/// `skip_startup_checks` is set, in which case it logs them as warnings; `validate` can
/// run the same checks on the configured values.
///
/// - `max_ack_pending` must be -1 or at least `max_window` + 2 × `batch_size`. A delayed
///   message is NAKed, not ACKed, so it stays outstanding and counts toward MaxAckPending
///   until it is redelivered and ACKed; on top of the window the runner holds the batch
///   being written and the one pulled ahead. A smaller cap makes the server stop
///   delivering new messages whenever the window fills, so the cap would throttle the
///   sink instead of being a safety net.
/// - `max_deliver` must be -1 or at least 2: the delayed NAK uses up the first delivery,
///   so the message is written on its second; with 1 it would never be written.
/// - `ack_wait_ms` must be at least `batch_timeout_ms` + [`MIN_WRITE_BUDGET_MS`]. A kept
///   message may already have waited up to `batch_timeout_ms` in the fetch, and must then
///   wait for the delayed messages to be NAKed and for the batch to be written and
///   committed before it is ACKed; if AckWait runs out first the server redelivers it
///   while it is still being processed. The write time is unknown offline, so the check
///   demands a floor of 5 seconds for it; a destination whose batches take longer needs a
///   longer AckWait still.
pub fn check_consumer(
    cfg: &RandomizerConfig,
    batch_size: usize,
    max_ack_pending: i64,
    max_deliver: i64,
    ack_wait_ms: u64,
    batch_timeout_ms: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if !cfg.enabled {
        return out;
    }
    // The window, the batch being written and the batch pulled ahead.
    let needed = cfg.max_window.saturating_add(batch_size.saturating_mul(2));
    let needed_i64 = i64::try_from(needed).unwrap_or(i64::MAX);
    if max_ack_pending != -1 && max_ack_pending < needed_i64 {
        out.push(format!(
            "consumer max_ack_pending is {max_ack_pending}; with the randomizer it must be -1 or \
             at least max_window ({}) + 2 x batch_size ({batch_size}) = {needed}: delayed messages \
             stay unacknowledged and count toward max_ack_pending until they are redelivered and \
             ACKed, next to the batch being written and the one pulled ahead, so a smaller cap \
             stops delivery whenever the window fills instead of acting as a safety net",
            cfg.max_window
        ));
    }
    if max_deliver != -1 && max_deliver < 2 {
        out.push(format!(
            "consumer max_deliver is {max_deliver}; with the randomizer it must be -1 or at least 2: \
             the delayed NAK uses up the first delivery, so a delayed message is written on its \
             second delivery"
        ));
    }
    let needed_wait = batch_timeout_ms.saturating_add(MIN_WRITE_BUDGET_MS);
    if ack_wait_ms < needed_wait {
        out.push(format!(
            "consumer ack_wait_ms is {ack_wait_ms}; with the randomizer it must be at least \
             batch_timeout_ms ({batch_timeout_ms}) + {MIN_WRITE_BUDGET_MS} = {needed_wait}: a kept \
             message may wait batch_timeout_ms in the fetch and must then be written and committed \
             after the delayed messages are NAKed, and an AckWait expiry redelivers it while it is \
             still being processed"
        ));
    }
    out
}

/// The mean NAK delay of `cfg`, in seconds: the midpoint of [`min_delay_ms`, `max_delay_ms`].
///
/// [`min_delay_ms`]: RandomizerConfig::min_delay_ms
/// [`max_delay_ms`]: RandomizerConfig::max_delay_ms
pub fn mean_delay_secs(cfg: &RandomizerConfig) -> f64 {
    (cfg.min_delay_ms as f64 + cfg.max_delay_ms as f64) / 2.0 / 1_000.0
}

/// The specification's estimate of the window for a sink processing `rate_per_sec`
/// messages per second: R × D × (1 − P), with D the mean delay in seconds and 1 − P the
/// share of first deliveries that are delayed (each delayed message stays in the window
/// for about D, so by Little's law the window holds about that many). It ignores
/// `max_window` and `adaptive`; [`settled_window`] applies them. A rate that is negative or
/// not a number counts as 0.
pub fn expected_window(rate_per_sec: f64, cfg: &RandomizerConfig) -> f64 {
    let rate = if rate_per_sec.is_finite() && rate_per_sec > 0.0 {
        rate_per_sec
    } else {
        0.0
    };
    let delayed_share = (1.0 - cfg.process_immediately_probability).clamp(0.0, 1.0);
    rate * mean_delay_secs(cfg) * delayed_share
}

/// Where the window settles at `rate_per_sec`, with `max_window` and `adaptive` applied to
/// [`expected_window`] `a`: without `adaptive`, `min(a, max_window)`; with it the delay
/// probability is scaled by (1 − window / max_window), so the steady state solves
/// W = a × (1 − W / max_window), that is W = a × max_window / (a + max_window).
pub fn settled_window(rate_per_sec: f64, cfg: &RandomizerConfig) -> f64 {
    let a = expected_window(rate_per_sec, cfg);
    let m = cfg.max_window as f64;
    if m <= 0.0 {
        return 0.0;
    }
    if cfg.adaptive {
        a * m / (a + m)
    } else {
        a.min(m)
    }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// `path.key`, or `key` alone at the root.
pub(super) fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn issue(path: String, message: impl Into<String>) -> Issue {
    Issue {
        path,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::deserialize_at;

    const AT: &str = "sinks.x.delivery.randomizer";

    fn messages(issues: &[Issue]) -> Vec<String> {
        issues.iter().map(Issue::to_string).collect()
    }

    fn enabled() -> RandomizerConfig {
        RandomizerConfig {
            enabled: true,
            ..RandomizerConfig::default()
        }
    }

    #[test]
    fn defaults_are_documented_values_and_valid() {
        let cfg: RandomizerConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(cfg, RandomizerConfig::default());
        assert!(!cfg.enabled);
        assert_eq!(cfg.process_immediately_probability, 0.8);
        assert_eq!((cfg.min_delay_ms, cfg.max_delay_ms), (100, 2_000));
        assert_eq!(cfg.max_window, 1_000);
        assert!(
            !cfg.adaptive,
            "the source document's algorithm unless asked"
        );
        assert!(!cfg.skip_startup_checks);
        assert!(validate_randomizer(&cfg, AT, 500).is_empty());
        assert!(validate_randomizer(&cfg, AT, 10_000).is_empty());
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused_with_their_path() {
        let e = deserialize_at::<RandomizerConfig>(AT, serde_json::json!({"enable": true}))
            .unwrap_err();
        assert_eq!(e.path, format!("{AT}.enable"));
        assert!(
            e.message.contains("unknown field `enable`"),
            "{}",
            e.message
        );
        let e = deserialize_at::<RandomizerConfig>(AT, serde_json::json!({"max_window": -1}))
            .unwrap_err();
        assert_eq!(e.path, format!("{AT}.max_window"));
    }

    #[test]
    fn a_probability_of_0_is_accepted_so_every_first_delivery_can_be_delayed() {
        let cfg = RandomizerConfig {
            enabled: true,
            process_immediately_probability: 0.0,
            ..RandomizerConfig::default()
        };
        assert!(validate_randomizer_fields(&cfg, AT).is_empty());
    }

    #[test]
    fn every_bad_value_is_reported_with_its_path() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"process_immediately_probability": 1.5}"#,
                "sinks.x.delivery.randomizer.process_immediately_probability: must be between 0 and 1, got 1.5",
            ),
            (
                r#"{"process_immediately_probability": -0.1}"#,
                "sinks.x.delivery.randomizer.process_immediately_probability: must be between 0 and 1, got -0.1",
            ),
            (
                r#"{"min_delay_ms": 500, "max_delay_ms": 400}"#,
                "sinks.x.delivery.randomizer.max_delay_ms: must be between min_delay_ms (500) and 3600000, and at least 1, got 400",
            ),
            (
                r#"{"min_delay_ms": 0, "max_delay_ms": 0}"#,
                "sinks.x.delivery.randomizer.max_delay_ms: must be between min_delay_ms (0) and 3600000, and at least 1, got 0",
            ),
            (
                r#"{"max_delay_ms": 3600001}"#,
                "sinks.x.delivery.randomizer.max_delay_ms: must be between min_delay_ms (100) and 3600000, and at least 1, got 3600001",
            ),
            (
                r#"{"max_window": 0}"#,
                "sinks.x.delivery.randomizer.max_window: must be between 1 and 100000, got 0",
            ),
            (
                r#"{"max_window": 100001}"#,
                "sinks.x.delivery.randomizer.max_window: must be between 1 and 100000, got 100001",
            ),
        ];
        for (json, want) in cases {
            let cfg: RandomizerConfig = serde_json::from_str(json).unwrap();
            assert_eq!(
                messages(&validate_randomizer(&cfg, AT, 1)),
                [*want],
                "{json}"
            );
        }
    }

    #[test]
    fn min_delay_above_the_cap_is_reported_on_both_fields() {
        let cfg = RandomizerConfig {
            min_delay_ms: MAX_DELAY_MS + 1,
            max_delay_ms: MAX_DELAY_MS + 2,
            ..RandomizerConfig::default()
        };
        let paths: Vec<String> = validate_randomizer(&cfg, "", 1)
            .into_iter()
            .map(|i| i.path)
            .collect();
        assert_eq!(paths, ["min_delay_ms", "max_delay_ms"]);
    }

    #[test]
    fn nan_probability_is_refused() {
        let cfg = RandomizerConfig {
            process_immediately_probability: f64::NAN,
            ..RandomizerConfig::default()
        };
        assert_eq!(validate_randomizer(&cfg, "", 1).len(), 1);
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let cfg = RandomizerConfig {
            enabled: true,
            process_immediately_probability: -0.5,
            min_delay_ms: 10,
            max_delay_ms: 5,
            max_window: 0,
            adaptive: false,
            adaptive_source: AdaptiveSource::Server,
            skip_startup_checks: false,
        };
        let paths: Vec<String> = validate_randomizer(&cfg, AT, 500)
            .into_iter()
            .map(|i| i.path)
            .collect();
        assert_eq!(
            paths,
            [
                format!("{AT}.process_immediately_probability"),
                format!("{AT}.max_delay_ms"),
                format!("{AT}.max_window"),
                format!("{AT}.adaptive_source"),
            ]
        );
    }

    #[test]
    fn a_server_fed_source_is_accepted_with_adaptive_and_named_without() {
        let fed = RandomizerConfig {
            enabled: true,
            adaptive: true,
            adaptive_source: AdaptiveSource::Server,
            ..RandomizerConfig::default()
        };
        assert!(validate_randomizer(&fed, AT, 500).is_empty());
        let parsed: RandomizerConfig =
            serde_json::from_str(r#"{"adaptive": true, "adaptive_source": "server"}"#).unwrap();
        assert_eq!(parsed.adaptive_source, AdaptiveSource::Server);
        assert!(
            serde_json::from_str::<RandomizerConfig>(r#"{"adaptive_source": "both"}"#).is_err()
        );
        let alone = RandomizerConfig {
            adaptive: false,
            ..fed
        };
        let issues = validate_randomizer(&alone, AT, 500);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].path, format!("{AT}.adaptive_source"));
        assert!(issues[0].message.contains("adaptive is false"));
    }

    #[test]
    fn window_plus_batch_must_stay_within_the_rule_of_thumb() {
        let cfg = RandomizerConfig {
            max_window: 95_000,
            ..RandomizerConfig::default()
        };
        assert!(validate_randomizer(&cfg, AT, 5_000).is_empty());
        let got = messages(&validate_randomizer(&cfg, AT, 5_001));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with(&format!(
                "{AT}.max_window: max_window (95000) + delivery.batch_size (5001) = 100001"
            )),
            "{got:?}"
        );
    }

    #[test]
    fn consumer_checks() {
        // (max_ack_pending, max_deliver, ack_wait_ms) → the settings named in the problems.
        let cases: &[(i64, i64, u64, &[&str])] = &[
            (10_000, -1, 30_000, &[]),
            (-1, 2, 6_000, &[]),
            (2_000, 5, 30_000, &[]),
            (1_999, 5, 30_000, &["max_ack_pending is 1999"]),
            (1_501, 5, 30_000, &["max_ack_pending is 1501"]),
            (1_000, 5, 30_000, &["max_ack_pending is 1000"]),
            (-2, 5, 30_000, &["max_ack_pending is -2"]),
            (10_000, 1, 30_000, &["max_deliver is 1"]),
            (10_000, 0, 30_000, &["max_deliver is 0"]),
            (10_000, -1, 5_999, &["ack_wait_ms is 5999"]),
            (
                100,
                1,
                1_000,
                &[
                    "max_ack_pending is 100",
                    "max_deliver is 1",
                    "ack_wait_ms is 1000",
                ],
            ),
        ];
        for (map, md, aw, want) in cases {
            let got = check_consumer(&enabled(), 500, *map, *md, *aw, 1_000);
            assert_eq!(got.len(), want.len(), "{map} {md} {aw}: {got:?}");
            for (g, w) in got.iter().zip(want.iter()) {
                assert!(g.starts_with(&format!("consumer {w};")), "{g}");
            }
        }
    }

    #[test]
    fn consumer_problems_explain_the_need() {
        let got = check_consumer(&enabled(), 500, 1_000, 1, 2_000, 1_000);
        assert!(got[0].contains("at least max_window (1000) + 2 x batch_size (500) = 2000"));
        assert!(got[0].contains("count toward max_ack_pending"));
        assert!(got[1].contains("at least 2"));
        assert!(got[1].contains("uses up the first delivery"));
        assert!(got[2].contains("batch_timeout_ms (1000) + 5000 = 6000"));
    }

    #[test]
    fn a_disabled_randomizer_needs_nothing_of_the_consumer() {
        let cfg = RandomizerConfig::default();
        assert!(check_consumer(&cfg, 500, 1, 1, 1_000, 1_000).is_empty());
    }

    #[test]
    fn expected_window_is_rate_times_mean_delay_times_delayed_share() {
        let cfg = RandomizerConfig {
            process_immediately_probability: 0.5,
            min_delay_ms: 50,
            max_delay_ms: 450,
            max_window: 1_000,
            adaptive: true,
            ..RandomizerConfig::default()
        };
        assert!((mean_delay_secs(&cfg) - 0.25).abs() < 1e-12);
        assert!((expected_window(1_000.0, &cfg) - 125.0).abs() < 1e-9);
        assert_eq!(expected_window(-5.0, &cfg), 0.0);
        assert_eq!(expected_window(f64::NAN, &cfg), 0.0);
        let all = RandomizerConfig {
            process_immediately_probability: 1.0,
            ..cfg.clone()
        };
        assert_eq!(expected_window(1_000.0, &all), 0.0);
        // Adaptive: W = a·M / (a + M) = 125·1000 / 1125.
        assert!((settled_window(1_000.0, &cfg) - 125_000.0 / 1_125.0).abs() < 1e-9);
        let fixed = RandomizerConfig {
            adaptive: false,
            ..cfg.clone()
        };
        assert!((settled_window(1_000.0, &fixed) - 125.0).abs() < 1e-9);
        assert_eq!(settled_window(100_000.0, &fixed), 1_000.0);
        assert!(settled_window(1e12, &cfg) < 1_000.0);
    }
}
