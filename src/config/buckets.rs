//! The `source.buckets` section: random subject buckets, spread over `prefix.0` …
//! `prefix.N-1` at publish time and read through one filtered durable consumer per bucket,
//! so buckets advance at independent rates (one wildcard consumer would still deliver in
//! strict stream order). Its shape, its derived subjects and consumer names, and its
//! validation, every problem with its JSON path. The randomizer's section is
//! [`super::randomizer`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::randomizer::{at, issue, MAX_NAME_LENGTH};
use crate::shared::issue::Issue;
use crate::shared::names::check_subject;

/// Fewest `source.buckets.count`: one bucket gives no disorder at all.
pub const MIN_BUCKETS: u32 = 2;
/// Most `source.buckets.count`. Each bucket is one subject (roughly 300 bytes of per-subject
/// index state in the stream, by the specification's estimate) and, above all, one durable
/// consumer with its own server state, pull requests and AckWait timers.
pub const MAX_BUCKETS: u32 = 256;
/// `source.buckets`: messages are published on `prefix.0` … `prefix.<count-1>` (a uniformly
/// random bucket per message) and read through one filtered durable consumer per bucket, in
/// a randomized interleaving. Each bucket stays first-in first-out; the disorder is across
/// buckets only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BucketsConfig {
    /// Subject prefix of the buckets, e.g. `jobs.bucket`: a valid subject without wildcards.
    /// Required.
    pub prefix: String,
    /// Number of buckets, 2 to 256. Required. Each bucket is one subject (roughly 300 bytes
    /// of per-subject index state on the server) and one durable consumer; more buckets
    /// give more disorder but cost server memory and consumers: it is a capacity decision,
    /// not a free shuffle.
    pub count: u32,
    /// How a pull reads the buckets: `"random_order"` (the default) visits them in a fresh
    /// random order and takes the first one's batch; `"concurrent"` pulls every bucket at
    /// once, each for its share of the batch, and interleaves them at random (each bucket
    /// still FIFO), which mixes every batch but moves the buckets forward in step, so it
    /// shuffles only locally (docs/randomization.md measures both). Opt-in.
    #[serde(default)]
    pub pull: BucketPull,
    /// Read the buckets through this many consumers instead of one per bucket: bucket `i`
    /// goes to group `i % groups`, whose consumer `<consumer>-group-<g>` filters all its
    /// buckets (`filter_subjects`, nats-server 2.10+). Within a group delivery follows
    /// stream order; across groups the disorder is as with `groups` buckets. For many
    /// buckets on the publishing side read by fewer consumers on the server. 2 to
    /// `count`; unset: one consumer per bucket.
    #[serde(default)]
    pub groups: Option<u32>,
    /// With `pull: "random_order"`: how many consecutive pulls keep one random order of
    /// the buckets, so the bucket first in it is read for that many pulls in a row (while
    /// it has messages) before a new order is drawn. 1 (the default) draws a fresh order
    /// every pull; more moves the buckets further apart, more disorder across the backlog
    /// at the same cost per pull (docs/randomization.md). 1 to 1000.
    #[serde(default = "default_reshuffle_every")]
    pub reshuffle_every: u32,
}

/// Most `source.buckets.reshuffle_every`.
pub const MAX_RESHUFFLE_EVERY: u32 = 1000;

fn default_reshuffle_every() -> u32 {
    1
}

/// `source.buckets.pull`: how one pull reads the buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BucketPull {
    /// One bucket per pull, chosen by a fresh random order each pull.
    #[default]
    RandomOrder,
    /// Every bucket at once, each for its share, interleaved at random.
    Concurrent,
}

impl BucketsConfig {
    /// The consumers that read the buckets: each one's name (derived from `consumer`) and
    /// the bucket subjects it filters — one per bucket, or one per group with `groups`.
    pub fn readers(&self, consumer: &str) -> Vec<(String, Vec<String>)> {
        match self.groups {
            None => (0..self.count)
                .map(|i| {
                    let subject = bucket_subject(&self.prefix, i);
                    (bucket_consumer_name(consumer, i), vec![subject])
                })
                .collect(),
            Some(g) => (0..g.max(1))
                .map(|j| {
                    let subjects = (j..self.count)
                        .step_by(g.max(1) as usize)
                        .map(|i| bucket_subject(&self.prefix, i))
                        .collect();
                    (group_consumer_name(consumer, j), subjects)
                })
                .collect(),
        }
    }
}

/// The durable name of the consumer that reads bucket group `g`: `<consumer>-group-<g>`.
pub fn group_consumer_name(consumer: &str, g: u32) -> String {
    format!("{consumer}-group-{g}")
}

/// The bucket subjects `prefix.0` … `prefix.<count-1>`, in bucket order.
pub fn bucket_subjects(prefix: &str, count: u32) -> Vec<String> {
    (0..count).map(|i| bucket_subject(prefix, i)).collect()
}

/// The subject of bucket `i`: `prefix.i`.
pub fn bucket_subject(prefix: &str, i: u32) -> String {
    format!("{prefix}.{i}")
}

/// The filter that captures every bucket, `prefix.*`, for a stream's subjects. Never use it
/// as a single consumer's filter: that consumer delivers in strict stream order.
pub fn bucket_wildcard(prefix: &str) -> String {
    format!("{prefix}.*")
}

/// The durable name of the consumer that reads bucket `i`: `<consumer>-bucket-<i>`. It is a
/// valid consumer name whenever `consumer` is one and the result fits
/// [`MAX_NAME_LENGTH`] (see [`validate_bucket_consumer`]).
pub fn bucket_consumer_name(consumer: &str, i: u32) -> String {
    format!("{consumer}-bucket-{i}")
}

/// Checks `source.buckets` found at `path` (empty for the section itself) and returns every
/// problem.
pub fn validate_buckets(cfg: &BucketsConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let prefix_path = at(path, "prefix");
    match check_subject(&cfg.prefix) {
        Err(why) => out.push(issue(prefix_path, format!("{why}: {:?}", cfg.prefix))),
        Ok(()) if cfg.prefix.split('.').any(|t| t == "*" || t == ">") => out.push(issue(
            prefix_path,
            format!(
                "must be a subject without wildcards (`*`, `>`); the buckets are `<prefix>.0` to \
                 `<prefix>.<count-1>`, got {:?}",
                cfg.prefix
            ),
        )),
        Ok(()) => {}
    }
    if !(MIN_BUCKETS..=MAX_BUCKETS).contains(&cfg.count) {
        out.push(issue(
            at(path, "count"),
            format!(
                "must be between {MIN_BUCKETS} and {MAX_BUCKETS}, got {}: each bucket costs one \
                 subject (about 300 bytes of server state) and one durable consumer",
                cfg.count
            ),
        ));
    }
    if !(1..=MAX_RESHUFFLE_EVERY).contains(&cfg.reshuffle_every) {
        out.push(issue(
            at(path, "reshuffle_every"),
            format!(
                "must be between 1 and {MAX_RESHUFFLE_EVERY} pulls, got {}",
                cfg.reshuffle_every
            ),
        ));
    } else if cfg.reshuffle_every > 1 && cfg.pull == BucketPull::Concurrent {
        out.push(issue(
            at(path, "reshuffle_every"),
            "applies to `pull: \"random_order\"`: a concurrent pull asks every bucket at once",
        ));
    }
    if let Some(g) = cfg.groups {
        if g < 2 || g > cfg.count {
            out.push(issue(
                at(path, "groups"),
                format!(
                    "must be between 2 and count ({}), got {g}: one group would read every \
                     bucket in stream order; leave it unset for one consumer per bucket",
                    cfg.count
                ),
            ));
        }
    }
    out
}

/// Checks that every consumer name derived from `consumer` for `count` buckets fits
/// [`MAX_NAME_LENGTH`]; `path` is the path of the source's `consumer`. The characters are
/// already checked with the consumer name itself: the suffix adds only `-`, letters and
/// digits.
pub fn validate_bucket_consumer(consumer: &str, count: u32, path: &str) -> Vec<Issue> {
    validate_derived_name(
        bucket_consumer_name(consumer, count.saturating_sub(1)),
        "bucket",
        path,
    )
}

/// [`validate_bucket_consumer`] for `groups` consumers, named `<consumer>-group-<g>`.
pub fn validate_group_consumer(consumer: &str, groups: u32, path: &str) -> Vec<Issue> {
    validate_derived_name(
        group_consumer_name(consumer, groups.saturating_sub(1)),
        "group",
        path,
    )
}

fn validate_derived_name(longest: String, kind: &str, path: &str) -> Vec<Issue> {
    if longest.len() > MAX_NAME_LENGTH {
        vec![issue(
            path.to_string(),
            format!(
                "with source.buckets the consumer names become `<consumer>-{kind}-<i>`, and \
                 {:?} would be {} bytes, more than {MAX_NAME_LENGTH}; use a shorter consumer name",
                longest,
                longest.len()
            ),
        )]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(issues: &[Issue]) -> Vec<String> {
        issues.iter().map(Issue::to_string).collect()
    }

    #[test]
    fn bucket_subjects_and_consumer_names() {
        assert_eq!(
            bucket_subjects("jobs.bucket", 3),
            ["jobs.bucket.0", "jobs.bucket.1", "jobs.bucket.2"]
        );
        assert!(bucket_subjects("jobs", 0).is_empty());
        assert_eq!(bucket_wildcard("jobs.bucket"), "jobs.bucket.*");
        assert_eq!(bucket_consumer_name("orders", 7), "orders-bucket-7");
        for s in bucket_subjects("a.b", MAX_BUCKETS) {
            assert_eq!(check_subject(&s), Ok(()));
        }
    }

    #[test]
    fn derived_consumer_names_are_valid_and_distinct() {
        let names: Vec<String> = (0..MAX_BUCKETS)
            .map(|i| bucket_consumer_name("orders_v2", i))
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        for n in &names {
            let bad = n.chars().any(|c| {
                c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
            });
            assert!(!bad && n.len() <= MAX_NAME_LENGTH, "{n}");
        }
    }

    #[test]
    fn derived_consumer_names_must_fit() {
        let ok = "c".repeat(MAX_NAME_LENGTH - "-bucket-255".len());
        assert!(validate_bucket_consumer(&ok, 256, "sinks.x.source.consumer").is_empty());
        assert_eq!(validate_bucket_consumer(&ok, 10_000, "p").len(), 1);
        let long = format!("{ok}c");
        let got = messages(&validate_bucket_consumer(
            &long,
            256,
            "sinks.x.source.consumer",
        ));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("sinks.x.source.consumer: with source.buckets"));
        assert!(validate_bucket_consumer(&long, 100, "p").is_empty());
    }

    #[test]
    fn bucket_validation() {
        const P: &str = "sinks.x.source.buckets";
        let cases: &[(&str, u32, &[&str])] = &[
            ("jobs.bucket", 16, &[]),
            ("jobs", 2, &[]),
            ("jobs", 256, &[]),
            (
                "jobs",
                1,
                &["sinks.x.source.buckets.count: must be between 2 and 256, got 1"],
            ),
            (
                "jobs",
                257,
                &["sinks.x.source.buckets.count: must be between 2 and 256, got 257"],
            ),
            (
                "",
                16,
                &["sinks.x.source.buckets.prefix: subject must not be empty: \"\""],
            ),
            (
                "jobs.",
                16,
                &["sinks.x.source.buckets.prefix: subject has an empty token"],
            ),
            (
                "jobs.*",
                16,
                &["sinks.x.source.buckets.prefix: must be a subject without wildcards"],
            ),
            (
                "jobs.>",
                16,
                &["sinks.x.source.buckets.prefix: must be a subject without wildcards"],
            ),
            (
                "jo bs",
                16,
                &["sinks.x.source.buckets.prefix: subject must not contain whitespace"],
            ),
            (
                "a.*",
                0,
                &[
                    "sinks.x.source.buckets.prefix: must be a subject without wildcards",
                    "sinks.x.source.buckets.count: must be between 2 and 256, got 0",
                ],
            ),
        ];
        for (prefix, count, want) in cases {
            let cfg = BucketsConfig {
                prefix: (*prefix).to_string(),
                count: *count,
                pull: BucketPull::RandomOrder,
                groups: None,
                reshuffle_every: 1,
            };
            let got = messages(&validate_buckets(&cfg, P));
            assert_eq!(got.len(), want.len(), "{prefix:?} {count}: {got:?}");
            for (g, w) in got.iter().zip(want.iter()) {
                assert!(g.starts_with(w), "{g:?} should start with {w:?}");
            }
        }
    }

    #[test]
    fn buckets_parse_strictly() {
        let b: BucketsConfig =
            serde_json::from_str(r#"{"prefix": "jobs.bucket", "count": 16}"#).unwrap();
        assert_eq!(
            b,
            BucketsConfig {
                prefix: "jobs.bucket".into(),
                count: 16,
                pull: BucketPull::RandomOrder,
                groups: None,
                reshuffle_every: 1,
            }
        );
        let c: BucketsConfig =
            serde_json::from_str(r#"{"prefix": "jobs.bucket", "count": 4, "pull": "concurrent"}"#)
                .unwrap();
        assert_eq!(c.pull, BucketPull::Concurrent);
        assert!(serde_json::from_str::<BucketsConfig>(
            r#"{"prefix": "jobs", "count": 4, "pull": "parallel"}"#
        )
        .is_err());
        assert!(serde_json::from_str::<BucketsConfig>(r#"{"prefix": "jobs"}"#).is_err());
        assert!(serde_json::from_str::<BucketsConfig>(
            r#"{"prefix": "jobs", "count": 4, "buckets": 4}"#
        )
        .is_err());
    }

    #[test]
    fn groups_deal_the_buckets_round_robin_to_one_consumer_each() {
        let b: BucketsConfig =
            serde_json::from_str(r#"{"prefix": "b", "count": 5, "groups": 2}"#).unwrap();
        assert_eq!(
            b.readers("c"),
            vec![
                (
                    "c-group-0".to_string(),
                    vec!["b.0".to_string(), "b.2".into(), "b.4".into()]
                ),
                (
                    "c-group-1".to_string(),
                    vec!["b.1".to_string(), "b.3".into()]
                ),
            ]
        );
        let per_bucket = BucketsConfig {
            groups: None,
            ..b.clone()
        };
        assert_eq!(per_bucket.readers("c").len(), 5);
        assert_eq!(
            per_bucket.readers("c")[3],
            ("c-bucket-3".to_string(), vec!["b.3".to_string()])
        );
    }

    #[test]
    fn groups_outside_2_to_count_are_refused_by_name() {
        for g in [0, 1, 6] {
            let b = BucketsConfig {
                prefix: "b".into(),
                count: 5,
                pull: BucketPull::RandomOrder,
                groups: Some(g),
                reshuffle_every: 1,
            };
            let got = messages(&validate_buckets(&b, "s.buckets"));
            assert_eq!(got.len(), 1, "{g}: {got:?}");
            assert!(
                got[0].starts_with("s.buckets.groups: must be between 2 and count (5)"),
                "{got:?}"
            );
        }
        let long = "c".repeat(MAX_NAME_LENGTH - "-group-9".len());
        assert!(validate_group_consumer(&long, 10, "p").is_empty());
        assert_eq!(validate_group_consumer(&long, 11, "p").len(), 1);
    }

    #[test]
    fn reshuffle_every_is_bounded_and_only_for_random_order_pulls() {
        let check = |json: &str| {
            let b: BucketsConfig = serde_json::from_str(json).unwrap();
            messages(&validate_buckets(&b, "s.buckets"))
        };
        assert!(check(r#"{"prefix": "b", "count": 4, "reshuffle_every": 8}"#).is_empty());
        for bad in [0, 1001] {
            let got = check(&format!(
                r#"{{"prefix": "b", "count": 4, "reshuffle_every": {bad}}}"#
            ));
            assert!(
                got[0].starts_with("s.buckets.reshuffle_every: must be between 1 and 1000"),
                "{got:?}"
            );
        }
        let got =
            check(r#"{"prefix": "b", "count": 4, "pull": "concurrent", "reshuffle_every": 2}"#);
        assert!(
            got[0].contains("applies to `pull: \"random_order\"`"),
            "{got:?}"
        );
    }

    proptest::proptest! {
        /// Every bucket is read by exactly one consumer, whatever the count and groups.
        #[test]
        fn every_bucket_has_exactly_one_reader(count in 2u32..=256, g in 2u32..=256) {
            proptest::prop_assume!(g <= count);
            let b = BucketsConfig {
                prefix: "p".into(),
                count,
                pull: BucketPull::RandomOrder,
                groups: Some(g),
                reshuffle_every: 1,
            };
            let readers = b.readers("c");
            proptest::prop_assert_eq!(readers.len() as u32, g);
            let mut all: Vec<String> = readers.into_iter().flat_map(|(_, s)| s).collect();
            all.sort();
            let mut want = bucket_subjects("p", count);
            want.sort();
            proptest::prop_assert_eq!(all, want);
        }
    }
}
