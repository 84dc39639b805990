//! The result of one job, as the results stream stores it and `jetsink submit` prints
//! it. Pure: the time is passed in.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::envelope::{rfc3339, Envelope};

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The destination committed it.
    Committed,
    /// It was copied to the dead-letter queue, or the server gave up on it.
    DeadLettered,
}

impl Status {
    /// The metric label and JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Committed => "committed",
            Status::DeadLettered => "dead_lettered",
        }
    }
}

/// One job's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobResult {
    /// The job id.
    pub id: String,
    /// How it ended.
    pub status: Status,
    /// The sink that ran it.
    pub sink: String,
    /// The jobs stream.
    pub stream: String,
    /// The job's sequence in that stream.
    pub sequence: u64,
    /// The delivery that finished it.
    pub delivered: u64,
    /// When it finished (RFC 3339, UTC).
    pub finished_at: String,
    /// Why it was dead-lettered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a worker destination printed (`exec`: its standard output), cut to
    /// `results.max_output_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Set when `output` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
}

/// What a finished job carries besides its envelope.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    /// How it ended.
    pub status: Status,
    /// Why, for a dead-lettered job.
    pub error: Option<&'a str>,
    /// A worker's output, if any.
    pub output: Option<&'a str>,
    /// Whether the worker already cut `output` to its own bound.
    pub output_truncated: bool,
    /// `results.max_output_bytes`.
    pub max_output: usize,
    /// The clock.
    pub at: OffsetDateTime,
}

/// The result of job `id`, carried by `e`.
pub fn build(sink: &str, id: &str, e: &Envelope, f: Finish<'_>) -> JobResult {
    let (output, output_truncated) = match f.output {
        Some(o) => {
            let (kept, cut) = bound(o, f.max_output);
            (Some(kept.to_string()), cut || f.output_truncated)
        }
        None => (None, false),
    };
    JobResult {
        id: id.to_string(),
        status: f.status,
        sink: sink.to_string(),
        stream: e.stream.clone(),
        sequence: e.stream_sequence,
        delivered: e.delivered,
        finished_at: rfc3339(f.at),
        error: f.error.map(|s| bound(s, MAX_ERROR_BYTES).0.to_string()),
        output,
        output_truncated,
    }
}

/// The longest error text a result carries.
const MAX_ERROR_BYTES: usize = 1024;

/// The `Nats-Msg-Id` of job `id`'s result from `sink`: the same for every publish of it,
/// so the results stream drops a second one (published again after a crash between the
/// publish and the job's ACK, or by the advisory path for a job already finished).
pub fn result_msg_id(sink: &str, id: &str) -> String {
    format!("jetsink-result:{sink}:{id}")
}

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub fn bound(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdempotencyKey;
    use crate::envelope::{normalize, Delivery};
    use proptest::prelude::*;

    #[test]
    fn a_result_names_the_job_and_where_it_came_from() {
        let e = normalize(
            "jobs.run",
            Delivery {
                stream: "JOBS",
                consumer: "w",
                stream_sequence: 9,
                consumer_sequence: 3,
                delivered: 2,
                published: OffsetDateTime::UNIX_EPOCH,
            },
            Vec::<(&str, &str)>::new(),
            bytes::Bytes::new(),
            IdempotencyKey::StreamSequence,
        );
        let r = build(
            "grader",
            "j1",
            &e,
            Finish {
                status: Status::DeadLettered,
                error: Some("refused"),
                output: Some("héllo"),
                output_truncated: false,
                max_output: 2,
                at: OffsetDateTime::UNIX_EPOCH,
            },
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["status"], "dead_lettered");
        assert_eq!(v["sequence"], 9);
        assert_eq!(v["delivered"], 2);
        assert_eq!(v["error"], "refused");
        assert_eq!(v["output"], "h");
        assert_eq!(v["output_truncated"], true);
        assert_eq!(v["finished_at"], "1970-01-01T00:00:00.000000000Z");
        let back: JobResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        assert_eq!(result_msg_id("grader", "j1"), "jetsink-result:grader:j1");
    }

    proptest! {
        #[test]
        fn output_is_cut_at_a_character_boundary_within_the_bound(s in "\\PC{0,64}", max in 0usize..80) {
            let (kept, cut) = bound(&s, max);
            prop_assert!(kept.len() <= max || !cut && kept.len() == s.len());
            prop_assert!(s.starts_with(kept));
            prop_assert_eq!(cut, kept.len() < s.len());
        }
    }
}
