//! The client side of job-queue mode, shared by `jetsink submit` and the HTTP job API:
//! publish one job and wait for its result on the results stream, or read a stored result.
//!
//! The wait cannot miss a result: the result subject is subscribed to *before* the job is
//! published, and the results stream is asked for a stored result after publishing, so a
//! result published before the wait began (by an earlier submission of the same id, say)
//! is found too. A timeout is retriable: the job stays queued, and submitting again with
//! the same id is dropped by the jobs stream's duplicate window and returns the result.
//!
//! The whole submission — subscribing, publishing, the PubAck, the lookup and the wait —
//! runs within one budget. A publish the server has not confirmed within it cannot be
//! taken back (the client keeps it queued while disconnected and sends it on reconnect),
//! so that failure says the job may still run and names the id to ask again with.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;

use crate::config::results::{JobIdSource, ResultsConfig};
use crate::config::{IdempotencyKey, SinkSpec};
use crate::envelope::MSG_ID_HEADER;
use crate::jobs::{id, InvalidJobId, JobResult};

/// Why a submission or a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The sink has no `results` section: there is nothing to wait for.
    #[error(
        "sink {0}: no results section (sinks.{0}.results), so it publishes no results to wait for"
    )]
    NoResults(String),
    /// The job id given is not one safe subject token.
    #[error("job id: {0}")]
    BadId(#[from] InvalidJobId),
    /// NATS, the jobs stream or the results stream is unavailable, and the job was not
    /// published (or was, and is stored: then the error says so).
    #[error("{0}")]
    Unavailable(String),
    /// The job was handed to the client but the jobs stream did not confirm it within the
    /// budget: it may be stored already, or be sent when the connection comes back, and
    /// run. Submitting again with the same id (its `Nats-Msg-Id`) is dropped as a duplicate
    /// within the jobs stream's duplicate window, so it never runs twice.
    #[error(
        "the jobs stream did not confirm the job within {ms} ms ({why}); it may still be stored \
         and run: submit again with the same id{}, and it will not run twice",
        .key.as_deref().map(|k| format!(" ({k})")).unwrap_or_default()
    )]
    Unconfirmed {
        /// The id the job was sent with (`Nats-Msg-Id`), when it had one.
        key: Option<String>,
        /// The budget.
        ms: u64,
        /// What failed: the publish, or the wait for the PubAck.
        why: String,
    },
    /// The subject given for the job is not a NATS subject.
    #[error("subject {subject:?}: {why}")]
    BadSubject {
        /// The subject given.
        subject: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The subject given for the job has a wildcard: a job goes to one subject.
    #[error("subject {0:?}: a job is published on a subject without wildcards")]
    WildcardSubject(String),
    /// No subject was given and the sink's filter subjects are not one literal subject.
    #[error("sink {sink}: its filter subject ({}) is not one literal subject", .subjects.join(", "))]
    NoLiteralSubject {
        /// The sink.
        sink: String,
        /// Its filter subjects.
        subjects: Vec<String>,
    },
    /// No result within the timeout; the job stays queued.
    #[error("no result for job {id} within {ms} ms; the job stays queued")]
    TimedOut {
        /// The job id.
        id: String,
        /// The timeout.
        ms: u64,
    },
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

/// What happened after the job was published, whatever the wait found.
pub struct Published {
    /// The job id (given, random, or `<stream>:<sequence>` from the PubAck).
    pub id: String,
    /// Whether the jobs stream dropped it as a duplicate.
    pub duplicate: bool,
}

/// The subject a job for `spec` is published on: `explicit`, or the sink's one filter
/// subject when it has no wildcard; the reason otherwise ([`ClientError::BadSubject`],
/// [`ClientError::WildcardSubject`] or [`ClientError::NoLiteralSubject`]). Pure.
pub fn job_subject(spec: &SinkSpec, explicit: Option<&str>) -> Result<String, ClientError> {
    if let Some(s) = explicit {
        crate::shared::names::check_subject(s).map_err(|why| ClientError::BadSubject {
            subject: s.to_string(),
            why,
        })?;
        if s.split('.').any(|t| t == "*" || t == ">") {
            return Err(ClientError::WildcardSubject(s.to_string()));
        }
        return Ok(s.to_string());
    }
    match spec.source.subjects.as_slice() {
        [one] if !one.split('.').any(|t| t == "*" || t == ">") => Ok(one.clone()),
        _ => Err(ClientError::NoLiteralSubject {
            sink: spec.name.clone(),
            subjects: spec.source.subjects.clone(),
        }),
    }
}

/// A random job id: 32 hex digits.
pub fn random_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..16)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

/// The results section of `spec`, or [`ClientError::NoResults`].
pub fn results_of(spec: &SinkSpec) -> Result<&ResultsConfig, ClientError> {
    spec.results
        .as_ref()
        .ok_or_else(|| ClientError::NoResults(spec.name.clone()))
}

/// The id a job is sent with (`Nats-Msg-Id`), which is also the id to submit it again
/// with: the one given, else a random one — unless the sink reads its job ids from a
/// stream-sequence idempotency key and no id is given, when the job goes without one.
pub fn sent_id(spec: &SinkSpec, given: Option<&str>) -> Option<String> {
    let by_sequence = spec
        .results
        .as_ref()
        .is_some_and(|r| r.job_id == JobIdSource::IdempotencyKey)
        && spec.delivery.idempotency_key == IdempotencyKey::StreamSequence;
    match given {
        Some(g) => Some(g.to_string()),
        None if by_sequence => None,
        None => Some(random_id()),
    }
}

/// The job id of a job sent with `key` as its `Nats-Msg-Id`, when it is known before the
/// PubAck: `key` itself, unless the sink reads its ids from a stream-sequence idempotency
/// key (then only the PubAck tells).
pub fn job_id_before_publish(spec: &SinkSpec, key: &str) -> Option<String> {
    let results = spec.results.as_ref()?;
    known_id(results, spec, Some(key)).ok().flatten()
}

/// Publishes `job` for `spec` and waits for its result, all within `timeout`. `published`
/// is called once the jobs stream stored the job (or dropped it as a duplicate), before
/// the wait, with the id the wait is for.
pub async fn submit(
    js: &jetstream::Context,
    spec: &SinkSpec,
    mut job: Job,
    timeout: Duration,
    published: impl FnOnce(&Published),
) -> Result<Answer, ClientError> {
    let deadline = Instant::now() + timeout;
    let ms = timeout.as_millis() as u64;
    let results = results_of(spec)?;
    if let Some(g) = &job.id {
        id::check(g)?;
    }
    job.id = sent_id(spec, job.id.as_deref());
    let known = known_id(results, spec, job.id.as_deref())?;
    let mut headers = HeaderMap::new();
    for (k, v) in &job.headers {
        headers.append(k.as_str(), v.as_str());
    }
    if let Some(id) = job.id.as_deref() {
        headers.insert(MSG_ID_HEADER, id);
        if let JobIdSource::Header(h) = &results.job_id {
            headers.insert(h.as_str(), id);
        }
    }
    let client = js.client();
    // Subscribe before publishing, so a result published at once cannot be missed.
    let not_sent = |what: &str| {
        ClientError::Unavailable(format!(
            "{what} did not finish within {ms} ms (NATS unreachable?); the job was not sent"
        ))
    };
    let mut sub = match &known {
        Some(id) => Some(
            within(deadline, subscribe(&client, results, id))
                .await
                .ok_or_else(|| not_sent("subscribing to the result"))??,
        ),
        None => None,
    };
    let unconfirmed = |why: String| ClientError::Unconfirmed {
        key: job.id.clone(),
        ms,
        why,
    };
    let publish = async {
        js.publish_with_headers(job.subject.clone(), headers, job.payload.clone())
            .await
            .map_err(|e| format!("publishing to {}: {e}", job.subject))?
            .await
            .map_err(|e| {
                format!(
                    "publishing to {} (sink {}, stream {}): {e}",
                    job.subject, spec.name, spec.source.stream
                )
            })
    };
    let ack = within(deadline, publish)
        .await
        .ok_or_else(|| unconfirmed("no PubAck from the jobs stream".into()))?
        .map_err(unconfirmed)?;
    let id = match known {
        Some(id) => id,
        None => format!("{}:{}", ack.stream, ack.sequence),
    };
    published(&Published {
        id: id.clone(),
        duplicate: ack.duplicate,
    });
    let timed_out = || ClientError::TimedOut { id: id.clone(), ms };
    let sub = match sub.take() {
        Some(s) => s,
        None => within(deadline, subscribe(&client, results, &id))
            .await
            .ok_or_else(timed_out)??,
    };
    let started = Instant::now();
    let body = match within(deadline, stored(js, results, &id))
        .await
        .ok_or_else(timed_out)??
    {
        Some(b) => b,
        None => wait(&id, sub, deadline, ms).await?,
    };
    let result = parse(results, &id, &body)?;
    Ok(Answer {
        body,
        result,
        duplicate: ack.duplicate,
        waited: started.elapsed(),
    })
}

/// A result document, parsed.
pub fn parse(results: &ResultsConfig, id: &str, body: &[u8]) -> Result<JobResult, ClientError> {
    serde_json::from_slice(body).map_err(|e| {
        ClientError::Unavailable(format!(
            "the result at {} is not a jetsink result: {e}",
            results.subject_for(id)
        ))
    })
}

/// The job id before publishing, when it can be known: the id it is sent with, unless the
/// sink reads its ids from a stream-sequence idempotency key, which only the PubAck tells.
fn known_id(
    results: &ResultsConfig,
    spec: &SinkSpec,
    sent: Option<&str>,
) -> Result<Option<String>, ClientError> {
    let by_sequence = results.job_id == JobIdSource::IdempotencyKey
        && spec.delivery.idempotency_key == IdempotencyKey::StreamSequence;
    if by_sequence {
        return Ok(None);
    }
    Ok(Some(sent.map_or_else(random_id, str::to_string)))
}

async fn subscribe(
    client: &async_nats::Client,
    results: &ResultsConfig,
    id: &str,
) -> Result<async_nats::Subscriber, ClientError> {
    client
        .subscribe(results.subject_for(id))
        .await
        .map_err(|e| ClientError::Unavailable(format!("subscribing to results: {e}")))
}

/// The stored result of job `id`, if the results stream holds one.
pub async fn stored(
    js: &jetstream::Context,
    results: &ResultsConfig,
    id: &str,
) -> Result<Option<Bytes>, ClientError> {
    let subject = results.subject_for(id);
    let name = match &results.create_stream {
        Some(cs) => cs.name.clone(),
        None => js.stream_by_subject(subject.clone()).await.map_err(|e| {
            ClientError::Unavailable(format!(
                "no stream captures the results subject {subject}: {e}"
            ))
        })?,
    };
    let stream = js
        .get_stream_no_info(&name)
        .await
        .map_err(|e| ClientError::Unavailable(format!("results stream {name}: {e}")))?;
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => Ok(Some(m.payload)),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(ClientError::Unavailable(format!(
            "reading results stream {name} for {subject}: {e}"
        ))),
    }
}

/// `fut`'s output, or `None` when `deadline` passes first.
async fn within<T>(deadline: Instant, fut: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, fut).await.ok()
}

/// The result that arrives on `sub` before `deadline` (the end of a budget of `ms`).
async fn wait(
    id: &str,
    mut sub: async_nats::Subscriber,
    deadline: Instant,
    ms: u64,
) -> Result<Bytes, ClientError> {
    match within(deadline, sub.next()).await {
        Some(Some(m)) => Ok(m.payload),
        Some(None) => Err(ClientError::Unavailable(
            "the connection closed while waiting for the result; the job is stored and will run"
                .into(),
        )),
        None => Err(ClientError::TimedOut {
            id: id.to_string(),
            ms,
        }),
    }
}
