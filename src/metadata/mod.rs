//! Message metadata: a message's priority, classification and labels, taken from its
//! headers or, when a header is absent, from operator rules and defaults.
//!
//! Header values are untrusted: any publisher admitted to the subject sets them. So every
//! value is checked (no control characters, bounded lengths, bounded label count) and a bad
//! one is a typed [`MetadataError`] that the runner turns into a permanent failure of that
//! one message, never a crash and never a silent default. Error messages give a value's
//! length, never the value. Everything here is pure: no I/O, no clock, no global state.
//!
//! Precedence for each field, decided independently:
//! 1. the field's header, if present and not blank: the publisher's value is authoritative;
//! 2. else the first rule, in configured order, whose subject filter matches and that sets
//!    the field;
//! 3. else the field's configured `default` (which may be none).
//!
//! Header names match case-insensitively. When the header occurs more than once, the last
//! value wins. A value is trimmed of surrounding whitespace, and a blank value counts as
//! absent (after the control-character check, so `"\t"` is still rejected). Labels are a
//! `;`-separated list, or a JSON list of strings when the value starts with `[`; each label
//! is trimmed, empty ones are dropped, order and repeats are kept. A labels header that
//! yields no label (`[]`, `;`) is present and means "no labels". Lengths count Unicode
//! characters.

use crate::shared::metadata_value as value;
use value::present;

use crate::config::metadata::{MessageMetadataConfig, MAX_PRIORITY_LENGTH};
pub use value::{
    normalize_value, parse_labels, sanitize_value, Metadata, MetadataError, MetadataErrorKind,
    MetadataField,
};

/// Whether NATS subject `subject` matches `filter`: `*` matches exactly one token, `>` (as
/// the last token) one or more remaining tokens, any other token only itself.
pub fn subject_matches(filter: &str, subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    Filter::compile(filter).matches(&tokens)
}

/// The last value of header `name` (case-insensitive) in `headers`, if any.
fn header<'a>(headers: &'a [(String, Vec<String>)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .rev()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .find_map(|(_, values)| values.last())
        .map(String::as_str)
}

/// One token of a compiled subject filter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    One,
    Rest,
}

/// A subject filter split into tokens once, matched many times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Filter(Vec<Token>);

impl Filter {
    fn compile(filter: &str) -> Filter {
        Filter(
            filter
                .split('.')
                .map(|t| match t {
                    "*" => Token::One,
                    ">" => Token::Rest,
                    _ => Token::Literal(t.to_string()),
                })
                .collect(),
        )
    }

    fn matches(&self, subject: &[&str]) -> bool {
        let mut rest = subject;
        for token in &self.0 {
            match (token, rest.split_first()) {
                (Token::Rest, Some(_)) => return true,
                (Token::One, Some((_, tail))) => rest = tail,
                (Token::Literal(l), Some((s, tail))) if l == s => rest = tail,
                _ => return false,
            }
        }
        rest.is_empty()
    }
}

/// One compiled `message_metadata.rules` entry.
#[derive(Debug, Clone)]
struct Rule {
    filter: Filter,
    priority: Option<String>,
    classification: Option<String>,
    labels: Option<Vec<String>>,
}

/// The `message_metadata` section, ready to apply: headers to read, compiled rules,
/// defaults and limits. Build one per sink; [`MetadataPolicy::apply`] is pure.
#[derive(Debug, Clone)]
pub struct MetadataPolicy {
    /// Read in order; the first one a message carries wins.
    priority_headers: Vec<String>,
    classification_header: String,
    labels_header: String,
    priority_default: Option<String>,
    classification_default: Option<String>,
    labels_default: Vec<String>,
    rules: Vec<Rule>,
    /// Refuse a priority with control characters or over 256 characters (lanes on), or
    /// store it sanitized (lanes off: the lane document scopes its checks to lanes).
    check_priority: bool,
    max_labels: usize,
    max_label_length: usize,
    max_classification_length: usize,
}

impl MetadataPolicy {
    /// Builds the policy from a section that validation
    /// ([`crate::config::metadata::validate_metadata`]) has already accepted, as every
    /// section of a loaded [`crate::config::Config`] has: it is not checked again.
    pub fn new(cfg: &MessageMetadataConfig) -> MetadataPolicy {
        let rules = cfg
            .rules
            .iter()
            .map(|r| Rule {
                filter: Filter::compile(&r.subject),
                priority: r.priority.clone(),
                classification: r.classification.clone(),
                labels: r.labels.clone(),
            })
            .collect();
        MetadataPolicy {
            priority_headers: cfg.priority.headers(),
            classification_header: cfg.classification.header.clone(),
            labels_header: cfg.labels.header.clone(),
            priority_default: cfg.priority.default.clone(),
            classification_default: cfg.classification.default.clone(),
            labels_default: cfg.labels.default.clone(),
            rules,
            check_priority: true,
            max_labels: cfg.max_labels,
            max_label_length: cfg.max_label_length,
            max_classification_length: cfg.max_classification_length,
        }
    }

    /// With `false`, a priority header that fails the checks is stored sanitized (see
    /// [`sanitize_value`]) instead of refusing the message: the checks belong to priority
    /// lanes, and without lanes a priority is only stored.
    pub fn checking_priority(mut self, check: bool) -> MetadataPolicy {
        self.check_priority = check;
        self
    }

    /// The metadata of a message on `subject` with `headers` (each name with its values in
    /// arrival order, as in the Envelope). Fields are checked in the order priority,
    /// classification, labels; the first refused value is the error.
    pub fn apply(
        &self,
        subject: &str,
        headers: &[(String, Vec<String>)],
    ) -> Result<Metadata, MetadataError> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let priority = match self
            .priority_headers
            .iter()
            .find_map(|name| header(headers, name))
        {
            Some(raw) if self.check_priority => {
                normalize_value(MetadataField::Priority, raw, MAX_PRIORITY_LENGTH)?
            }
            Some(raw) => sanitize_value(raw, MAX_PRIORITY_LENGTH),
            None => None,
        }
        .or_else(|| self.rule_value(&tokens, |r| r.priority.as_ref()).cloned())
        .or_else(|| self.priority_default.clone());
        let classification = match header(headers, &self.classification_header) {
            Some(raw) => normalize_value(
                MetadataField::Classification,
                raw,
                self.max_classification_length,
            )?,
            None => None,
        }
        .or_else(|| {
            self.rule_value(&tokens, |r| r.classification.as_ref())
                .cloned()
        })
        .or_else(|| self.classification_default.clone());
        let labels = match self.header_labels(headers)? {
            Some(labels) => labels,
            None => self
                .rule_value(&tokens, |r| r.labels.as_ref())
                .unwrap_or(&self.labels_default)
                .clone(),
        };
        Ok(Metadata {
            priority,
            classification,
            labels,
        })
    }

    /// The labels header parsed, or `None` when it is absent or blank.
    fn header_labels(
        &self,
        headers: &[(String, Vec<String>)],
    ) -> Result<Option<Vec<String>>, MetadataError> {
        let Some(raw) = header(headers, &self.labels_header) else {
            return Ok(None);
        };
        if present(MetadataField::Labels, raw)?.is_none() {
            return Ok(None);
        }
        parse_labels(raw, self.max_labels, self.max_label_length).map(Some)
    }

    /// The value `pick` gives of the first rule that matches the subject and sets it.
    fn rule_value<'a, T: ?Sized>(
        &'a self,
        subject: &[&str],
        pick: impl Fn(&'a Rule) -> Option<&'a T>,
    ) -> Option<&'a T> {
        self.rules
            .iter()
            .filter(|r| r.filter.matches(subject))
            .find_map(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(json: &str) -> MetadataPolicy {
        MetadataPolicy::new(&serde_json::from_str(json).unwrap())
    }

    fn seed() -> MetadataPolicy {
        policy(
            r#"{"priority": {"header": "Nats-Sinks-Priority", "default": "routine"},
                "rules": [{"subject": "alerts.>", "priority": "urgent"},
                          {"subject": "training.>", "priority": "routine"}]}"#,
        )
    }

    fn h(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn err(r: Result<Metadata, MetadataError>) -> MetadataError {
        r.unwrap_err()
    }

    #[test]
    fn subject_matching_follows_nats_wildcards() {
        let cases = [
            ("alerts.>", "alerts.sensor.contact", true),
            ("alerts.>", "alerts.x", true),
            ("alerts.>", "alerts", false),
            ("alerts.*", "alerts.x", true),
            ("alerts.*", "alerts.x.y", false),
            ("alerts.*", "alerts", false),
            ("*.b.*", "a.b.c", true),
            ("*.b.*", "a.c.c", false),
            (">", "a", true),
            (">", "a.b.c", true),
            ("*", "a", true),
            ("*", "a.b", false),
            ("a.b", "a.b", true),
            ("a.b", "a.b.c", false),
            ("a.b.c", "a.b", false),
            ("Alerts.>", "alerts.x", false),
            ("a.*.>", "a.b", false),
            ("a.*.>", "a.b.c", true),
        ];
        for (filter, subject, expected) in cases {
            assert_eq!(
                subject_matches(filter, subject),
                expected,
                "{filter} vs {subject}"
            );
        }
    }

    #[test]
    fn seed_rules_fill_a_missing_priority_and_the_header_wins() {
        let p = seed();
        let m = p.apply("alerts.sensor.contact", &[]).unwrap();
        assert_eq!(m.priority.as_deref(), Some("urgent"));
        let m = p
            .apply(
                "alerts.sensor.contact",
                &h(&[("Nats-Sinks-Priority", &["routine"])]),
            )
            .unwrap();
        assert_eq!(m.priority.as_deref(), Some("routine"));
        let m = p.apply("training.day1", &[]).unwrap();
        assert_eq!(m.priority.as_deref(), Some("routine"));
        let m = p.apply("other.subject", &[]).unwrap();
        assert_eq!(m.priority.as_deref(), Some("routine"));
        assert_eq!(m.classification, None);
        assert!(m.labels.is_empty());
    }

    #[test]
    fn header_names_match_case_insensitively_and_the_last_value_wins() {
        let p = seed();
        let m = p
            .apply(
                "alerts.x",
                &h(&[("nats-sinks-priority", &["low", "  high  "])]),
            )
            .unwrap();
        assert_eq!(m.priority.as_deref(), Some("high"));
        let m = p
            .apply(
                "alerts.x",
                &h(&[
                    ("NATS-SINKS-PRIORITY", &["a"]),
                    ("Nats-Sinks-Priority", &["b"]),
                ]),
            )
            .unwrap();
        assert_eq!(m.priority.as_deref(), Some("b"));
    }

    #[test]
    fn a_blank_header_counts_as_absent() {
        let m = seed()
            .apply("alerts.x", &h(&[("Nats-Sinks-Priority", &["   "])]))
            .unwrap();
        assert_eq!(m.priority.as_deref(), Some("urgent"));
    }

    #[test]
    fn first_matching_rule_that_sets_a_field_wins_per_field() {
        let p = policy(
            r#"{"classification": {"default": "public"}, "labels": {"default": ["d"]},
                "rules": [
                {"subject": "a.*", "classification": "internal"},
                {"subject": "a.>", "priority": "p2", "classification": "secret", "labels": ["x", "y"]},
                {"subject": ">", "priority": "p3", "labels": ["z"]}]}"#,
        );
        let m = p.apply("a.b", &[]).unwrap();
        assert_eq!(m.priority.as_deref(), Some("p2"));
        assert_eq!(m.classification.as_deref(), Some("internal"));
        assert_eq!(m.labels, vec!["x", "y"]);
        let m = p.apply("a.b.c", &[]).unwrap();
        assert_eq!(m.classification.as_deref(), Some("secret"));
        let m = p.apply("q", &[]).unwrap();
        assert_eq!(m.priority.as_deref(), Some("p3"));
        assert_eq!(m.classification.as_deref(), Some("public"));
        assert_eq!(m.labels, vec!["z"]);
        let m = policy(r#"{"labels": {"default": ["d"]}}"#)
            .apply("q", &[])
            .unwrap();
        assert_eq!(m.labels, vec!["d"]);
    }

    #[test]
    fn labels_arrive_as_a_semicolon_list_or_a_json_list() {
        let p = policy("{}");
        let cases: [(&str, &[&str]); 6] = [
            ("a;b;c", &["a", "b", "c"]),
            (" a ; ;b;", &["a", "b"]),
            (r#"["a", " b ", "", "c;d"]"#, &["a", "b", "c;d"]),
            ("[]", &[]),
            (";", &[]),
            ("x;x", &["x", "x"]),
        ];
        for (raw, expected) in cases {
            let m = p.apply("s", &h(&[("Jetsink-Labels", &[raw])])).unwrap();
            assert_eq!(m.labels, expected, "{raw}");
        }
    }

    #[test]
    fn a_present_labels_header_overrides_rules_even_when_empty() {
        let p = policy(r#"{"rules": [{"subject": ">", "labels": ["r"]}]}"#);
        let m = p.apply("s", &h(&[("jetsink-labels", &["[]"])])).unwrap();
        assert!(m.labels.is_empty());
        let m = p.apply("s", &h(&[("jetsink-labels", &[""])])).unwrap();
        assert_eq!(m.labels, vec!["r"]);
    }

    #[test]
    fn control_characters_are_refused_in_every_field() {
        let p = policy("{}");
        for (name, value, field) in [
            ("Jetsink-Priority", "urgent\u{7}", MetadataField::Priority),
            ("Jetsink-Priority", "\t", MetadataField::Priority),
            (
                "Jetsink-Classification",
                "se\u{0}cret",
                MetadataField::Classification,
            ),
            ("Jetsink-Labels", "a;b\u{1b}", MetadataField::Labels),
            (
                "Jetsink-Labels",
                r#"["a", "b\u0001"]"#,
                MetadataField::Labels,
            ),
        ] {
            let e = err(p.apply("s", &h(&[(name, &[value])])));
            assert_eq!(e.kind, MetadataErrorKind::ControlCharacter, "{value:?}");
            assert_eq!(e.field, field);
        }
    }

    #[test]
    fn lengths_are_capped() {
        let p = policy(r#"{"max_label_length": 3, "max_classification_length": 4}"#);
        let e = err(p.apply(
            "s",
            &h(&[("Jetsink-Priority", &["p".repeat(257).as_str()])]),
        ));
        assert_eq!(
            (e.field, e.kind, e.actual, e.limit),
            (
                MetadataField::Priority,
                MetadataErrorKind::TooLong,
                257,
                Some(256)
            )
        );
        assert!(p
            .apply(
                "s",
                &h(&[("Jetsink-Priority", &["p".repeat(256).as_str()])])
            )
            .is_ok());
        let e = err(p.apply("s", &h(&[("Jetsink-Classification", &["abcde"])])));
        assert_eq!((e.kind, e.limit), (MetadataErrorKind::TooLong, Some(4)));
        let e = err(p.apply("s", &h(&[("Jetsink-Labels", &["ab;abcd"])])));
        assert_eq!(
            (e.field, e.kind, e.actual),
            (MetadataField::Labels, MetadataErrorKind::TooLong, 4)
        );
        // Characters, not bytes.
        assert!(p
            .apply("s", &h(&[("Jetsink-Classification", &["éééé"])]))
            .is_ok());
    }

    #[test]
    fn label_count_is_capped() {
        let p = policy(r#"{"max_labels": 2}"#);
        assert!(p.apply("s", &h(&[("Jetsink-Labels", &["a;b;;"])])).is_ok());
        let e = err(p.apply("s", &h(&[("Jetsink-Labels", &["a;b;c"])])));
        assert_eq!(
            (e.kind, e.actual, e.limit),
            (MetadataErrorKind::TooManyLabels, 3, Some(2))
        );
    }

    #[test]
    fn malformed_json_labels_are_refused() {
        let p = policy("{}");
        for raw in [
            r#"["a", 1]"#,
            "[a;b]",
            r#"["a""#,
            r#"{"a": 1}x"#,
            "[[\"a\"]]",
        ] {
            let r = p.apply("s", &h(&[("Jetsink-Labels", &[raw])]));
            if raw.starts_with('[') {
                assert_eq!(err(r).kind, MetadataErrorKind::InvalidLabels, "{raw}");
            } else {
                assert!(r.is_ok(), "{raw}");
            }
        }
    }

    #[test]
    fn error_messages_never_contain_the_value() {
        let p = policy("{}");
        let secret = "TOPSECRET";
        for (name, value) in [
            ("Jetsink-Priority", format!("{secret}\u{7}")),
            ("Jetsink-Priority", secret.repeat(40)),
            ("Jetsink-Classification", secret.repeat(40)),
            ("Jetsink-Labels", format!("[\"{secret}\", 1]")),
            ("Jetsink-Labels", vec![secret; 40].join(";")),
        ] {
            let e = err(p.apply("s", &h(&[(name, &[value.as_str()])])));
            let text = e.to_string();
            assert!(!text.contains(secret), "{text}");
            assert!(
                text.starts_with(&format!("{} header rejected:", e.field)),
                "{text}"
            );
        }
        let e = err(p.apply("s", &h(&[("Jetsink-Labels", &["a;b\u{7}"])])));
        assert_eq!(
            e.to_string(),
            "labels header rejected: a value of 4 characters contains a control character"
        );
    }

    #[test]
    fn an_invalid_config_is_refused_before_any_policy_is_built() {
        let cfg: MessageMetadataConfig =
            serde_json::from_str(r#"{"rules": [{"subject": "a..b", "priority": "x"}]}"#).unwrap();
        let issues = crate::config::metadata::validate_metadata(&cfg, "");
        assert!(issues[0].path == "rules[0].subject", "{issues:?}");
    }

    proptest! {
        #[test]
        fn apply_never_panics_and_its_output_obeys_the_limits(
            subject in "[a-z*>.]{0,20}",
            raw in proptest::collection::vec(any::<String>(), 0..4),
        ) {
            let p = policy(r#"{"max_labels": 4, "max_label_length": 8, "rules": [{"subject": "a.>", "priority": "r"}]}"#);
            let headers: Vec<(String, Vec<String>)> = vec![
                ("jetsink-priority".into(), raw.clone()),
                ("JETSINK-LABELS".into(), raw.clone()),
                ("Jetsink-Classification".into(), raw),
            ];
            if let Ok(m) = p.apply(&subject, &headers) {
                for v in m.priority.iter().chain(&m.classification).chain(&m.labels) {
                    prop_assert!(!v.is_empty());
                    prop_assert!(!v.chars().any(char::is_control));
                    prop_assert_eq!(v.trim(), v.as_str());
                }
                prop_assert!(m.labels.len() <= 4);
                prop_assert!(m.labels.iter().all(|l| l.chars().count() <= 8));
            }
        }

        #[test]
        fn a_filter_equal_to_the_subject_matches_and_gt_matches_any_deeper_subject(
            tokens in proptest::collection::vec("[a-z0-9]{1,4}", 1..6),
        ) {
            let subject = tokens.join(".");
            prop_assert!(subject_matches(&subject, &subject));
            let stars = vec!["*"; tokens.len()].join(".");
            prop_assert!(subject_matches(&stars, &subject));
            let first_then_rest = format!("{}.>", tokens[0]);
            prop_assert_eq!(subject_matches(&first_then_rest, &subject), tokens.len() > 1);
            let deeper = format!("{subject}.>");
            prop_assert!(!subject_matches(&deeper, &subject));
        }
    }

    #[test]
    fn the_lane_documents_priority_header_is_read_by_default_after_jetsinks_own() {
        let p = policy("{}");
        let m = p
            .apply("a", &h(&[("Nats-Sinks-Priority", &["urgent"])]))
            .unwrap();
        assert_eq!(m.priority.as_deref(), Some("urgent"));
        let m = p
            .apply(
                "a",
                &h(&[
                    ("Nats-Sinks-Priority", &["urgent"]),
                    ("jetsink-priority", &["routine"]),
                ]),
            )
            .unwrap();
        assert_eq!(
            m.priority.as_deref(),
            Some("routine"),
            "jetsink's own header wins"
        );
    }

    #[test]
    fn a_configured_priority_header_is_the_only_one_read() {
        let p = policy(r#"{"priority": {"header": "X-Prio"}}"#);
        let m = p
            .apply(
                "a",
                &h(&[
                    ("Nats-Sinks-Priority", &["urgent"]),
                    ("Jetsink-Priority", &["x"]),
                ]),
            )
            .unwrap();
        assert_eq!(m.priority, None);
        let m = p.apply("a", &h(&[("x-prio", &["urgent"])])).unwrap();
        assert_eq!(m.priority.as_deref(), Some("urgent"));
    }

    #[test]
    fn without_lanes_a_bad_priority_is_stored_sanitized_instead_of_refusing_the_message() {
        let bad = format!("ur\u{7}gent{}", "x".repeat(300));
        let strict = policy("{}");
        assert!(strict
            .apply("a", &h(&[("Jetsink-Priority", &[bad.as_str()])]))
            .is_err());
        let lenient = policy("{}").checking_priority(false);
        let m = lenient
            .apply("a", &h(&[("Jetsink-Priority", &[bad.as_str()])]))
            .unwrap();
        let stored = m.priority.unwrap();
        assert!(stored.starts_with("ur\u{FFFD}gent"));
        assert_eq!(stored.chars().count(), MAX_PRIORITY_LENGTH);
        // Classification and labels keep their own checks either way.
        assert!(lenient
            .apply("a", &h(&[("Jetsink-Classification", &["\u{1}"])]))
            .is_err());
    }

    proptest! {
        #[test]
        fn a_sanitized_value_is_storable_and_leaves_good_values_alone(
            raw in any::<String>(),
            max in 1usize..300,
        ) {
            let out = sanitize_value(&raw, max);
            if let Some(v) = &out {
                prop_assert!(!v.chars().any(char::is_control));
                prop_assert!(v.chars().count() <= max);
                prop_assert!(!v.trim().is_empty());
            }
            if let Ok(good) = normalize_value(MetadataField::Priority, &raw, max) {
                prop_assert_eq!(out, good);
            }
        }
    }
}
