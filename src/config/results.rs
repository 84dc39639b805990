//! The sink's `results` section: job-queue mode. After a job (a message) is committed or
//! dead-lettered, its result is published to `<subject_prefix>.<job id>` and stored by a
//! short-retention results stream *before* the job is acknowledged, so a client waiting
//! for the result gets it or a retriable timeout, never a silent loss.
//!
//! A leaf beside `stream` and `names`: the pipeline and `jetsink submit` both read it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::stream::StorageKind;
use crate::shared::issue::Issue;
use crate::shared::names::{check_subject, is_valid_name};

/// Result publication of one sink.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultsConfig {
    /// Results go to `<subject_prefix>.<job id>`, e.g. `jobs.results`. No wildcards; it
    /// must lie outside the sink's own filter subjects.
    pub subject_prefix: String,
    /// Where a job's id comes from: `"message_id"` (the `Nats-Msg-Id` header, default),
    /// `"idempotency_key"` (the sink's idempotency key), or `{"header": "Job-Id"}`. An id
    /// that is missing or not a single safe subject token refuses the job with error
    /// class `invalid_job_id`.
    #[serde(default)]
    pub job_id: JobIdSource,
    /// Create the results stream at start-up when it is missing, capturing
    /// `<subject_prefix>.>`. Without it a stream must already capture the results.
    #[serde(default)]
    pub create_stream: Option<ResultsStreamConfig>,
    /// Largest `output` kept in a result, in bytes (0 to 1048576); longer output is cut
    /// and flagged `output_truncated`. Default 65536.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
    /// How long to wait for the results stream's acknowledgements, in milliseconds.
    /// Default 5000.
    #[serde(default = "default_publish_timeout_ms")]
    pub publish_timeout_ms: u64,
}

/// Where a job's id comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobIdSource {
    /// The `Nats-Msg-Id` header, which also makes the jobs stream drop a resubmission.
    #[default]
    MessageId,
    /// The sink's idempotency key (`<stream>:<sequence>`, or the `Nats-Msg-Id` with
    /// `delivery.idempotency_key: "message_id"`).
    IdempotencyKey,
    /// A header of the job's choosing (name matched case-insensitively, last value).
    Header(String),
}

/// The results stream jetsink may create.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultsStreamConfig {
    /// Stream name.
    pub name: String,
    /// `file` (default) or `memory`.
    #[serde(default)]
    pub storage: StorageKind,
    /// How long a result is kept, in milliseconds: how late a client may still ask for
    /// it. Default 300000 (five minutes, as in the job-queue design).
    #[serde(default = "default_max_age_ms")]
    pub max_age_ms: u64,
    /// Replicas, 1 to 5. Default 1.
    #[serde(default = "one")]
    pub replicas: usize,
    /// Window in which a second result for the same job (a crash between its publish and
    /// the job's ACK) is dropped, in milliseconds; at most `max_age_ms`. Default 120000,
    /// or `max_age_ms` when that is shorter.
    #[serde(default)]
    pub duplicate_window_ms: Option<u64>,
}

impl ResultsStreamConfig {
    /// The duplicate window in effect.
    pub fn duplicate_window(&self) -> u64 {
        self.duplicate_window_ms
            .unwrap_or(DEFAULT_DUPLICATE_WINDOW_MS.min(self.max_age_ms))
    }
}

impl ResultsConfig {
    /// The subject of job `id`'s result.
    pub fn subject_for(&self, id: &str) -> String {
        format!("{}.{id}", self.subject_prefix)
    }

    /// The filter capturing every result of this sink.
    pub fn capture(&self) -> String {
        format!("{}.>", self.subject_prefix)
    }
}

const DEFAULT_DUPLICATE_WINDOW_MS: u64 = 120_000;
/// The largest `max_output_bytes` accepted: a result must fit a default `max_payload`.
pub const MAX_OUTPUT_BYTES: usize = 1_048_576;

fn default_max_output_bytes() -> usize {
    65_536
}
fn default_publish_timeout_ms() -> u64 {
    5_000
}
fn default_max_age_ms() -> u64 {
    300_000
}
fn one() -> usize {
    1
}

/// Checks a `results` section found at `path`.
pub fn validate(cfg: &ResultsConfig, path: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    let mut push = |key: &str, message: String| {
        out.push(Issue {
            path: format!("{path}.{key}"),
            message,
        })
    };
    let prefix = &cfg.subject_prefix;
    if let Err(why) = check_subject(prefix) {
        push("subject_prefix", format!("{why}, got {prefix:?}"));
    } else if prefix.split('.').any(|t| t == "*" || t == ">") {
        push(
            "subject_prefix",
            format!(
                "must not contain wildcards (a result goes to <prefix>.<job id>), got {prefix:?}"
            ),
        );
    } else if let Some(why) = crate::shared::subject_match::reserved_capture(&format!("{prefix}.>"))
    {
        push(
            "subject_prefix",
            format!("results would go to {prefix}.<job id>, and {why}"),
        );
    }
    if let JobIdSource::Header(h) = &cfg.job_id {
        let bad =
            h.is_empty() || h.len() > 128 || h.chars().any(|c| !c.is_ascii_graphic() || c == ':');
        if bad {
            push(
                "job_id.header",
                format!(
                    "must be a header name (1-128 printable ASCII characters, no ':'), got {h:?}"
                ),
            );
        }
    }
    if cfg.max_output_bytes > MAX_OUTPUT_BYTES {
        push(
            "max_output_bytes",
            format!(
                "must be at most {MAX_OUTPUT_BYTES}, got {}",
                cfg.max_output_bytes
            ),
        );
    }
    if !(100..=60_000).contains(&cfg.publish_timeout_ms) {
        push(
            "publish_timeout_ms",
            format!("must be 100 to 60000, got {}", cfg.publish_timeout_ms),
        );
    }
    if let Some(cs) = &cfg.create_stream {
        if !is_valid_name(&cs.name) {
            push(
                "create_stream.name",
                format!("not a valid stream name: {:?}", cs.name),
            );
        }
        if cs.max_age_ms < 1_000 {
            push(
                "create_stream.max_age_ms",
                format!(
                    "must be at least 1000 (results must outlive a client's wait), got {}",
                    cs.max_age_ms
                ),
            );
        }
        if !(1..=5).contains(&cs.replicas) {
            push(
                "create_stream.replicas",
                format!("must be 1 to 5, got {}", cs.replicas),
            );
        }
        let dw = cs.duplicate_window();
        if dw == 0 || dw > cs.max_age_ms {
            push(
                "create_stream.duplicate_window_ms",
                format!("must be 1 to max_age_ms ({}), got {dw}", cs.max_age_ms),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> ResultsConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_follow_the_job_queue_design() {
        let c = cfg(r#"{"subject_prefix":"jobs.results","create_stream":{"name":"RESULTS"}}"#);
        assert_eq!(c.job_id, JobIdSource::MessageId);
        let cs = c.create_stream.as_ref().unwrap();
        assert_eq!(cs.max_age_ms, 300_000);
        assert_eq!(cs.duplicate_window(), 120_000);
        assert_eq!(c.capture(), "jobs.results.>");
        assert_eq!(c.subject_for("a1"), "jobs.results.a1");
        assert!(validate(&c, "sinks.x.results").is_empty());
    }

    #[test]
    fn the_job_id_source_reads_as_a_string_or_a_header_object() {
        assert_eq!(
            cfg(r#"{"subject_prefix":"r","job_id":"idempotency_key"}"#).job_id,
            JobIdSource::IdempotencyKey
        );
        assert_eq!(
            cfg(r#"{"subject_prefix":"r","job_id":{"header":"Job-Id"}}"#).job_id,
            JobIdSource::Header("Job-Id".into())
        );
    }

    #[test]
    fn bad_values_are_named_by_path() {
        let c = cfg(
            r#"{"subject_prefix":"jobs.*","job_id":{"header":"a b"},"max_output_bytes":2000000,
                "create_stream":{"name":"a.b","max_age_ms":500}}"#,
        );
        let paths: Vec<String> = validate(&c, "r").into_iter().map(|i| i.path).collect();
        for p in [
            "r.subject_prefix",
            "r.job_id.header",
            "r.max_output_bytes",
            "r.create_stream.name",
            "r.create_stream.max_age_ms",
        ] {
            assert!(paths.iter().any(|x| x == p), "{p} in {paths:?}");
        }
    }
}
