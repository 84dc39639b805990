//! Priority lanes: orders the batch in hand so urgent messages reach the destination first,
//! without starving the others and without touching commit-then-ACK.
//!
//! Two pure steps. [`LanePolicy::assign`] maps a message's normalized priority to a lane
//! (case-insensitively), sending a missing priority, and by default an unknown one, to the
//! default lane; a priority with control characters, longer than
//! `max_priority_value_length`, or unknown under `unknown_priority_action: reject` is a
//! [`LaneError`], a permanent failure of that message. [`schedule`] then orders the batch
//! by weighted round-robin: passes over the lanes in configured order, each pass taking up
//! to `weight` messages from each lane, first-in first-out inside a lane, until every lane
//! is empty. Only the order of one fetched batch changes: it is still written as one batch
//! and ACKed after commit. With lanes disabled the runner does not call this module and
//! the fetched order stands.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::config::lanes::{PriorityLanesConfig, UnknownPriorityAction};

/// Why a message's priority was refused by the lane policy. Each is a permanent failure of
/// the message. Messages give lengths only: priority values are untrusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    /// The priority contains a control character.
    #[error("priority of {length} characters contains a control character")]
    ControlCharacter {
        /// Its length in characters.
        length: usize,
    },
    /// The priority is longer than `max_priority_value_length`.
    #[error("priority of {length} characters is longer than max_priority_value_length {limit}")]
    TooLong {
        /// Its length in characters.
        length: usize,
        /// The configured `max_priority_value_length`.
        limit: usize,
    },
    /// The priority maps to no lane and `unknown_priority_action` is `reject`.
    #[error(
        "priority of {length} characters maps to no lane and unknown_priority_action is reject"
    )]
    UnknownPriority {
        /// Its length in characters.
        length: usize,
    },
}

/// The lane a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneAssignment {
    /// Index of the lane in the configured order.
    pub lane: usize,
    /// True when the priority was missing or unknown and the default lane took it.
    pub defaulted: bool,
}

/// What scheduling one batch did, for the metrics. Counts are per batch; the runner adds
/// them to its counters and sets the active-lanes gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Batches ordered: 1 per [`LanePolicy::order`] call.
    pub batches: u64,
    /// Messages evaluated (ordered plus rejected).
    pub messages: u64,
    /// Messages sent to the default lane because their priority was missing or unknown.
    pub defaulted: u64,
    /// Messages refused because their priority violated the policy.
    pub rejected: u64,
    /// Number of configured lanes with at least one message in the ordered batch.
    pub active_lanes: usize,
}

/// One batch after lane scheduling.
#[derive(Debug)]
pub struct LaneOutcome<T> {
    /// Accepted items in the order to write them.
    pub ordered: Vec<T>,
    /// The lane index of each item of `ordered`, position by position.
    pub lanes: Vec<usize>,
    /// Refused items in fetched order, each with the reason; the runner fails them
    /// permanently (dead-letter path, or left unacked and counted).
    pub rejected: Vec<(T, LaneError)>,
    /// Counts for the metrics.
    pub stats: LaneStats,
}

/// A validated `delivery.priority_lanes`, ready to assign and order.
#[derive(Debug, Clone)]
pub struct LanePolicy {
    enabled: bool,
    names: Vec<String>,
    weights: Vec<u32>,
    /// Lowercased priority → lane index.
    by_priority: HashMap<String, usize>,
    default_lane: usize,
    reject_unknown: bool,
    max_priority_length: usize,
}

impl LanePolicy {
    /// Builds the policy from a section that validation
    /// ([`crate::config::lanes::validate_lanes`]) has already accepted, as every section
    /// of a loaded [`crate::config::Config`] has: it is not checked again. Validation
    /// guarantees `default_lane` names a lane; were it not so, the first lane would stand in.
    pub fn new(cfg: &PriorityLanesConfig) -> LanePolicy {
        let default_lane = cfg
            .lanes
            .iter()
            .position(|l| l.name == cfg.default_lane)
            .unwrap_or(0);
        let by_priority = cfg
            .lanes
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.priorities.iter().map(move |p| (p.to_lowercase(), i)))
            .collect();
        LanePolicy {
            enabled: cfg.enabled,
            names: cfg.lanes.iter().map(|l| l.name.clone()).collect(),
            weights: cfg.lanes.iter().map(|l| l.weight).collect(),
            by_priority,
            default_lane,
            reject_unknown: cfg.unknown_priority_action == UnknownPriorityAction::Reject,
            max_priority_length: cfg.max_priority_value_length,
        }
    }

    /// Whether the batch should be ordered at all; when false the runner keeps the fetched
    /// order and leaves `lane` unset.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Lane names in configured (scheduling) order.
    pub fn lane_names(&self) -> &[String] {
        &self.names
    }

    /// The name of lane `lane`, or `None` for an index out of range.
    pub fn lane_name(&self, lane: usize) -> Option<&str> {
        self.names.get(lane).map(String::as_str)
    }

    /// Lane weights in configured order.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// The lane for a message's normalized priority. A missing or blank priority takes the
    /// default lane (defaulted); a known one, matched case-insensitively after trimming, its
    /// lane; an unknown one the default lane (defaulted) or, with `reject`,
    /// [`LaneError::UnknownPriority`]. Control characters and values longer than
    /// `max_priority_value_length` characters are refused first.
    pub fn assign(&self, priority: Option<&str>) -> Result<LaneAssignment, LaneError> {
        let Some(raw) = priority else {
            return Ok(self.defaulted());
        };
        if raw.chars().any(char::is_control) {
            return Err(LaneError::ControlCharacter {
                length: raw.chars().count(),
            });
        }
        let value = raw.trim();
        if value.is_empty() {
            return Ok(self.defaulted());
        }
        let length = value.chars().count();
        if length > self.max_priority_length {
            return Err(LaneError::TooLong {
                length,
                limit: self.max_priority_length,
            });
        }
        // Priorities are short ASCII words, mostly written in lower case already: those are
        // looked up as they are, without the allocation of a lowercased copy per message.
        let found = if value
            .bytes()
            .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
        {
            self.by_priority.get(value)
        } else {
            self.by_priority.get(&value.to_lowercase())
        };
        match found {
            Some(&lane) => Ok(LaneAssignment {
                lane,
                defaulted: false,
            }),
            None if self.reject_unknown => Err(LaneError::UnknownPriority { length }),
            None => Ok(self.defaulted()),
        }
    }

    fn defaulted(&self) -> LaneAssignment {
        LaneAssignment {
            lane: self.default_lane,
            defaulted: true,
        }
    }

    /// Assigns every item of a fetched batch to a lane and orders the accepted ones by
    /// [`schedule`]. `priority_of` reads an item's normalized priority. A batch with
    /// nothing refused whose order [`schedule`] keeps (one lane, as a per-lane consumer
    /// delivers) is handed back as it came, without moving an item.
    pub fn order<T>(
        &self,
        batch: Vec<T>,
        priority_of: impl Fn(&T) -> Option<&str>,
    ) -> LaneOutcome<T> {
        let mut stats = LaneStats {
            batches: 1,
            messages: batch.len() as u64,
            ..LaneStats::default()
        };
        let assigned: Vec<Result<LaneAssignment, LaneError>> = batch
            .iter()
            .map(|item| self.assign(priority_of(item)))
            .collect();
        let mut lanes_of = Vec::with_capacity(batch.len());
        let mut rejected = Vec::new();
        let accepted = if assigned.iter().all(Result::is_ok) {
            for a in assigned.iter().flatten() {
                stats.defaulted += u64::from(a.defaulted);
                lanes_of.push(a.lane);
            }
            batch
        } else {
            let mut accepted = Vec::with_capacity(batch.len());
            for (item, assigned) in batch.into_iter().zip(assigned) {
                match assigned {
                    Ok(a) => {
                        stats.defaulted += u64::from(a.defaulted);
                        lanes_of.push(a.lane);
                        accepted.push(item);
                    }
                    Err(e) => {
                        stats.rejected += 1;
                        rejected.push((item, e));
                    }
                }
            }
            accepted
        };
        let order = schedule(&lanes_of, &self.weights);
        let kept = order.iter().enumerate().all(|(k, &i)| k == i);
        let mut seen = vec![false; self.names.len()];
        for &lane in &lanes_of {
            if let Some(s) = seen.get_mut(lane) {
                *s = true;
            }
        }
        stats.active_lanes = seen.iter().filter(|s| **s).count();
        let (ordered, lanes) = if kept {
            (accepted, lanes_of)
        } else {
            let lanes = order
                .iter()
                .filter_map(|&i| lanes_of.get(i).copied())
                .collect();
            (reorder(accepted, &order), lanes)
        };
        LaneOutcome {
            ordered,
            lanes,
            rejected,
            stats,
        }
    }
}

/// The weighted round-robin order of a batch: `lanes_of[i]` is the lane of item `i`, and
/// `weights[l]` the weight of lane `l`. Returns the item indices in write order: passes over
/// the lanes in index order, each taking up to `weight` items from each lane, first-in
/// first-out inside a lane, until all are taken. A lane without a weight, or with weight 0,
/// counts as weight 1, so every item is always placed exactly once.
pub fn schedule(lanes_of: &[usize], weights: &[u32]) -> Vec<usize> {
    if lanes_of.windows(2).all(|w| w[0] == w[1]) {
        // One lane (or none): every pass takes from it alone, in fetched order.
        return (0..lanes_of.len()).collect();
    }
    let mut buckets: BTreeMap<usize, VecDeque<usize>> = BTreeMap::new();
    for (i, &lane) in lanes_of.iter().enumerate() {
        buckets.entry(lane).or_default().push_back(i);
    }
    let mut out = Vec::with_capacity(lanes_of.len());
    while !buckets.is_empty() {
        for (lane, bucket) in buckets.iter_mut() {
            let weight = weights.get(*lane).copied().unwrap_or(1).max(1);
            let take = usize::try_from(weight)
                .unwrap_or(usize::MAX)
                .min(bucket.len());
            out.extend(bucket.drain(..take));
        }
        buckets.retain(|_, bucket| !bucket.is_empty());
    }
    out
}

/// Reorders `items` so that item `order[k]` comes `k`-th. Never loses an item: indices out
/// of range or repeated are skipped, and items `order` does not name follow in their
/// original order.
pub fn reorder<T>(items: Vec<T>, order: &[usize]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for &i in order {
        if let Some(item) = slots.get_mut(i).and_then(Option::take) {
            out.push(item);
        }
    }
    out.extend(slots.into_iter().flatten());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lanes::LaneConfig;
    use proptest::prelude::*;

    fn seed_policy() -> LanePolicy {
        LanePolicy::new(&serde_json::from_str(
            r#"{"enabled": true, "default_lane": "routine", "unknown_priority_action": "default_lane",
                "max_priority_value_length": 64, "lanes": [
                {"name": "urgent", "priorities": ["urgent", "immediate"], "weight": 3},
                {"name": "routine", "priorities": ["normal", "routine"], "weight": 1}]}"#,
        )
        .unwrap())
    }

    fn two_lanes(action: UnknownPriorityAction) -> LanePolicy {
        urgent_and_routine(action, &["Urgent"])
    }

    /// Lanes `urgent` (weight 2, taking the `urgent` priorities) and `routine` (the default),
    /// priorities of at most 8 characters.
    fn urgent_and_routine(action: UnknownPriorityAction, urgent: &[&str]) -> LanePolicy {
        LanePolicy::new(&PriorityLanesConfig {
            enabled: true,
            default_lane: "routine".into(),
            unknown_priority_action: action,
            max_priority_value_length: 8,
            lanes: vec![
                LaneConfig {
                    name: "urgent".into(),
                    priorities: urgent.iter().map(|p| p.to_string()).collect(),
                    weight: 2,
                    subjects: Vec::new(),
                },
                LaneConfig {
                    name: "routine".into(),
                    priorities: vec!["routine".into()],
                    weight: 1,
                    subjects: Vec::new(),
                },
            ],
            ..PriorityLanesConfig::default()
        })
    }

    /// Checks the pass structure of `order` independently of [`schedule`]: at each pass,
    /// every lane that still has items must contribute exactly `min(weight, remaining)`
    /// consecutive items, in lane order.
    fn check_passes(lanes_of: &[usize], weights: &[u32], order: &[usize]) -> Result<(), String> {
        let lane_count = weights.len();
        let mut remaining = vec![0usize; lane_count];
        for &l in lanes_of {
            remaining[l] += 1;
        }
        let mut pos = 0;
        let mut pass = 0;
        while remaining.iter().any(|&r| r > 0) {
            for lane in 0..lane_count {
                let expect = (weights[lane] as usize).min(remaining[lane]);
                for k in 0..expect {
                    let got = order
                        .get(pos)
                        .and_then(|&i| lanes_of.get(i))
                        .ok_or_else(|| format!("output ends early at {pos}"))?;
                    if *got != lane {
                        return Err(format!(
                            "pass {pass}: lane {lane} should give {expect} items, item {k} at {pos} is from lane {got}"
                        ));
                    }
                    pos += 1;
                }
                remaining[lane] -= expect;
            }
            pass += 1;
        }
        Ok(())
    }

    #[test]
    fn seed_worked_example_yields_1_2_4_3_5() {
        let lanes_of = [0, 0, 0, 1, 1];
        let order = schedule(&lanes_of, &[2, 1]);
        let stream_seq: Vec<u64> = order.iter().map(|&i| i as u64 + 1).collect();
        assert_eq!(stream_seq, vec![1, 2, 4, 3, 5]);
        assert_eq!(check_passes(&lanes_of, &[2, 1], &order), Ok(()));
    }

    #[test]
    fn seed_worked_example_through_the_policy() {
        let policy = two_lanes(UnknownPriorityAction::DefaultLane);
        let batch = vec![
            (1, "urgent"),
            (2, "URGENT"),
            (3, "urgent"),
            (4, "routine"),
            (5, "routine"),
        ];
        let out = policy.order(batch, |(_, p)| Some(*p));
        let seqs: Vec<i32> = out.ordered.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![1, 2, 4, 3, 5]);
        let lanes: Vec<&str> = out
            .lanes
            .iter()
            .filter_map(|l| policy.lane_name(*l))
            .collect();
        assert_eq!(lanes, ["urgent", "urgent", "routine", "urgent", "routine"]);
        assert_eq!(
            out.stats,
            LaneStats {
                batches: 1,
                messages: 5,
                defaulted: 0,
                rejected: 0,
                active_lanes: 2
            }
        );
    }

    #[test]
    fn check_passes_catches_wrong_orders() {
        let lanes_of = [0, 0, 0, 1, 1];
        // Fetched order, strict priority and one-by-one alternation are all wrong.
        assert!(check_passes(&lanes_of, &[2, 1], &[0, 1, 2, 3, 4]).is_err());
        assert!(check_passes(&lanes_of, &[1, 1], &[0, 1, 2, 3, 4]).is_err());
        assert!(check_passes(&lanes_of, &[2, 1], &[0, 3, 1, 4, 2]).is_err());
        assert!(check_passes(&lanes_of, &[2, 1], &[0, 1, 3]).is_err());
    }

    #[test]
    fn seed_policy_weight_three() {
        let lanes_of = [1, 0, 0, 0, 0, 1, 1];
        assert_eq!(
            schedule(&lanes_of, seed_policy().weights()),
            [1, 2, 3, 0, 4, 5, 6]
        );
    }

    #[test]
    fn empty_and_single_lane_batches_keep_their_order() {
        assert!(schedule(&[], &[3, 1]).is_empty());
        assert_eq!(schedule(&[1, 1, 1], &[3, 1]), [0, 1, 2]);
    }

    #[test]
    fn missing_or_zero_weights_count_as_one() {
        assert_eq!(schedule(&[0, 0, 5, 5], &[0]), [0, 2, 1, 3]);
        assert_eq!(schedule(&[usize::MAX, 0], &[]), [1, 0]);
    }

    #[test]
    fn assignment_rules() {
        let p = two_lanes(UnknownPriorityAction::DefaultLane);
        let ok = |lane, defaulted| Ok(LaneAssignment { lane, defaulted });
        assert_eq!(p.assign(Some("urgent")), ok(0, false));
        assert_eq!(p.assign(Some("uRGENT")), ok(0, false));
        assert_eq!(p.assign(Some(" urgent ")), ok(0, false));
        assert_eq!(p.assign(Some("ROUTINE")), ok(1, false));
        assert_eq!(p.assign(None), ok(1, true));
        assert_eq!(p.assign(Some("  ")), ok(1, true));
        assert_eq!(p.assign(Some("bulk")), ok(1, true));
        assert_eq!(
            p.assign(Some("urgent\n")),
            Err(LaneError::ControlCharacter { length: 7 })
        );
        assert_eq!(
            p.assign(Some("123456789")),
            Err(LaneError::TooLong {
                length: 9,
                limit: 8
            })
        );
        assert!(p.assign(Some("12345678")).is_ok());
        let strict = two_lanes(UnknownPriorityAction::Reject);
        assert_eq!(
            strict.assign(Some("bulk")),
            Err(LaneError::UnknownPriority { length: 4 })
        );
        assert_eq!(strict.assign(None), ok(1, true));
        assert_eq!(strict.assign(Some("Urgent")), ok(0, false));
    }

    #[test]
    fn order_separates_rejected_items_and_counts() {
        let p = two_lanes(UnknownPriorityAction::Reject);
        let batch = vec![
            (1, None),
            (2, Some("bulk")),
            (3, Some("urgent")),
            (4, Some("bad\u{7}")),
            (5, Some("routine")),
        ];
        let out = p.order(batch, |(_, pr)| *pr);
        let ordered: Vec<(i32, usize)> = out
            .ordered
            .iter()
            .zip(&out.lanes)
            .map(|((s, _), l)| (*s, *l))
            .collect();
        assert_eq!(ordered, vec![(3, 0), (1, 1), (5, 1)]);
        let rejected: Vec<(i32, LaneError)> =
            out.rejected.iter().map(|((s, _), e)| (*s, *e)).collect();
        assert_eq!(
            rejected,
            vec![
                (2, LaneError::UnknownPriority { length: 4 }),
                (4, LaneError::ControlCharacter { length: 4 })
            ]
        );
        assert_eq!(
            out.stats,
            LaneStats {
                batches: 1,
                messages: 5,
                defaulted: 1,
                rejected: 2,
                active_lanes: 2
            }
        );
    }

    #[test]
    fn error_messages_never_contain_the_priority() {
        let p = two_lanes(UnknownPriorityAction::Reject);
        for v in ["SECRETVALUE", "SECRET\u{7}", "SECRETX"] {
            let e = p.assign(Some(v)).unwrap_err();
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn default_policy_is_disabled_with_one_lane() {
        let p = LanePolicy::new(&PriorityLanesConfig::default());
        assert!(!p.enabled());
        assert_eq!(p.lane_names(), ["default"]);
        assert_eq!(p.weights(), [1]);
        assert_eq!(
            p.assign(Some("anything")),
            Ok(LaneAssignment {
                lane: 0,
                defaulted: true
            })
        );
        assert_eq!(p.lane_name(1), None);
    }

    #[test]
    fn an_invalid_config_is_refused_before_any_policy_is_built() {
        let mut cfg = PriorityLanesConfig::default();
        cfg.lanes[0].weight = 0;
        cfg.default_lane = "nope".into();
        let issues = crate::config::lanes::validate_lanes(&cfg, "");
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["lanes[0].weight", "default_lane"]);
    }

    #[test]
    fn reorder_never_loses_an_item() {
        assert_eq!(reorder(vec!['a', 'b', 'c'], &[2, 0, 1]), ['c', 'a', 'b']);
        assert_eq!(reorder(vec!['a', 'b', 'c'], &[2, 2, 9]), ['c', 'a', 'b']);
        assert_eq!(reorder(vec!['a', 'b'], &[]), ['a', 'b']);
    }

    #[test]
    fn a_batch_of_one_lane_comes_back_in_its_fetched_order() {
        let p = two_lanes(UnknownPriorityAction::DefaultLane);
        let batch = vec![(1, "routine"), (2, "bulk"), (3, "ROUTINE")];
        let out = p.order(batch.clone(), |(_, pr)| Some(*pr));
        assert_eq!(out.ordered, batch);
        assert_eq!(out.lanes, [1, 1, 1]);
        assert!(out.rejected.is_empty());
        assert_eq!(
            out.stats,
            LaneStats {
                batches: 1,
                messages: 3,
                defaulted: 1,
                rejected: 0,
                active_lanes: 1
            }
        );
    }

    #[test]
    fn priorities_outside_ascii_match_case_insensitively() {
        // KELVIN SIGN lowercases to an ASCII k.
        let p = urgent_and_routine(UnknownPriorityAction::DefaultLane, &["Ürgent", "\u{212A}"]);
        let urgent = Ok(LaneAssignment {
            lane: 0,
            defaulted: false,
        });
        for v in ["ürgent", "ÜRGENT", "k", "K", "\u{212A}"] {
            assert_eq!(p.assign(Some(v)), urgent, "{v}");
        }
        assert_eq!(p.assign(Some("urgent")).map(|a| a.defaulted), Ok(true));
    }

    fn batch() -> impl Strategy<Value = (Vec<u32>, Vec<usize>)> {
        proptest::collection::vec(1u32..=6, 1..6).prop_flat_map(|weights| {
            let lanes = weights.len();
            (Just(weights), proptest::collection::vec(0..lanes, 0..120))
        })
    }

    fn priorities() -> impl Strategy<Value = Vec<Option<&'static str>>> {
        let one = proptest::sample::select(vec![
            None,
            Some("urgent"),
            Some("URGENT"),
            Some(" Routine "),
            Some("routine"),
            Some("bulk"),
            Some("bad\u{7}"),
            Some("123456789"),
        ]);
        proptest::collection::vec(one, 0..60)
    }

    proptest! {
        #[test]
        fn order_matches_assigning_then_scheduling_each_item(
            prs in priorities(),
            reject in any::<bool>(),
        ) {
            let p = two_lanes(if reject {
                UnknownPriorityAction::Reject
            } else {
                UnknownPriorityAction::DefaultLane
            });
            let batch: Vec<(usize, Option<&str>)> = prs.iter().copied().enumerate().collect();
            // Reference: each item assigned on its own, the accepted ones scheduled.
            let accepted: Vec<(usize, usize)> = batch
                .iter()
                .filter_map(|&(i, pr)| p.assign(pr).ok().map(|a| (i, a.lane)))
                .collect();
            let lanes_of: Vec<usize> = accepted.iter().map(|&(_, l)| l).collect();
            let want: Vec<(usize, usize)> = schedule(&lanes_of, p.weights())
                .into_iter()
                .map(|k| accepted[k])
                .collect();
            let out = p.order(batch.clone(), |(_, pr)| *pr);
            let got: Vec<(usize, usize)> =
                out.ordered.iter().map(|&(i, _)| i).zip(out.lanes.iter().copied()).collect();
            prop_assert_eq!(got, want);
            let rejected: Vec<usize> = out.rejected.iter().map(|((i, _), _)| *i).collect();
            let want_rejected: Vec<usize> = batch
                .iter()
                .filter(|&&(_, pr)| p.assign(pr).is_err())
                .map(|&(i, _)| i)
                .collect();
            prop_assert_eq!(rejected, want_rejected);
            let mut seen = lanes_of.clone();
            seen.sort_unstable();
            seen.dedup();
            prop_assert_eq!(out.stats.active_lanes, seen.len());
        }

        #[test]
        fn output_is_a_permutation((weights, lanes_of) in batch()) {
            let order = schedule(&lanes_of, &weights);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..lanes_of.len()).collect::<Vec<_>>());
        }

        #[test]
        fn order_inside_a_lane_is_kept((weights, lanes_of) in batch()) {
            let order = schedule(&lanes_of, &weights);
            for lane in 0..weights.len() {
                let within: Vec<usize> = order.iter().copied().filter(|&i| lanes_of[i] == lane).collect();
                prop_assert!(within.windows(2).all(|w| w[0] < w[1]), "lane {} out of order: {:?}", lane, within);
            }
        }

        #[test]
        fn every_pass_gives_every_nonempty_lane_min_weight_remaining((weights, lanes_of) in batch()) {
            let order = schedule(&lanes_of, &weights);
            prop_assert_eq!(check_passes(&lanes_of, &weights, &order), Ok(()));
        }

        #[test]
        fn no_lane_waits_longer_than_one_pass_of_the_others((weights, lanes_of) in batch()) {
            // Independent of pass bookkeeping: before a non-empty lane's first item, at most
            // the sum of the earlier lanes' weights can be written.
            let order = schedule(&lanes_of, &weights);
            for lane in 0..weights.len() {
                if let Some(first) = order.iter().position(|&i| lanes_of[i] == lane) {
                    let budget: u32 = weights[..lane].iter().sum();
                    prop_assert!(first as u32 <= budget, "lane {} first at {}", lane, first);
                }
            }
        }

        #[test]
        fn reorder_applies_the_permutation((weights, lanes_of) in batch()) {
            let order = schedule(&lanes_of, &weights);
            let items: Vec<usize> = (0..lanes_of.len()).collect();
            prop_assert_eq!(reorder(items, &order), order);
        }
    }
}

/// Per-lane consumer mode: the order in which to try the consumers for one pull.
/// `lane_of[c]` is the lane of consumer `c`; lanes take turns by weight across pulls (a
/// cycle where lane `l` appears `weights[l]` times), starting at position `cursor` of that
/// cycle; the lanes after it follow in cycle order, so an empty lane hands the pull to the
/// next. Pure, so the rotation is tested without a server.
pub fn pull_order(lane_of: &[usize], weights: &[u32], cursor: usize) -> Vec<usize> {
    let cycle: Vec<usize> = weights
        .iter()
        .enumerate()
        .flat_map(|(lane, w)| std::iter::repeat_n(lane, (*w).max(1) as usize))
        .collect();
    if cycle.is_empty() {
        return (0..lane_of.len()).collect();
    }
    let start = cursor % cycle.len();
    let mut lanes: Vec<usize> = Vec::with_capacity(weights.len());
    for lane in cycle[start..].iter().chain(cycle[..start].iter()) {
        if !lanes.contains(lane) {
            lanes.push(*lane);
        }
    }
    let mut order = Vec::with_capacity(lane_of.len());
    for lane in lanes {
        order.extend((0..lane_of.len()).filter(|c| lane_of[*c] == lane));
    }
    // Consumers of a lane outside `weights` still get their turn, last.
    order.extend((0..lane_of.len()).filter(|c| lane_of[*c] >= weights.len()));
    order
}

/// Per-lane consumer mode with `consumer_pull: "strict"`: the first lane's consumers
/// first, then the other lanes in their weighted cycle (starting at position `cursor` of
/// the cycle of lanes 1..), or, when `others_first`, those lanes before the first. An empty
/// lane hands the pull to the next, as in [`pull_order`]. Pure.
pub fn strict_pull_order(
    lane_of: &[usize],
    weights: &[u32],
    cursor: usize,
    others_first: bool,
) -> Vec<usize> {
    let first: Vec<usize> = (0..lane_of.len()).filter(|c| lane_of[*c] == 0).collect();
    // The other lanes' cycle, as `pull_order` makes it, with the first lane left out.
    let rest_weights: Vec<u32> = weights.iter().skip(1).copied().collect();
    let rest_of: Vec<usize> = lane_of.iter().map(|l| l.wrapping_sub(1)).collect();
    let rest: Vec<usize> = pull_order(&rest_of, &rest_weights, cursor)
        .into_iter()
        .filter(|c| lane_of[*c] != 0)
        .collect();
    match others_first {
        false => first.into_iter().chain(rest).collect(),
        true => rest.into_iter().chain(first).collect(),
    }
}

#[cfg(test)]
mod pull_order_tests {
    use super::*;

    #[test]
    fn strict_asks_the_first_lane_first_unless_the_others_are_due() {
        // consumer 0: urgent; 1, 2: routine (weight 2); 3: bulk (weight 1).
        let lane_of = [0, 1, 1, 2];
        let weights = [1, 2, 1];
        assert_eq!(
            strict_pull_order(&lane_of, &weights, 0, false),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            strict_pull_order(&lane_of, &weights, 2, false),
            vec![0, 3, 1, 2]
        );
        assert_eq!(
            strict_pull_order(&lane_of, &weights, 0, true),
            vec![1, 2, 3, 0]
        );
        // The others share by weight: routine first twice, bulk once, per cycle of three.
        let firsts: Vec<usize> = (0..6)
            .map(|c| lane_of[strict_pull_order(&lane_of, &weights, c, true)[0]])
            .collect();
        assert_eq!(firsts, vec![1, 1, 2, 1, 1, 2]);
    }

    proptest::proptest! {
        #[test]
        fn strict_order_visits_every_consumer_once(
            lane_of in proptest::collection::vec(0usize..4, 1..12),
            weights in proptest::collection::vec(1u32..5, 1..5),
            cursor in 0usize..100,
            others_first in proptest::bool::ANY,
        ) {
            let order = strict_pull_order(&lane_of, &weights, cursor, others_first);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            proptest::prop_assert_eq!(sorted, (0..lane_of.len()).collect::<Vec<_>>());
            let first_lane = order.iter().position(|c| lane_of[*c] != 0);
            if !others_first {
                // Every first-lane consumer comes before every other one.
                let last_first = order.iter().rposition(|c| lane_of[*c] == 0);
                if let (Some(a), Some(b)) = (last_first, first_lane) {
                    proptest::prop_assert!(a < b);
                }
            }
        }
    }

    #[test]
    fn lanes_take_turns_by_weight_across_pulls() {
        // consumers 0,1 are lane 0 (urgent, weight 3), consumer 2 is lane 1 (routine, 1).
        let lane_of = [0, 0, 1];
        let firsts: Vec<usize> = (0..8)
            .map(|c| lane_of[pull_order(&lane_of, &[3, 1], c)[0]])
            .collect();
        assert_eq!(firsts, vec![0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(pull_order(&lane_of, &[3, 1], 3), vec![2, 0, 1]);
        assert_eq!(pull_order(&lane_of, &[3, 1], 0), vec![0, 1, 2]);
    }

    #[test]
    fn every_consumer_is_tried_once() {
        let lane_of = [1, 0, 2, 1, 0];
        for cursor in 0..10 {
            let mut o = pull_order(&lane_of, &[2, 1, 5], cursor);
            o.sort_unstable();
            assert_eq!(o, vec![0, 1, 2, 3, 4]);
        }
    }
}
