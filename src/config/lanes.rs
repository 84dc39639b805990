//! The `delivery.priority_lanes` section: its shape, its defaults and its validation, and
//! the cross-check of the priorities `message_metadata` assigns against an enabled lane
//! policy. Values obey the same rules a header value obeys at run time; every problem is
//! reported with its JSON path. The run-time object built from it is
//! [`crate::pipeline::lanes::LanePolicy`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::metadata::{
    at, check_range, check_value, issue, MessageMetadataConfig, MAX_PRIORITY_LENGTH,
};
use crate::shared::issue::Issue;

/// Longest lane name, in characters.
pub const MAX_LANE_NAME_LENGTH: usize = 64;
/// Largest `lanes[].weight`.
pub const MAX_LANE_WEIGHT: u32 = 100;

/// `delivery.priority_lanes`: in-batch weighted round-robin by message priority.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityLanesConfig {
    /// Order each fetched batch by lane before writing it. Default false (fetched order).
    #[serde(default)]
    pub enabled: bool,
    /// Lane for messages without a priority and, by default, with an unknown one; must name
    /// a configured lane. Default `default`.
    #[serde(default = "default_lane_name")]
    pub default_lane: String,
    /// What an unknown (but well-formed) priority does: `default_lane` (default) sends it to
    /// the default lane, `reject` makes it a permanent failure of the message.
    #[serde(default)]
    pub unknown_priority_action: UnknownPriorityAction,
    /// Longest priority value, in characters, 1 to 256, when lanes are enabled; a longer one
    /// is a permanent failure of the message. Default 64.
    #[serde(default = "default_max_priority_value_length")]
    #[schemars(range(min = 1, max = 256))]
    pub max_priority_value_length: usize,
    /// The lanes, in scheduling order; at least one. Default: one lane
    /// `{"name": "default", "priorities": [], "weight": 1}`.
    #[serde(default = "default_lanes")]
    pub lanes: Vec<LaneConfig>,
    /// Per-lane consumer mode: how a pull picks the lane it asks first. `"weighted"` (the
    /// default): lanes take turns by weight across pulls. `"strict"`: the first lane is
    /// asked first on every pull, and its batches go before the other lanes' pulled ahead,
    /// so a message in it waits for at most the batch being written and its own lane's;
    /// the other lanes take what is left, by weight among themselves, and one pull starts
    /// with them whenever `strict_max_wait_ms` passed since the last that did. A jetsink
    /// extension, opt-in.
    #[serde(default)]
    pub consumer_pull: ConsumerPull,
    /// With `consumer_pull: "strict"`: the longest time, in milliseconds, the lanes after
    /// the first go without a pull that asks them first, 1 to 600000. Default 1000.
    #[serde(default = "default_strict_max_wait_ms")]
    pub strict_max_wait_ms: u64,
}

/// `delivery.priority_lanes.consumer_pull`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerPull {
    /// Lanes take turns by weight across pulls.
    #[default]
    Weighted,
    /// The first lane first on every pull; the others by weight, at least every
    /// `strict_max_wait_ms`.
    Strict,
}

/// Longest `strict_max_wait_ms`: ten minutes.
pub const MAX_STRICT_WAIT_MS: u64 = 600_000;

fn default_strict_max_wait_ms() -> u64 {
    1_000
}

impl Default for PriorityLanesConfig {
    fn default() -> Self {
        PriorityLanesConfig {
            enabled: false,
            default_lane: default_lane_name(),
            unknown_priority_action: UnknownPriorityAction::default(),
            max_priority_value_length: default_max_priority_value_length(),
            lanes: default_lanes(),
            consumer_pull: ConsumerPull::Weighted,
            strict_max_wait_ms: default_strict_max_wait_ms(),
        }
    }
}

/// What happens to a message whose priority maps to no lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnknownPriorityAction {
    /// It goes to `default_lane` and is counted as defaulted.
    #[default]
    DefaultLane,
    /// It is a permanent failure of the message and is counted as rejected.
    Reject,
}

/// One entry of `delivery.priority_lanes.lanes`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaneConfig {
    /// Lane name: a lowercase letter, then lowercase letters, digits, `_` or `-`; at most 64
    /// characters. Required.
    pub name: String,
    /// Priority values this lane takes, matched case-insensitively; a value may appear in
    /// only one lane. Default none.
    #[serde(default)]
    pub priorities: Vec<String>,
    /// Messages taken from this lane per round-robin pass, 1 to 100. Default 1.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: u32,
    /// Per-lane consumer mode (opt-in): subject filters whose messages belong to this lane.
    /// When any lane lists subjects, every lane must, and each lane gets one filtered
    /// durable consumer (`<consumer>-lane-<name>-0`) filtering all of its subjects; pulls
    /// alternate between lanes by weight, so an urgent message does not wait behind a
    /// routine backlog. Default none (in-batch lanes only).
    #[serde(default)]
    pub subjects: Vec<String>,
}

fn default_lane_name() -> String {
    "default".into()
}
fn default_max_priority_value_length() -> usize {
    64
}
fn default_lanes() -> Vec<LaneConfig> {
    vec![LaneConfig {
        name: default_lane_name(),
        priorities: Vec::new(),
        weight: default_weight(),
        subjects: Vec::new(),
    }]
}
fn default_weight() -> u32 {
    1
}

/// Checks `delivery.priority_lanes` found at `path` (empty for the section itself) and
/// returns every problem. A disabled policy is checked too, so turning it on later cannot
/// surprise.
pub fn validate_lanes(cfg: &PriorityLanesConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let max_len = cfg.max_priority_value_length.clamp(1, MAX_PRIORITY_LENGTH);
    check_range(
        cfg.max_priority_value_length,
        (1, MAX_PRIORITY_LENGTH),
        at(path, "max_priority_value_length"),
        &mut out,
    );
    let lanes_path = at(path, "lanes");
    if cfg.lanes.is_empty() {
        out.push(issue(lanes_path.clone(), "must list at least one lane"));
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    // Lowercased priority → (lane index, index in that lane's list).
    let mut owners: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (i, lane) in cfg.lanes.iter().enumerate() {
        let lane_path = format!("{lanes_path}[{i}]");
        check_lane_name(&lane.name, &at(&lane_path, "name"), &mut out);
        if let Some(first) = names.insert(&lane.name, i) {
            out.push(issue(
                at(&lane_path, "name"),
                format!("lane `{}` is already defined at lanes[{first}]", lane.name),
            ));
        }
        if !(1..=MAX_LANE_WEIGHT).contains(&lane.weight) {
            out.push(issue(
                at(&lane_path, "weight"),
                format!(
                    "must be between 1 and {MAX_LANE_WEIGHT}, got {}",
                    lane.weight
                ),
            ));
        }
        for (k, p) in lane.priorities.iter().enumerate() {
            let p_path = format!("{}[{k}]", at(&lane_path, "priorities"));
            check_value(p, max_len, p_path.clone(), &mut out);
            let key = p.to_lowercase();
            match owners.get(&key) {
                Some(&(j, m)) if j == i => out.push(issue(
                    p_path,
                    format!(
                        "priority {p:?} is already listed at priorities[{m}] of this lane (matching is case-insensitive)"
                    ),
                )),
                Some(&(j, m)) => out.push(issue(
                    p_path,
                    format!(
                        "priority {p:?} is mapped to both lane `{}` (lanes[{j}].priorities[{m}]) and lane `{}`; matching is case-insensitive and a value may appear in only one lane",
                        lane_name_at(cfg, j),
                        lane.name
                    ),
                )),
                None => {
                    owners.insert(key, (i, k));
                }
            }
        }
    }
    if !(1..=MAX_STRICT_WAIT_MS).contains(&cfg.strict_max_wait_ms) {
        out.push(issue(
            at(path, "strict_max_wait_ms"),
            format!(
                "must be between 1 and {MAX_STRICT_WAIT_MS}, got {}",
                cfg.strict_max_wait_ms
            ),
        ));
    }
    if cfg.consumer_pull == ConsumerPull::Strict && cfg.lanes.iter().all(|l| l.subjects.is_empty())
    {
        out.push(issue(
            at(path, "consumer_pull"),
            "\"strict\" picks which lane's consumer a pull asks first, and no lane lists \
             subjects (per-lane consumer mode): give every lane its subjects, or remove \
             consumer_pull",
        ));
    }
    if !cfg.lanes.iter().any(|l| l.name == cfg.default_lane) {
        let known: Vec<&str> = cfg.lanes.iter().map(|l| l.name.as_str()).collect();
        out.push(issue(
            at(path, "default_lane"),
            format!(
                "names no configured lane: {:?} (lanes: {})",
                cfg.default_lane,
                known.join(", ")
            ),
        ));
    }
    out
}

/// Cross-checks the priorities that `message_metadata` assigns (its default and its rules)
/// against an enabled lane policy: a value every message would be rejected for is a
/// configuration mistake, not a run-time surprise. Returns no issue when lanes are off.
pub fn validate_metadata_for_lanes(
    metadata: &MessageMetadataConfig,
    metadata_path: &str,
    lanes: &PriorityLanesConfig,
    lanes_path: &str,
) -> Vec<Issue> {
    if !lanes.enabled {
        return Vec::new();
    }
    let mut out = Vec::new();
    let configured = metadata
        .priority
        .default
        .iter()
        .map(|v| (at(metadata_path, "priority.default"), v))
        .chain(metadata.rules.iter().enumerate().filter_map(|(i, r)| {
            let p = format!("{}[{i}].priority", at(metadata_path, "rules"));
            r.priority.as_ref().map(|v| (p, v))
        }));
    for (path, value) in configured {
        let length = value.chars().count();
        if length > lanes.max_priority_value_length {
            out.push(issue(
                path,
                format!(
                    "is {length} characters, more than {} ({}): every message given it would be rejected",
                    lanes.max_priority_value_length,
                    at(lanes_path, "max_priority_value_length")
                ),
            ));
        } else if lanes.unknown_priority_action == UnknownPriorityAction::Reject
            && !maps_to_lane(lanes, value)
        {
            out.push(issue(
                path,
                format!(
                    "priority {value:?} maps to no lane and {} is `reject`: every message given it would be rejected",
                    at(lanes_path, "unknown_priority_action")
                ),
            ));
        }
    }
    out
}

fn maps_to_lane(lanes: &PriorityLanesConfig, value: &str) -> bool {
    let key = value.to_lowercase();
    lanes
        .lanes
        .iter()
        .flat_map(|l| &l.priorities)
        .any(|p| p.to_lowercase() == key)
}

fn lane_name_at(cfg: &PriorityLanesConfig, i: usize) -> &str {
    cfg.lanes.get(i).map(|l| l.name.as_str()).unwrap_or("?")
}

fn check_lane_name(name: &str, path: &str, out: &mut Vec<Issue>) {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && name.len() <= MAX_LANE_NAME_LENGTH;
    if !ok {
        out.push(issue(
            path.to_string(),
            format!(
                "must be a lowercase letter followed by lowercase letters, digits, `_` or `-`, at most {MAX_LANE_NAME_LENGTH} characters, got {name:?}"
            ),
        ));
    }
}
