//! `jetsink submit`: the client side of job-queue mode. Publishes one job to a sink's
//! stream and waits for its result on the results stream, then prints it.
//!
//! The wait cannot miss a result: the result subject is subscribed to *before* the job is
//! published, and the results stream is asked for a stored result after publishing, so a
//! result published before the wait began (by an earlier submit of the same id, say) is
//! found too. A timeout is retriable: the job stays queued, and submitting again with the
//! same `--id` is dropped by the jobs stream's duplicate window and returns the result.
//!
//! Exit codes: 0 committed, 65 dead-lettered, 75 timed out (retriable), 69 NATS or a
//! stream unavailable, 78 bad config or sink, 2 bad arguments.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;

use crate::config::results::{JobIdSource, ResultsConfig};
use crate::config::{Config, IdempotencyKey, LogFormat, SinkSpec};
use crate::envelope::MSG_ID_HEADER;
use crate::exit;
use crate::jobs::{id, JobResult, Status};
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
            SubmitError::TimedOut { .. } => TIMED_OUT,
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
    if let Some(s) = explicit {
        crate::config::names::check_subject(s)
            .map_err(|why| SubmitError::Usage(format!("--subject {s:?}: {why}")))?;
        if s.split('.').any(|t| t == "*" || t == ">") {
            return Err(SubmitError::Usage(format!(
                "--subject {s:?}: a job is published on a subject without wildcards"
            )));
        }
        return Ok(s.to_string());
    }
    match spec.source.subjects.as_slice() {
        [one] if !one.split('.').any(|t| t == "*" || t == ">") => Ok(one.clone()),
        _ => Err(SubmitError::Usage(format!(
            "sink {}: its filter subject ({}) is not one literal subject; pass --subject",
            spec.name,
            spec.source.subjects.join(", ")
        ))),
    }
}

/// A random job id: 32 hex digits.
fn random_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..16)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

/// What a finished submission found.
#[derive(Debug)]
pub struct Answer {
    /// The stored result document, as the results stream holds it.
    pub body: Bytes,
    /// It, parsed.
    pub result: JobResult,
    /// Whether the jobs stream dropped the job as a duplicate of an earlier submission.
    pub duplicate: bool,
    /// How long the wait for the result took.
    pub waited: Duration,
}

/// Publishes `payload` as a job for `spec` and waits up to `timeout` for its result.
pub async fn submit(
    js: &jetstream::Context,
    spec: &SinkSpec,
    job: Job,
    timeout: Duration,
) -> Result<Answer, SubmitError> {
    let Some(results) = spec.results.as_ref() else {
        return Err(SubmitError::Config(format!(
            "sink {}: no results section (sinks.{}.results), so it publishes no results to wait for",
            spec.name, spec.name
        )));
    };
    let known = known_id(results, spec, job.id.as_deref())?;
    let mut headers = HeaderMap::new();
    for (k, v) in &job.headers {
        headers.append(k.as_str(), v.as_str());
    }
    if let Some(id) = job.id.as_deref().or(known.as_deref()) {
        headers.insert(MSG_ID_HEADER, id);
        if let JobIdSource::Header(h) = &results.job_id {
            headers.insert(h.as_str(), id);
        }
    }
    let client = js.client();
    // Subscribe before publishing, so a result published at once cannot be missed.
    let mut sub = match &known {
        Some(id) => Some(subscribe(&client, results, id).await?),
        None => None,
    };
    let ack = js
        .publish_with_headers(job.subject.clone(), headers, job.payload)
        .await
        .map_err(|e| SubmitError::Unavailable(format!("publishing to {}: {e}", job.subject)))?
        .await
        .map_err(|e| {
            SubmitError::Unavailable(format!(
                "publishing to {} (sink {}, stream {}): {e}",
                job.subject, spec.name, spec.source.stream
            ))
        })?;
    let id = match known {
        Some(id) => id,
        None => format!("{}:{}", ack.stream, ack.sequence),
    };
    let sub = match sub.take() {
        Some(s) => s,
        None => subscribe(&client, results, &id).await?,
    };
    let started = Instant::now();
    let body = wait(js, results, &id, sub, timeout).await?;
    let result: JobResult = serde_json::from_slice(&body).map_err(|e| {
        SubmitError::Unavailable(format!(
            "the result at {} is not a jetsink result: {e}",
            results.subject_for(&id)
        ))
    })?;
    Ok(Answer {
        body,
        result,
        duplicate: ack.duplicate,
        waited: started.elapsed(),
    })
}

/// One job to submit.
pub struct Job {
    /// Where it is published.
    pub subject: String,
    /// Its id, when the caller chose one.
    pub id: Option<String>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Bytes,
}

/// The job id before publishing, when it can be known: the one given (or a random one)
/// unless the sink reads its ids from a stream-sequence idempotency key, which only the
/// PubAck tells.
fn known_id(
    results: &ResultsConfig,
    spec: &SinkSpec,
    given: Option<&str>,
) -> Result<Option<String>, SubmitError> {
    if let Some(g) = given {
        id::check(g).map_err(|e| SubmitError::Usage(format!("--id: {e}")))?;
    }
    let by_sequence = results.job_id == JobIdSource::IdempotencyKey
        && spec.delivery.idempotency_key == IdempotencyKey::StreamSequence;
    if by_sequence {
        return Ok(None);
    }
    Ok(Some(given.map_or_else(random_id, str::to_string)))
}

async fn subscribe(
    client: &async_nats::Client,
    results: &ResultsConfig,
    id: &str,
) -> Result<async_nats::Subscriber, SubmitError> {
    client
        .subscribe(results.subject_for(id))
        .await
        .map_err(|e| SubmitError::Unavailable(format!("subscribing to results: {e}")))
}

/// The stored result of job `id`, or the one that arrives within `timeout`.
async fn wait(
    js: &jetstream::Context,
    results: &ResultsConfig,
    id: &str,
    mut sub: async_nats::Subscriber,
    timeout: Duration,
) -> Result<Bytes, SubmitError> {
    let subject = results.subject_for(id);
    let name = match &results.create_stream {
        Some(cs) => cs.name.clone(),
        None => js.stream_by_subject(subject.clone()).await.map_err(|e| {
            SubmitError::Unavailable(format!(
                "no stream captures the results subject {subject}: {e}"
            ))
        })?,
    };
    let stream = js
        .get_stream_no_info(&name)
        .await
        .map_err(|e| SubmitError::Unavailable(format!("results stream {name}: {e}")))?;
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => return Ok(m.payload),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
        Err(e) => {
            return Err(SubmitError::Unavailable(format!(
                "reading results stream {name} for {subject}: {e}"
            )))
        }
    }
    match tokio::time::timeout(timeout, sub.next()).await {
        Ok(Some(m)) => Ok(m.payload),
        Ok(None) => Err(SubmitError::Unavailable(
            "the connection closed while waiting for the result".into(),
        )),
        Err(_) => Err(SubmitError::TimedOut {
            id: id.to_string(),
            ms: timeout.as_millis() as u64,
        }),
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
    submit(&js, spec, job, Duration::from_millis(args.timeout_ms)).await
}

fn read_payload(data: Option<String>, file: Option<&PathBuf>) -> Result<Bytes, SubmitError> {
    if let Some(d) = data {
        return Ok(Bytes::from(d));
    }
    if let Some(p) = file {
        return std::fs::read(p)
            .map(Bytes::from)
            .map_err(|e| SubmitError::Usage(format!("--file {}: {e}", p.display())));
    }
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .map_err(|e| SubmitError::Usage(format!("reading the payload from stdin: {e}")))?;
    Ok(Bytes::from(buf))
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
