//! The `dead_letter` section: where refused messages are copied before they are ACKed.
//!
//! A message the destination (or the metadata rules) refuses for good must neither block
//! the stream nor vanish. With a dead-letter queue it is published, with its error, to a
//! NATS subject captured by a stream, and only after that publish is acknowledged is the
//! original ACKed (or TERMed). Without one it stays unacked and comes back.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::stream::StorageKind;
use crate::shared::issue::Issue;
use crate::shared::names::{check_subject, is_valid_name};

/// Dead-letter settings of one sink.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Publish refused messages to the dead-letter subject. Default true when the section
    /// is present.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Subject of the copies. `{sink}` becomes the sink name and `{subject}` (only as the
    /// last token) the original subject. Default `jetsink.dlq.{sink}`.
    #[serde(default = "default_subject")]
    pub subject: String,
    /// Create this stream at start-up when it is missing, capturing the dead-letter
    /// subjects. Without it a stream must already capture them.
    #[serde(default)]
    pub create_stream: Option<DeadLetterStreamConfig>,
    /// Copy the original payload. Default true; false stores the error context only.
    #[serde(default = "yes")]
    pub include_payload: bool,
    /// Copy the original headers. Default true.
    #[serde(default = "yes")]
    pub include_headers: bool,
    /// After the copy is stored, TERM the original instead of ACKing it, so the server
    /// records the termination (and emits its advisory). Default false.
    #[serde(default)]
    pub ack_term_after_publish: bool,
    /// Deliveries a permanently refused message gets before it is dead-lettered, 1 to 100;
    /// earlier refusals hand it back with a delay in case the cause passes. Capped by the
    /// consumer's `max_deliver`. Default 1 (dead-letter at once).
    #[serde(default = "one")]
    pub max_attempts: u32,
    /// Longest error text stored in `Jetsink-Error`, 64 to 4096 characters. Default 1024.
    #[serde(default = "default_max_error_length")]
    pub max_error_length: usize,
    /// How long to wait for the dead-letter stream's acknowledgement, in milliseconds.
    /// Default 5000.
    #[serde(default = "default_publish_timeout_ms")]
    pub publish_timeout_ms: u64,
}

/// The dead-letter stream jetsink may create.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterStreamConfig {
    /// Stream name.
    pub name: String,
    /// `file` (default) or `memory`.
    #[serde(default)]
    pub storage: StorageKind,
    /// Maximum age of a dead letter in milliseconds; 0 keeps them. Default 0.
    #[serde(default)]
    pub max_age_ms: u64,
    /// Replicas, 1 to 5. Default 1.
    #[serde(default = "one_usize")]
    pub replicas: usize,
    /// Window in which a repeated copy of the same original (same `Nats-Msg-Id`) is
    /// dropped, in milliseconds. Default 3600000 (one hour).
    #[serde(default = "default_dlq_duplicate_window_ms")]
    pub duplicate_window_ms: u64,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        DeadLetterConfig {
            enabled: true,
            subject: default_subject(),
            create_stream: None,
            include_payload: true,
            include_headers: true,
            ack_term_after_publish: false,
            max_attempts: 1,
            max_error_length: default_max_error_length(),
            publish_timeout_ms: default_publish_timeout_ms(),
        }
    }
}

impl DeadLetterConfig {
    /// The subject of the copy of a message from `subject` refused by sink `sink`.
    pub fn subject_for(&self, sink: &str, subject: &str) -> String {
        self.subject
            .replace("{sink}", sink)
            .replace("{subject}", subject)
    }

    /// The filter that captures every copy this sink publishes.
    pub fn capture(&self, sink: &str) -> String {
        let s = self.subject.replace("{sink}", sink);
        match s.strip_suffix(".{subject}") {
            Some(prefix) => format!("{prefix}.>"),
            None => s,
        }
    }
}

/// Checks a `dead_letter` section found at `path`.
pub fn validate(cfg: &DeadLetterConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let mut push = |key: &str, message: String| {
        out.push(Issue {
            path: format!("{path}.{key}"),
            message,
        })
    };
    let without_subject = cfg
        .subject
        .strip_suffix(".{subject}")
        .unwrap_or(&cfg.subject);
    if without_subject.contains("{subject}") {
        push(
            "subject",
            format!(
                "`{{subject}}` may only be the last token, got {:?}",
                cfg.subject
            ),
        );
    } else {
        let probe = without_subject.replace("{sink}", "sink");
        if let Err(why) = check_subject(&probe) {
            push("subject", format!("{why}: {:?}", cfg.subject));
        } else if probe.contains('*') || probe.contains('>') {
            push(
                "subject",
                format!("must not contain wildcards, got {:?}", cfg.subject),
            );
        } else if let Some(why) =
            crate::shared::subject_match::reserved_capture(&cfg.capture("sink"))
        {
            push(
                "subject",
                format!(
                    "dead-letter copies would go to {}, and {why}",
                    cfg.capture("sink")
                ),
            );
        }
    }
    if !(1..=100).contains(&cfg.max_attempts) {
        push(
            "max_attempts",
            format!("must be between 1 and 100, got {}", cfg.max_attempts),
        );
    }
    if !(64..=4096).contains(&cfg.max_error_length) {
        push(
            "max_error_length",
            format!("must be between 64 and 4096, got {}", cfg.max_error_length),
        );
    }
    if !(100..=600_000).contains(&cfg.publish_timeout_ms) {
        push(
            "publish_timeout_ms",
            format!(
                "must be between 100 and 600000, got {}",
                cfg.publish_timeout_ms
            ),
        );
    }
    if let Some(cs) = &cfg.create_stream {
        if !is_valid_name(&cs.name) {
            push(
                "create_stream.name",
                format!("not a valid stream name: {:?}", cs.name),
            );
        }
        if cs.max_age_ms != 0 && cs.duplicate_window_ms > cs.max_age_ms {
            push(
                "create_stream.duplicate_window_ms",
                format!(
                    "must not exceed max_age_ms ({}), got {}",
                    cs.max_age_ms, cs.duplicate_window_ms
                ),
            );
        }
        if cs.duplicate_window_ms > 604_800_000 {
            push(
                "create_stream.duplicate_window_ms",
                format!("must be at most 604800000, got {}", cs.duplicate_window_ms),
            );
        }
        if !(1..=5).contains(&cs.replicas) {
            push(
                "create_stream.replicas",
                format!("must be between 1 and 5, got {}", cs.replicas),
            );
        }
    }
    out
}

fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}
fn one_usize() -> usize {
    1
}
fn default_subject() -> String {
    "jetsink.dlq.{sink}".into()
}
fn default_max_error_length() -> usize {
    1024
}
fn default_publish_timeout_ms() -> u64 {
    5_000
}
fn default_dlq_duplicate_window_ms() -> u64 {
    3_600_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_and_capture_covers_every_copy() {
        let c = DeadLetterConfig {
            subject: "dlq.{sink}.{subject}".into(),
            ..Default::default()
        };
        assert_eq!(
            c.subject_for("orders", "orders.new.eu"),
            "dlq.orders.orders.new.eu"
        );
        assert_eq!(c.capture("orders"), "dlq.orders.>");
        let d = DeadLetterConfig::default();
        assert_eq!(d.subject_for("a", "x.y"), "jetsink.dlq.a");
        assert_eq!(d.capture("a"), "jetsink.dlq.a");
    }

    #[test]
    fn bad_settings_are_reported_with_their_paths() {
        let c = DeadLetterConfig {
            subject: "dlq.{subject}.x".into(),
            max_attempts: 0,
            ..Default::default()
        };
        let issues: Vec<String> = validate(&c, "sinks.a.dead_letter")
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert!(
            issues.iter().any(|i| i.starts_with(
                "sinks.a.dead_letter.subject: `{subject}` may only be the last token"
            )),
            "{issues:?}"
        );
        assert!(
            issues.contains(
                &"sinks.a.dead_letter.max_attempts: must be between 1 and 100, got 0".to_string()
            ),
            "{issues:?}"
        );
        let w = DeadLetterConfig {
            subject: "dlq.*".into(),
            ..Default::default()
        };
        assert!(!validate(&w, "d").is_empty());
    }

    #[test]
    fn the_default_is_valid() {
        assert!(validate(&DeadLetterConfig::default(), "d").is_empty());
    }
}
