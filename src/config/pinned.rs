//! `source.pinned`: active/standby through a consumer priority group with a pinned client
//! (nats-server 2.11+). Several jetsink instances share one durable consumer; the server
//! delivers to one of them (the pinned one) and moves the pin to another when the pinned
//! one has not pulled for `timeout_ms`. A leaf: the source checks import it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::issue::Issues;

/// Active/standby: share the consumer with other instances through a pinned priority group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinnedConfig {
    /// The consumer's priority group every instance pulls in: 1-16 letters, digits, `/`,
    /// `_`, `=` or `-`. Default `jetsink`.
    #[serde(default = "default_group")]
    pub group: String,
    /// The consumer's priority timeout in milliseconds: how long the pinned instance may go
    /// without pulling before the server pins another one. It bounds the takeover after the
    /// active instance dies. 5000 to 3600000, and more than twice
    /// `delivery.batch_timeout_ms` plus 2000 (an idle active instance pulls at least once
    /// per batch timeout). Default 30000, the default AckWait.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for PinnedConfig {
    fn default() -> Self {
        PinnedConfig {
            group: default_group(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_group() -> String {
    "jetsink".into()
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// Shortest priority timeout: below it a write of a few seconds would move the pin.
const MIN_TIMEOUT_MS: u64 = 5_000;
/// Longest priority timeout: an hour without an active instance is no failover.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Whether `g` is a priority group name nats-server accepts (`^[a-zA-Z0-9/_=-]{1,16}$`).
pub fn is_valid_group(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 16
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'=' | b'-'))
}

/// The most a pinned instance can be between pulls while it is idle: a long poll of the
/// batch timeout, with the local grace around it, then the next pull.
pub fn longest_idle_gap_ms(batch_timeout_ms: u64) -> u64 {
    // Saturating: the batch timeout is range-checked elsewhere, but this runs on the
    // value as typed, and a hostile one must give an error, not an overflow.
    batch_timeout_ms.saturating_mul(2).saturating_add(2_000)
}

/// Checks `pinned` at `path` (`sinks.<name>.source.pinned`). `several_consumers` names
/// what gives the sink more than one consumer (buckets, per-lane consumers), if anything:
/// each consumer would pin an instance of its own, so no single instance would be active.
pub(crate) fn check(
    pinned: &PinnedConfig,
    path: &str,
    batch_timeout_ms: u64,
    several_consumers: Option<&str>,
    issues: &mut Issues,
) {
    if !is_valid_group(&pinned.group) {
        issues.push(
            format!("{path}.group"),
            format!(
                "priority group names are 1-16 letters, digits, `/`, `_`, `=` or `-`, got {:?}",
                pinned.group
            ),
        );
    }
    issues.range(
        format!("{path}.timeout_ms"),
        pinned.timeout_ms,
        MIN_TIMEOUT_MS,
        MAX_TIMEOUT_MS,
    );
    let gap = longest_idle_gap_ms(batch_timeout_ms);
    if pinned.timeout_ms <= gap {
        issues.push(
            format!("{path}.timeout_ms"),
            format!(
                "must exceed {gap} (twice delivery.batch_timeout_ms = {batch_timeout_ms}, plus 2000): an idle active instance pulls only once per batch timeout, and would lose the pin between pulls; got {}",
                pinned.timeout_ms
            ),
        );
    }
    if let Some(what) = several_consumers {
        issues.push(
            path.to_string(),
            format!("cannot be combined with {what}: each consumer would pin an instance of its own, so no single instance would be the active one"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn problems(p: &PinnedConfig, batch_timeout_ms: u64, several: Option<&str>) -> Vec<String> {
        let mut issues = Issues::default();
        check(
            p,
            "sinks.a.source.pinned",
            batch_timeout_ms,
            several,
            &mut issues,
        );
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn the_defaults_pass_with_the_default_batch_timeout() {
        let p: PinnedConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(p, PinnedConfig::default());
        assert_eq!(p.group, "jetsink");
        assert_eq!(p.timeout_ms, 30_000);
        assert!(problems(&p, 1_000, None).is_empty());
    }

    #[test]
    fn a_timeout_an_idle_instance_could_outlast_is_refused_naming_the_batch_timeout() {
        let p = PinnedConfig {
            timeout_ms: 20_000,
            ..Default::default()
        };
        assert!(problems(&p, 8_000, None).is_empty());
        let e = problems(&p, 9_000, None);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("sinks.a.source.pinned.timeout_ms: must exceed 20000")
                && e[0].contains("batch_timeout_ms = 9000"),
            "{e:?}"
        );
    }

    #[test]
    fn a_batch_timeout_near_the_integer_limit_is_refused_not_overflowed() {
        // Found by the config mutation test: `2 * u64::MAX` panicked in a debug build.
        let e = problems(&PinnedConfig::default(), u64::MAX, None);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("sinks.a.source.pinned.timeout_ms: must exceed"),
            "{e:?}"
        );
    }

    #[test]
    fn bad_group_names_short_timeouts_and_several_consumers_are_refused_with_paths() {
        let p = PinnedConfig {
            group: "has space".into(),
            timeout_ms: 1_000,
        };
        let e = problems(&p, 10, Some("source.buckets"));
        assert!(
            e.iter()
                .any(|m| m.starts_with("sinks.a.source.pinned.group:")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("sinks.a.source.pinned.timeout_ms: must be between 5000")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m
                    .starts_with("sinks.a.source.pinned: cannot be combined with source.buckets")),
            "{e:?}"
        );
        let strict: Result<PinnedConfig, _> = serde_json::from_str(r#"{"grup": "x"}"#);
        assert!(strict.is_err(), "unknown keys are refused");
    }

    proptest! {
        #[test]
        fn group_names_follow_the_servers_rule(g in "[a-zA-Z0-9/_=-]{1,16}", bad in "[a-z]{0,8}[ .*>][a-z]{0,8}") {
            prop_assert!(is_valid_group(&g));
            prop_assert!(!is_valid_group(&bad));
            let long = format!("{g}{}", "x".repeat(17 - g.len()));
            prop_assert!(!is_valid_group(&long));
        }
    }
}
