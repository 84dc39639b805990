//! `jetsink submit`: the command-line client of job-queue mode. Publishes one job to a
//! sink's stream and waits for its result on the results stream, then prints it. The
//! publish and the wait are [`crate::jobs::client`], which the HTTP job API shares: a
//! result published before the wait began is found, and a timeout is retriable (submit
//! again with the same `--id`).
//!
//! Exit codes: 0 committed, 65 dead-lettered, 75 timed out (retriable), 69 NATS or a
//! stream unavailable, 78 bad config or sink, 2 bad arguments.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;

use crate::config::{Config, LogFormat, SinkSpec};
use crate::exit;
use crate::jobs::client::{self, Answer, ClientError, Job};
use crate::jobs::Status;
use crate::metrics::Metrics;

/// Exit code of a dead-lettered job (`EX_DATAERR`: the job itself was refused).
pub const DEAD_LETTERED: u8 = 65;
/// Exit code of a wait that ran out (`EX_TEMPFAIL`: try again with the same id).
pub const TIMED_OUT: u8 = 75;

/// `jetsink submit` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink that runs the job (it must have a `results` section).
    #[arg(long)]
    sink: String,
    /// The job's payload.
    #[arg(long, conflicts_with = "file")]
    data: Option<String>,
    /// Read the payload from this file (without --data or --file: from stdin).
    #[arg(long)]
    file: Option<PathBuf>,
    /// The job id (one subject token); a random one when absent. Sent as `Nats-Msg-Id`,
    /// so submitting the same id again does not run the job twice.
    #[arg(long)]
    id: Option<String>,
    /// How long to wait for the result, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// A header `K=V` to send with the job; repeatable.
    #[arg(long = "header", value_name = "K=V")]
    headers: Vec<String>,
    /// Subject to publish on; default the sink's filter subject when it has no wildcard.
    #[arg(long)]
    subject: Option<String>,
}

/// Why a submission failed, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The config, the sink or its `results` section does not allow a submission.
    #[error("{0}")]
    Config(String),
    /// A flag's value is unusable.
    #[error("{0}")]
    Usage(String),
    /// NATS, the jobs stream or the results stream is unavailable.
    #[error("{0}")]
    Unavailable(String),
    /// The jobs stream did not confirm the job within the timeout: it may run.
    #[error("{0}")]
    Unconfirmed(String),
    /// No result within the timeout.
    #[error("no result for job {id} within {ms} ms; the job stays queued: submit again with --id {id} to get its result")]
    TimedOut {
        /// The job id.
        id: String,
        /// The timeout.
        ms: u64,
    },
}

impl SubmitError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            SubmitError::Config(_) => exit::CONFIG,
            SubmitError::Usage(_) => exit::USAGE,
            SubmitError::Unavailable(_) => exit::UNAVAILABLE,
            SubmitError::TimedOut { .. } | SubmitError::Unconfirmed(_) => TIMED_OUT,
        }
    }
}

/// Parses a `K=V` header flag. Pure.
pub fn parse_header(flag: &str) -> Result<(String, String), String> {
    let (k, v) = flag
        .split_once('=')
        .ok_or_else(|| format!("--header {flag:?}: expected K=V"))?;
    if k.is_empty() || k.len() > 128 || !k.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
        return Err(format!(
            "--header {flag:?}: the name must be 1-128 printable ASCII characters without ':'"
        ));
    }
    if v.chars().any(|c| c == '\r' || c == '\n') {
        return Err(format!(
            "--header {k}: the value must not contain a line break"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// The subject a job for `spec` is published on: `explicit`, or the sink's one filter
/// subject when it has no wildcard. Pure.
pub fn job_subject(spec: &SinkSpec, explicit: Option<&str>) -> Result<String, SubmitError> {
    Ok(client::job_subject(spec, explicit)?)
}

impl From<ClientError> for SubmitError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::NoResults(_) => SubmitError::Config(e.to_string()),
            ClientError::BadId(why) => SubmitError::Usage(format!("--id: {why}")),
            ClientError::Unavailable(m) => SubmitError::Unavailable(m),
            ClientError::TimedOut { id, ms } => SubmitError::TimedOut { id, ms },
            // Only a `--subject` given is checked; without one the sink's filter is.
            ClientError::BadSubject { .. } | ClientError::WildcardSubject(_) => {
                SubmitError::Usage(format!("--{e}"))
            }
            ClientError::NoLiteralSubject { .. } => {
                SubmitError::Usage(format!("{e}; pass --subject"))
            }
            ClientError::Unconfirmed { key, ms, why } => SubmitError::Unconfirmed(match key {
                Some(k) => format!(
                    "the jobs stream did not confirm job {k} within {ms} ms ({why}); it may still \
                     be stored and run: submit again with --id {k}, and it will not run twice"
                ),
                None => format!(
                    "the jobs stream did not confirm the job within {ms} ms ({why}); it may still \
                     be stored and run, and without --id a second submission is a second job"
                ),
            }),
        }
    }
}

/// `jetsink submit`: prints the result JSON on stdout, and how long the wait took on
/// stderr (the command keeps no metrics registry).
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    match prepare_and_submit(args).await {
        Ok(a) => {
            super::emit(&String::from_utf8_lossy(&a.body));
            eprintln!(
                "job {} {}{} (waited {} ms)",
                a.result.id,
                a.result.status.as_str(),
                if a.duplicate {
                    ", submitted before"
                } else {
                    ""
                },
                a.waited.as_millis()
            );
            match a.result.status {
                Status::Committed => exit::OK,
                Status::DeadLettered => DEAD_LETTERED,
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

async fn prepare_and_submit(args: Args) -> Result<Answer, SubmitError> {
    let cfg = Config::load(&args.config).map_err(|e| SubmitError::Config(e.to_string()))?;
    let Some(spec) = cfg.sinks.iter().find(|s| s.name == args.sink) else {
        return Err(SubmitError::Config(format!(
            "{}: no sink named {:?}",
            args.config.display(),
            args.sink
        )));
    };
    if spec.results.is_none() {
        return Err(SubmitError::Config(format!(
            "{}: sink {} has no results section",
            args.config.display(),
            spec.name
        )));
    }
    let subject = job_subject(spec, args.subject.as_deref())?;
    let headers = args
        .headers
        .iter()
        .map(|h| parse_header(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(SubmitError::Usage)?;
    let payload = read_payload(args.data, args.file.as_ref())?;
    let metrics = Metrics::new();
    let links = crate::nats::Links::new(&metrics);
    let conn = crate::nats::connect(&cfg.nats, "submit", &links, &metrics)
        .await
        .map_err(|e| SubmitError::Unavailable(e.to_string()))?;
    // A one-shot command: the connection closes when it is done.
    links.closing();
    let js = jetstream::new(conn.client);
    let job = Job {
        subject,
        id: args.id,
        headers,
        payload,
    };
    Ok(client::submit(
        &js,
        spec,
        job,
        Duration::from_millis(args.timeout_ms),
        |_| {},
    )
    .await?)
}

fn read_payload(data: Option<String>, file: Option<&PathBuf>) -> Result<Bytes, SubmitError> {
    if let Some(d) = data {
        return Ok(Bytes::from(d));
    }
    if let Some(p) = file {
        return crate::files::read(p, crate::files::Kind::Payload)
            .map(Bytes::from)
            .map_err(|e| SubmitError::Usage(format!("--file: {e}")));
    }
    crate::files::read_stream(
        std::io::stdin().lock(),
        crate::files::Kind::Payload,
        "stdin",
    )
    .map(Bytes::from)
    .map_err(|e| SubmitError::Usage(format!("the payload: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_flags_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_header("Job-Kind=a=b").unwrap(),
            ("Job-Kind".into(), "a=b".into())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header("=v").is_err());
        assert!(parse_header("a b=v").is_err());
        assert!(parse_header("k=a\r\nX: y").is_err());
    }

    fn sink(subjects: &str) -> SinkSpec {
        let text = format!(
            r#"{{"nats": {{"servers": ["nats://127.0.0.1:4222"]}},
                "sinks": {{"jobs": {{
                    "source": {{"stream": "S", "consumer": "c", "subjects": {subjects}}},
                    "destination": {{"type": "file", "directory": "d"}}}}}}}}"#
        );
        let mut cfg = crate::config::Config::from_json_str(&text).unwrap();
        cfg.sinks.remove(0)
    }

    #[test]
    fn the_job_subject_is_the_flag_or_the_one_literal_filter_and_refusals_name_it() {
        let literal = sink(r#"["jobs.run"]"#);
        assert_eq!(job_subject(&literal, None).unwrap(), "jobs.run");
        assert_eq!(job_subject(&literal, Some("jobs.x")).unwrap(), "jobs.x");
        let usage = |r: Result<String, SubmitError>| match r {
            Err(SubmitError::Usage(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            usage(job_subject(&literal, Some("jobs.*"))),
            r#"--subject "jobs.*": a job is published on a subject without wildcards"#
        );
        assert_eq!(
            usage(job_subject(&literal, Some("a..b"))),
            r#"--subject "a..b": subject has an empty token"#
        );
        assert_eq!(
            usage(job_subject(&sink(r#"["jobs.*", "x"]"#), None)),
            "sink jobs: its filter subject (jobs.*, x) is not one literal subject; pass --subject"
        );
    }

    proptest! {
        #[test]
        fn an_accepted_header_is_safe_on_the_wire(flag in "\\PC{0,40}") {
            if let Ok((k, v)) = parse_header(&flag) {
                prop_assert!(!k.is_empty() && !k.contains(':'));
                prop_assert!(k.bytes().all(|b| b.is_ascii_graphic()));
                prop_assert!(!v.contains('\r') && !v.contains('\n'));
                prop_assert_eq!(format!("{k}={v}"), flag);
            }
        }
    }
}
