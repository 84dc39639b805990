//! The `message_metadata` section: its shape, its defaults and its validation (the
//! `delivery.priority_lanes` section, and the cross-check of the two, are in
//! [`super::lanes`]).
//!
//! Both sections turn headers that publishers control into storage metadata and scheduling
//! hints, so every value an operator writes here must pass the same rules a header value
//! passes at run time ([`crate::metadata::normalize_value`]), and every problem is reported
//! with its JSON path, all at once. The run-time objects built from these structs are
//! [`crate::metadata::MetadataPolicy`] and [`crate::pipeline::lanes::LanePolicy`]; both
//! are built only from sections these checks accepted, and do not check them again.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::metadata_headers::DEFAULT_PRIORITY_HEADERS;
use super::metadata_headers::{check_headers, FieldHeaders};
use crate::shared::issue::Issue;
use crate::shared::metadata_value::{normalize_value, MetadataErrorKind, MetadataField};
use crate::shared::names::check_subject;

/// Hard cap, in characters, on a priority value whether or not lanes are enabled; also the
/// upper bound of `max_priority_value_length`.
pub const MAX_PRIORITY_LENGTH: usize = 256;
/// Most `message_metadata.rules`: every message is matched against them in order.
pub const MAX_RULES: usize = 1024;
const MAX_LABELS_RANGE: (usize, usize) = (1, 256);
const MAX_LENGTH_RANGE: (usize, usize) = (1, 1024);

// ---------------------------------------------------------------------------------------
// message_metadata
// ---------------------------------------------------------------------------------------

/// `message_metadata`: where a message's priority, classification and labels come from.
///
/// For each field: a header the publisher set wins; without it, the first matching rule
/// that sets the field; without one, the field's `default`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageMetadataConfig {
    /// Where the priority comes from. Default: header `Jetsink-Priority`, no default value.
    #[serde(default)]
    pub priority: PriorityMetadataConfig,
    /// Where the classification comes from. Default: header `Jetsink-Classification`, no
    /// default value.
    #[serde(default)]
    pub classification: ClassificationMetadataConfig,
    /// Where the labels come from. Default: header `Jetsink-Labels`, no default labels.
    #[serde(default)]
    pub labels: LabelsMetadataConfig,
    /// Most labels one message may carry, 1 to 256. Default 32. A message with more is a
    /// permanent failure of that message.
    #[serde(default = "default_max_labels")]
    pub max_labels: usize,
    /// Longest label, in characters, 1 to 1024. Default 128. A longer label is a permanent
    /// failure of its message.
    #[serde(default = "default_max_length")]
    pub max_label_length: usize,
    /// Longest classification, in characters, 1 to 1024. Default 128. A longer one is a
    /// permanent failure of its message.
    #[serde(default = "default_max_length")]
    pub max_classification_length: usize,
    /// Subject rules, tried in order: the first rule whose `subject` filter matches and that
    /// sets a field fills that field when its header is absent. At most 1024. Default none.
    #[serde(default)]
    pub rules: Vec<MetadataRule>,
}

impl Default for MessageMetadataConfig {
    fn default() -> Self {
        MessageMetadataConfig {
            priority: PriorityMetadataConfig::default(),
            classification: ClassificationMetadataConfig::default(),
            labels: LabelsMetadataConfig::default(),
            max_labels: default_max_labels(),
            max_label_length: default_max_length(),
            max_classification_length: default_max_length(),
            rules: Vec::new(),
        }
    }
}

/// `message_metadata.priority`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityMetadataConfig {
    /// Header carrying the priority (matched case-insensitively). Default: jetsink's own
    /// `Jetsink-Priority`, else the lane document's `Nats-Sinks-Priority`, so publishers
    /// written against either work unchanged. Setting it reads only the header named.
    #[serde(default)]
    pub header: Option<String>,
    /// Priority of a message with neither the header nor a matching rule, at most 256
    /// characters. Default none (no priority; the default lane when lanes are enabled).
    #[serde(default)]
    pub default: Option<String>,
}

/// `message_metadata.classification`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassificationMetadataConfig {
    /// Header carrying the classification (matched case-insensitively). Default
    /// `Jetsink-Classification`.
    #[serde(default = "default_classification_header")]
    pub header: String,
    /// Classification of a message with neither the header nor a matching rule. Default
    /// none.
    #[serde(default)]
    pub default: Option<String>,
}

impl Default for ClassificationMetadataConfig {
    fn default() -> Self {
        ClassificationMetadataConfig {
            header: default_classification_header(),
            default: None,
        }
    }
}

/// `message_metadata.labels`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsMetadataConfig {
    /// Header carrying the labels (matched case-insensitively), as `a;b;c` or as a JSON list
    /// of strings `["a","b"]`. Default `Jetsink-Labels`.
    #[serde(default = "default_labels_header")]
    pub header: String,
    /// Labels of a message with neither the header nor a matching rule. Default none.
    #[serde(default)]
    pub default: Vec<String>,
}

impl Default for LabelsMetadataConfig {
    fn default() -> Self {
        LabelsMetadataConfig {
            header: default_labels_header(),
            default: Vec::new(),
        }
    }
}

/// One entry of `message_metadata.rules`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataRule {
    /// NATS subject filter the rule applies to: `*` matches one token, `>` the rest.
    /// Required.
    pub subject: String,
    /// Priority for matching messages without a priority header. Default: not set.
    #[serde(default)]
    pub priority: Option<String>,
    /// Classification for matching messages without a classification header. Default: not
    /// set.
    #[serde(default)]
    pub classification: Option<String>,
    /// Labels for matching messages without a labels header (`[]` sets no labels). Default:
    /// not set.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
}

fn default_max_labels() -> usize {
    32
}
fn default_max_length() -> usize {
    128
}
impl PriorityMetadataConfig {
    /// The headers to read, in order; the first one a message carries wins.
    pub fn headers(&self) -> Vec<String> {
        match &self.header {
            Some(h) => vec![h.clone()],
            None => DEFAULT_PRIORITY_HEADERS.map(String::from).to_vec(),
        }
    }
}
fn default_classification_header() -> String {
    "Jetsink-Classification".into()
}
fn default_labels_header() -> String {
    "Jetsink-Labels".into()
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// Checks `message_metadata` found at `path` (empty for the section itself) and returns
/// every problem.
pub fn validate_metadata(cfg: &MessageMetadataConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let limits = check_limits(cfg, path, &mut out);
    check_headers(
        FieldHeaders {
            priority: cfg.priority.header.as_ref(),
            classification: &cfg.classification.header,
            labels: &cfg.labels.header,
        },
        path,
        &mut out,
    );
    if let Some(v) = &cfg.priority.default {
        check_value(
            v,
            MAX_PRIORITY_LENGTH,
            at(path, "priority.default"),
            &mut out,
        );
    }
    if let Some(v) = &cfg.classification.default {
        check_value(
            v,
            limits.classification,
            at(path, "classification.default"),
            &mut out,
        );
    }
    check_labels(
        &cfg.labels.default,
        limits,
        &at(path, "labels.default"),
        &mut out,
    );
    if cfg.rules.len() > MAX_RULES {
        out.push(issue(
            at(path, "rules"),
            format!("at most {MAX_RULES} rules, got {}", cfg.rules.len()),
        ));
    }
    for (i, rule) in cfg.rules.iter().enumerate() {
        check_rule(
            rule,
            limits,
            &format!("{}[{i}]", at(path, "rules")),
            &mut out,
        );
    }
    out
}

/// The limits of `message_metadata`, clamped into range so values can still be checked
/// while an out-of-range limit is reported.
#[derive(Debug, Clone, Copy)]
struct Limits {
    labels: usize,
    label: usize,
    classification: usize,
}

fn check_limits(cfg: &MessageMetadataConfig, path: &str, out: &mut Vec<Issue>) -> Limits {
    check_range(
        cfg.max_labels,
        MAX_LABELS_RANGE,
        at(path, "max_labels"),
        out,
    );
    check_range(
        cfg.max_label_length,
        MAX_LENGTH_RANGE,
        at(path, "max_label_length"),
        out,
    );
    check_range(
        cfg.max_classification_length,
        MAX_LENGTH_RANGE,
        at(path, "max_classification_length"),
        out,
    );
    Limits {
        labels: cfg.max_labels.clamp(MAX_LABELS_RANGE.0, MAX_LABELS_RANGE.1),
        label: cfg
            .max_label_length
            .clamp(MAX_LENGTH_RANGE.0, MAX_LENGTH_RANGE.1),
        classification: cfg
            .max_classification_length
            .clamp(MAX_LENGTH_RANGE.0, MAX_LENGTH_RANGE.1),
    }
}

fn check_rule(rule: &MetadataRule, limits: Limits, path: &str, out: &mut Vec<Issue>) {
    if let Err(why) = check_subject(&rule.subject) {
        out.push(issue(
            at(path, "subject"),
            format!("not a valid subject filter ({why}), got {:?}", rule.subject),
        ));
    }
    if rule.priority.is_none() && rule.classification.is_none() && rule.labels.is_none() {
        out.push(issue(
            path.to_string(),
            "must set at least one of `priority`, `classification`, `labels`",
        ));
    }
    if let Some(v) = &rule.priority {
        check_value(v, MAX_PRIORITY_LENGTH, at(path, "priority"), out);
    }
    if let Some(v) = &rule.classification {
        check_value(v, limits.classification, at(path, "classification"), out);
    }
    if let Some(labels) = &rule.labels {
        check_labels(labels, limits, &at(path, "labels"), out);
    }
}

fn check_labels(labels: &[String], limits: Limits, path: &str, out: &mut Vec<Issue>) {
    if labels.len() > limits.labels {
        out.push(issue(
            path.to_string(),
            format!(
                "at most {} labels (max_labels), got {}",
                limits.labels,
                labels.len()
            ),
        ));
    }
    for (i, label) in labels.iter().enumerate() {
        check_value(label, limits.label, format!("{path}[{i}]"), out);
    }
}

/// A configured value must be exactly what normalizing it as a header value would give:
/// the run-time rules (no control characters, at most `max_chars`), plus non-empty and no
/// surrounding whitespace, since a header value is trimmed.
pub(super) fn check_value(value: &str, max_chars: usize, path: String, out: &mut Vec<Issue>) {
    let message = match normalize_value(MetadataField::Priority, value, max_chars) {
        Ok(Some(v)) if v == value => return,
        Ok(Some(_)) => format!("must not start or end with whitespace, got {value:?}"),
        Ok(None) => "must not be empty".to_string(),
        Err(e) => match e.kind {
            MetadataErrorKind::ControlCharacter => {
                "must not contain control characters".to_string()
            }
            _ => format!(
                "must be at most {max_chars} characters, got {}",
                value.chars().count()
            ),
        },
    };
    out.push(issue(path, message));
}

pub(super) fn check_range(v: usize, (lo, hi): (usize, usize), path: String, out: &mut Vec<Issue>) {
    if v < lo || v > hi {
        out.push(issue(
            path,
            format!("must be between {lo} and {hi}, got {v}"),
        ));
    }
}

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
    use crate::config::lanes::*;
    use crate::config::{deserialize_at, strict_json};

    /// The seed document's lane example, verbatim (shared with tests/lanes.rs).
    const SEED_LANES: &str = include_str!("../../tests/data/seed-lanes.json");

    /// The seed document's metadata example, verbatim (shared with tests/lanes.rs).
    const SEED_METADATA: &str = include_str!("../../tests/data/seed-metadata.json");

    /// The seed document's default policy, verbatim (shared with tests/lanes.rs).
    const SEED_DEFAULT_LANES: &str = include_str!("../../tests/data/seed-default-lanes.json");

    fn section<T: serde::de::DeserializeOwned>(text: &str, pointer: &str) -> Result<T, Issue> {
        let doc = strict_json::parse(text).unwrap();
        let value = doc.pointer(pointer).unwrap().clone();
        deserialize_at(&pointer[1..].replace('/', "."), value)
    }

    pub(crate) fn seed_lanes() -> PriorityLanesConfig {
        section(SEED_LANES, "/delivery/priority_lanes").unwrap()
    }

    pub(crate) fn seed_metadata() -> MessageMetadataConfig {
        section(SEED_METADATA, "/message_metadata").unwrap()
    }

    fn lanes(json: &str) -> PriorityLanesConfig {
        serde_json::from_str(json).unwrap()
    }

    fn metadata(json: &str) -> MessageMetadataConfig {
        serde_json::from_str(json).unwrap()
    }

    fn rendered(issues: Vec<Issue>) -> Vec<String> {
        issues.iter().map(Issue::to_string).collect()
    }

    fn lane_errors(json: &str) -> Vec<String> {
        rendered(validate_lanes(
            &lanes(json),
            "sinks.x.delivery.priority_lanes",
        ))
    }

    fn metadata_errors(json: &str) -> Vec<String> {
        rendered(validate_metadata(
            &metadata(json),
            "sinks.x.message_metadata",
        ))
    }

    fn has(errs: &[String], expected: &str) {
        assert!(
            errs.iter().any(|e| e == expected),
            "{expected:?} not in {errs:#?}"
        );
    }

    fn has_prefix(errs: &[String], prefix: &str) {
        assert!(
            errs.iter().any(|e| e.starts_with(prefix)),
            "nothing starts with {prefix:?} in {errs:#?}"
        );
    }

    #[test]
    fn seed_lane_example_loads_verbatim_and_validates() {
        let cfg = seed_lanes();
        assert!(cfg.enabled);
        assert_eq!(cfg.default_lane, "routine");
        assert_eq!(
            cfg.unknown_priority_action,
            UnknownPriorityAction::DefaultLane
        );
        assert_eq!(cfg.max_priority_value_length, 64);
        assert_eq!(cfg.lanes.len(), 2);
        assert_eq!(cfg.lanes[0].name, "urgent");
        assert_eq!(cfg.lanes[0].priorities, vec!["urgent", "immediate"]);
        assert_eq!(cfg.lanes[0].weight, 3);
        assert_eq!(cfg.lanes[1].weight, 1);
        assert_eq!(validate_lanes(&cfg, "delivery.priority_lanes"), vec![]);
    }

    #[test]
    fn seed_default_policy_equals_the_built_in_default() {
        let cfg: PriorityLanesConfig =
            section(SEED_DEFAULT_LANES, "/delivery/priority_lanes").unwrap();
        assert_eq!(cfg, PriorityLanesConfig::default());
        assert_eq!(lanes("{}"), PriorityLanesConfig::default());
        assert_eq!(validate_lanes(&cfg, ""), vec![]);
    }

    #[test]
    fn seed_metadata_example_loads_verbatim_and_validates() {
        let cfg = seed_metadata();
        assert_eq!(cfg.priority.header.as_deref(), Some("Nats-Sinks-Priority"));
        assert_eq!(cfg.priority.headers(), vec!["Nats-Sinks-Priority"]);
        assert_eq!(cfg.priority.default.as_deref(), Some("routine"));
        assert_eq!(cfg.classification.header, "Jetsink-Classification");
        assert_eq!(cfg.labels.header, "Jetsink-Labels");
        assert_eq!(cfg.rules.len(), 2);
        assert_eq!(cfg.rules[0].subject, "alerts.>");
        assert_eq!(cfg.rules[0].priority.as_deref(), Some("urgent"));
        assert_eq!(validate_metadata(&cfg, "message_metadata"), vec![]);
        assert_eq!(
            validate_metadata_for_lanes(
                &cfg,
                "message_metadata",
                &seed_lanes(),
                "delivery.priority_lanes"
            ),
            vec![]
        );
    }

    #[test]
    fn metadata_defaults_are_documented_values() {
        let cfg = metadata("{}");
        assert_eq!(cfg, MessageMetadataConfig::default());
        assert_eq!(cfg.max_labels, 32);
        assert_eq!(cfg.max_label_length, 128);
        assert_eq!(cfg.max_classification_length, 128);
        assert_eq!(cfg.priority.header, None);
        assert_eq!(
            cfg.priority.headers(),
            vec!["Jetsink-Priority", "Nats-Sinks-Priority"],
            "jetsink's own header first, then the lane document's"
        );
        assert_eq!(validate_metadata(&cfg, ""), vec![]);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_path() {
        let err = section::<PriorityLanesConfig>(
            r#"{"delivery": {"priority_lanes": {"lanes": [{"name": "a", "wieght": 2}]}}}"#,
            "/delivery/priority_lanes",
        )
        .unwrap_err();
        assert!(
            err.path.starts_with("delivery.priority_lanes.lanes[0]"),
            "{err}"
        );
        assert!(err.message.contains("unknown field `wieght`"), "{err}");
        let err = section::<MessageMetadataConfig>(
            r#"{"m": {"rules": [{"subject": "a", "prio": "x"}]}}"#,
            "/m",
        )
        .unwrap_err();
        assert!(err.message.contains("unknown field `prio`"), "{err}");
        let err =
            section::<PriorityLanesConfig>(r#"{"p": {"unknown_priority_action": "drop"}}"#, "/p")
                .unwrap_err();
        assert!(err.path.starts_with("p.unknown_priority_action"), "{err}");
    }

    #[test]
    fn lane_name_is_required_and_weight_defaults_to_one() {
        assert!(serde_json::from_str::<PriorityLanesConfig>(r#"{"lanes": [{}]}"#).is_err());
        let cfg = lanes(r#"{"lanes": [{"name": "default"}]}"#);
        assert_eq!(cfg.lanes[0].weight, 1);
        assert!(cfg.lanes[0].priorities.is_empty());
    }

    #[test]
    fn weight_out_of_range_names_its_path() {
        let errs = lane_errors(
            r#"{"lanes": [{"name": "default", "weight": 1}, {"name": "b", "weight": 0}, {"name": "c", "weight": 101}]}"#,
        );
        has(
            &errs,
            "sinks.x.delivery.priority_lanes.lanes[1].weight: must be between 1 and 100, got 0",
        );
        has(
            &errs,
            "sinks.x.delivery.priority_lanes.lanes[2].weight: must be between 1 and 100, got 101",
        );
        assert_eq!(errs.len(), 2, "{errs:#?}");
    }

    #[test]
    fn max_priority_value_length_out_of_range() {
        for bad in [0, 257] {
            let errs = lane_errors(&format!(r#"{{"max_priority_value_length": {bad}}}"#));
            has(
                &errs,
                &format!("sinks.x.delivery.priority_lanes.max_priority_value_length: must be between 1 and 256, got {bad}"),
            );
        }
        assert!(lane_errors(r#"{"max_priority_value_length": 256}"#).is_empty());
        assert!(lane_errors(r#"{"max_priority_value_length": 1}"#).is_empty());
    }

    #[test]
    fn empty_lane_list_is_refused() {
        let errs = lane_errors(r#"{"lanes": []}"#);
        has(
            &errs,
            "sinks.x.delivery.priority_lanes.lanes: must list at least one lane",
        );
        has_prefix(
            &errs,
            "sinks.x.delivery.priority_lanes.default_lane: names no configured lane",
        );
    }

    #[test]
    fn unknown_default_lane_is_refused() {
        let errs = lane_errors(r#"{"default_lane": "routine", "lanes": [{"name": "urgent"}]}"#);
        has(
            &errs,
            r#"sinks.x.delivery.priority_lanes.default_lane: names no configured lane: "routine" (lanes: urgent)"#,
        );
    }

    #[test]
    fn bad_lane_names_are_refused() {
        let long = format!("a{}", "b".repeat(64));
        for bad in [
            "",
            "Urgent",
            "1st",
            "_x",
            "-x",
            "a b",
            "a.b",
            "ürgent",
            long.as_str(),
        ] {
            let errs = lane_errors(&format!(
                r#"{{"default_lane": "default", "lanes": [{{"name": "default"}}, {{"name": {bad:?}}}]}}"#
            ));
            has_prefix(
                &errs,
                "sinks.x.delivery.priority_lanes.lanes[1].name: must be a lowercase letter",
            );
        }
        let ok = "a".repeat(64);
        for good in ["a", "urgent_1", "x-y", ok.as_str()] {
            let errs = lane_errors(&format!(
                r#"{{"default_lane": {good:?}, "lanes": [{{"name": {good:?}}}]}}"#
            ));
            assert!(errs.is_empty(), "{good}: {errs:#?}");
        }
    }

    #[test]
    fn duplicate_lane_names_are_refused() {
        let errs = lane_errors(r#"{"lanes": [{"name": "default"}, {"name": "default"}]}"#);
        has(
            &errs,
            "sinks.x.delivery.priority_lanes.lanes[1].name: lane `default` is already defined at lanes[0]",
        );
    }

    #[test]
    fn duplicate_priority_across_lanes_names_both_lanes() {
        let errs = lane_errors(
            r#"{"default_lane": "routine", "lanes": [
                {"name": "urgent", "priorities": ["urgent", "high"]},
                {"name": "routine", "priorities": ["routine", "HIGH"]}]}"#,
        );
        has(
            &errs,
            r#"sinks.x.delivery.priority_lanes.lanes[1].priorities[1]: priority "HIGH" is mapped to both lane `urgent` (lanes[0].priorities[1]) and lane `routine`; matching is case-insensitive and a value may appear in only one lane"#,
        );
        assert_eq!(errs.len(), 1, "{errs:#?}");
    }

    #[test]
    fn duplicate_priority_inside_one_lane_is_refused() {
        let errs = lane_errors(r#"{"lanes": [{"name": "default", "priorities": ["a", "A"]}]}"#);
        has_prefix(
            &errs,
            "sinks.x.delivery.priority_lanes.lanes[0].priorities[1]: priority \"A\" is already listed at priorities[0]",
        );
    }

    #[test]
    fn lane_priority_values_follow_the_value_rules() {
        let errs = lane_errors(
            r#"{"max_priority_value_length": 4, "lanes": [{"name": "default",
                "priorities": ["", " a", "a\u0007", "abcde", "abcd"]}]}"#,
        );
        let p = "sinks.x.delivery.priority_lanes.lanes[0].priorities";
        has(&errs, &format!("{p}[0]: must not be empty"));
        has(
            &errs,
            &format!(r#"{p}[1]: must not start or end with whitespace, got " a""#),
        );
        has(
            &errs,
            &format!("{p}[2]: must not contain control characters"),
        );
        has(
            &errs,
            &format!("{p}[3]: must be at most 4 characters, got 5"),
        );
        assert_eq!(errs.len(), 4, "{errs:#?}");
    }

    #[test]
    fn every_lane_problem_is_reported_at_once() {
        let errs = lane_errors(
            r#"{"default_lane": "nope", "max_priority_value_length": 0, "lanes": [
                {"name": "A", "weight": 0, "priorities": ["x"]},
                {"name": "b", "priorities": ["X"]}]}"#,
        );
        assert_eq!(errs.len(), 5, "{errs:#?}");
    }

    #[test]
    fn bad_header_names_are_refused() {
        for bad in ["", "Has Space", "Colon:", "Tab\t", "Ünicode"] {
            let errs = metadata_errors(&format!(r#"{{"priority": {{"header": {bad:?}}}}}"#));
            has_prefix(
                &errs,
                "sinks.x.message_metadata.priority.header: must be a non-empty header name",
            );
        }
        let errs = metadata_errors(
            r#"{"labels": {"header": "x-y"}, "classification": {"header": "X-Y"}}"#,
        );
        has_prefix(
            &errs,
            r#"sinks.x.message_metadata.labels.header: "x-y" is already the header of `classification`"#,
        );
    }

    #[test]
    fn limits_out_of_range_are_refused() {
        let errs = metadata_errors(
            r#"{"max_labels": 0, "max_label_length": 1025, "max_classification_length": 0}"#,
        );
        let p = "sinks.x.message_metadata";
        has(
            &errs,
            &format!("{p}.max_labels: must be between 1 and 256, got 0"),
        );
        has(
            &errs,
            &format!("{p}.max_label_length: must be between 1 and 1024, got 1025"),
        );
        has(
            &errs,
            &format!("{p}.max_classification_length: must be between 1 and 1024, got 0"),
        );
    }

    #[test]
    fn default_values_follow_the_value_rules() {
        let long = "x".repeat(257);
        let errs = metadata_errors(&format!(
            r#"{{"max_labels": 2, "max_label_length": 3, "max_classification_length": 5,
                "priority": {{"default": {long:?}}},
                "classification": {{"default": "secret"}},
                "labels": {{"default": ["a", "abcd", "b\n"]}}}}"#
        ));
        let p = "sinks.x.message_metadata";
        has(
            &errs,
            &format!("{p}.priority.default: must be at most 256 characters, got 257"),
        );
        has(
            &errs,
            &format!("{p}.classification.default: must be at most 5 characters, got 6"),
        );
        has(
            &errs,
            &format!("{p}.labels.default: at most 2 labels (max_labels), got 3"),
        );
        has(
            &errs,
            &format!("{p}.labels.default[1]: must be at most 3 characters, got 4"),
        );
        has(
            &errs,
            &format!("{p}.labels.default[2]: must not contain control characters"),
        );
        assert_eq!(errs.len(), 5, "{errs:#?}");
    }

    #[test]
    fn rules_are_checked_one_by_one() {
        let errs = metadata_errors(
            r#"{"rules": [
                {"subject": "a.>", "priority": "urgent"},
                {"subject": "a.>.b", "priority": "x"},
                {"subject": "a"},
                {"subject": "a.*", "priority": " p", "classification": "", "labels": ["ok", ""]}]}"#,
        );
        let p = "sinks.x.message_metadata.rules";
        has_prefix(
            &errs,
            &format!(
                "{p}[1].subject: not a valid subject filter (`>` must be the whole last token)"
            ),
        );
        has(
            &errs,
            &format!("{p}[2]: must set at least one of `priority`, `classification`, `labels`"),
        );
        has_prefix(&errs, &format!("{p}[3].priority: must not start or end"));
        has(&errs, &format!("{p}[3].classification: must not be empty"));
        has(&errs, &format!("{p}[3].labels[1]: must not be empty"));
        assert_eq!(errs.len(), 5, "{errs:#?}");
    }

    #[test]
    fn too_many_rules_are_refused() {
        let rules: Vec<String> = (0..=MAX_RULES)
            .map(|i| format!(r#"{{"subject": "s.{i}", "priority": "p"}}"#))
            .collect();
        let errs = metadata_errors(&format!(r#"{{"rules": [{}]}}"#, rules.join(",")));
        has(
            &errs,
            "sinks.x.message_metadata.rules: at most 1024 rules, got 1025",
        );
    }

    #[test]
    fn an_empty_label_list_in_a_rule_is_allowed() {
        assert!(metadata_errors(r#"{"rules": [{"subject": ">", "labels": []}]}"#).is_empty());
    }

    #[test]
    fn metadata_priorities_are_cross_checked_against_enabled_lanes() {
        let meta = metadata(
            r#"{"priority": {"default": "bulk"},
                "rules": [{"subject": "a.>", "priority": "URGENT"}, {"subject": "b", "priority": "abcdefgh"}]}"#,
        );
        let mut lanes_cfg = seed_lanes();
        lanes_cfg.unknown_priority_action = UnknownPriorityAction::Reject;
        lanes_cfg.max_priority_value_length = 7;
        let errs = rendered(validate_metadata_for_lanes(
            &meta,
            "message_metadata",
            &lanes_cfg,
            "delivery.priority_lanes",
        ));
        has(
            &errs,
            r#"message_metadata.priority.default: priority "bulk" maps to no lane and delivery.priority_lanes.unknown_priority_action is `reject`: every message given it would be rejected"#,
        );
        has(
            &errs,
            "message_metadata.rules[1].priority: is 8 characters, more than 7 (delivery.priority_lanes.max_priority_value_length): every message given it would be rejected",
        );
        assert_eq!(errs.len(), 2, "{errs:#?}");
        lanes_cfg.enabled = false;
        assert!(validate_metadata_for_lanes(&meta, "m", &lanes_cfg, "l").is_empty());
    }

    #[test]
    fn root_paths_have_no_leading_dot() {
        let errs = rendered(validate_lanes(&lanes(r#"{"lanes": []}"#), ""));
        has(&errs, "lanes: must list at least one lane");
    }
}
