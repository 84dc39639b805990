//! Publishes job results to the results stream and waits for it to store them — the
//! step the pipeline takes between a job's commit (or dead-letter copy) and its ACK.
//!
//! A batch's results are published back to back and their PubAcks awaited together, so a
//! batch costs one round trip, not one per job. Each result carries a `Nats-Msg-Id`
//! derived from its job, so publishing one twice stores it once.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::HeaderMap;
use prometheus::IntCounter;
use time::OffsetDateTime;

use super::id::{job_id, InvalidJobId};
use super::metrics::JobMetrics;
use super::result::{build, result_msg_id, Finish, Status};
use crate::config::results::ResultsConfig;
use crate::config::IdempotencyKey;
use crate::envelope::{Envelope, MSG_ID_HEADER};
use crate::nats::own_stream::{self, CreateStreamFailed, OwnStream};
use crate::sinks::Output;

/// The header carrying a result's status, so a reader can tell outcomes apart without
/// parsing the body.
pub const STATUS_HEADER: &str = "Jetsink-Job-Status";

/// The result publisher of one sink; cheap to clone.
#[derive(Clone)]
pub struct ResultPublisher {
    sink: Arc<str>,
    cfg: Arc<ResultsConfig>,
    js: jetstream::Context,
    committed: IntCounter,
    dead_lettered: IntCounter,
    failures: IntCounter,
    key: IdempotencyKey,
}

/// One job whose result is due: its envelope and id.
pub type Job<'a> = (&'a Envelope, &'a str);

impl ResultPublisher {
    /// A publisher for `sink`'s results on `js`, counting in `metrics`; `key` is the
    /// sink's `delivery.idempotency_key`, for envelopes rebuilt outside the pipeline.
    pub fn new(
        sink: &str,
        cfg: ResultsConfig,
        js: jetstream::Context,
        metrics: &JobMetrics,
        key: IdempotencyKey,
    ) -> ResultPublisher {
        ResultPublisher {
            sink: sink.into(),
            cfg: Arc::new(cfg),
            js,
            committed: metrics.committed.clone(),
            dead_lettered: metrics.dead_lettered.clone(),
            failures: metrics.failures.clone(),
            key,
        }
    }

    /// The settings.
    pub fn config(&self) -> &ResultsConfig {
        &self.cfg
    }

    /// The sink's idempotency key setting, for envelopes rebuilt from the stream (the
    /// advisory path), so their job id is the one the pipeline would have read.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.key
    }

    /// The job id of `e`, read where `results.job_id` says.
    pub fn job_id(&self, e: &Envelope) -> Result<String, InvalidJobId> {
        job_id(e, &self.cfg.job_id)
    }

    /// Creates the results stream when the config asks for it; `setting` is the JSON path
    /// of its `create_stream` section, for the error.
    pub async fn ensure_stream(&self, setting: String) -> Result<(), CreateStreamFailed> {
        let Some(cs) = &self.cfg.create_stream else {
            return Ok(());
        };
        let own = OwnStream {
            name: cs.name.clone(),
            subject: self.cfg.capture(),
            storage: cs.storage,
            max_age: Duration::from_millis(cs.max_age_ms),
            replicas: cs.replicas,
            duplicate_window: Duration::from_millis(cs.duplicate_window()),
        };
        own_stream::ensure(&self.js, &own, &self.sink, "results", setting).await
    }

    /// Publishes one result per job and waits for the results stream to store them all;
    /// for each job, whether its result is stored (only those may be ACKed).
    pub async fn publish_all(
        &self,
        jobs: &[Job<'_>],
        status: Status,
        error: Option<&str>,
    ) -> Vec<bool> {
        self.publish_with(jobs, status, error, &[]).await
    }

    /// [`ResultPublisher::publish_all`] for committed jobs, with what each job's worker
    /// produced (`outputs[i]` for `jobs[i]`; missing entries have none).
    pub async fn publish_committed(
        &self,
        jobs: &[Job<'_>],
        outputs: &[Option<Output>],
    ) -> Vec<bool> {
        self.publish_with(jobs, Status::Committed, None, outputs)
            .await
    }

    async fn publish_with(
        &self,
        jobs: &[Job<'_>],
        status: Status,
        error: Option<&str>,
        outputs: &[Option<Output>],
    ) -> Vec<bool> {
        let at = OffsetDateTime::now_utc();
        let mut pending = Vec::with_capacity(jobs.len());
        for (i, (e, id)) in jobs.iter().enumerate() {
            let output = outputs.get(i).and_then(Option::as_ref);
            let finish = Finish {
                status,
                error,
                output: output.map(|o| o.text.as_str()),
                output_truncated: output.is_some_and(|o| o.truncated),
                max_output: self.cfg.max_output_bytes,
                at,
            };
            let result = build(&self.sink, id, e, finish);
            let body = match serde_json::to_vec(&result) {
                Ok(b) => b,
                Err(err) => {
                    pending.push(Err(format!("cannot encode the result: {err}")));
                    continue;
                }
            };
            let mut headers = HeaderMap::new();
            headers.insert(MSG_ID_HEADER, result_msg_id(&self.sink, id).as_str());
            headers.insert(STATUS_HEADER, status.as_str());
            let sent = self
                .js
                .publish_with_headers(self.cfg.subject_for(id), headers, body.into())
                .await;
            pending.push(sent.map_err(|err| err.to_string()));
        }
        let wait = Duration::from_millis(self.cfg.publish_timeout_ms);
        let acks = futures::future::join_all(pending.into_iter().map(|p| async move {
            match p {
                Ok(ack) => match tokio::time::timeout(wait, ack).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no acknowledgement within {} ms", wait.as_millis())),
                },
                Err(e) => Err(e),
            }
        }))
        .await;
        let counter = match status {
            Status::Committed => &self.committed,
            Status::DeadLettered => &self.dead_lettered,
        };
        acks.into_iter()
            .zip(jobs)
            .map(|(ack, (e, id))| match ack {
                Ok(()) => {
                    counter.inc();
                    true
                }
                Err(err) => {
                    self.failures.inc();
                    tracing::error!(
                        sink = %self.sink,
                        stream = %e.stream,
                        stream_sequence = e.stream_sequence,
                        job_id = %id,
                        subject = %self.cfg.subject_for(id),
                        error = %err,
                        "result publish failed; the job stays unacked and will be redelivered"
                    );
                    false
                }
            })
            .collect()
    }

    /// Publishes the `dead_lettered` result of `e`, when it has a job id; true when it is
    /// stored or `e` has no usable id (there is nobody to tell).
    pub async fn dead_lettered(&self, e: &Envelope, error: &str) -> bool {
        let Ok(id) = self.job_id(e) else {
            return true;
        };
        self.publish_all(&[(e, id.as_str())], Status::DeadLettered, Some(error))
            .await
            .first()
            .copied()
            .unwrap_or(false)
    }
}
