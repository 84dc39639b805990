//! [`HttpSink`]: the only part of the `http` destination that does I/O. It sends each batch
//! (or each message, several at a time) and turns the answers into one [`SinkError`] class
//! through the pure [`classify`](super::classify).
//!
//! `Retry-After` is honoured here, because the runner's backoff takes no hint from a
//! destination: the answer's delay (capped by `retry_after_max_ms`) is remembered, and the
//! next write first waits whatever of it the runner's own backoff has not already waited.
//! The runner keeps the held messages alive with `+WPI` during that wait as during any
//! write.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use reqwest::Method;
use time::OffsetDateTime;
use tokio::time::Instant;

use super::body::{batch_body, batch_key, message_body};
use super::classify::{classify, retry_after, Verdict};
use super::client::{prepare, Prepared};
use super::config::{HttpConfig, HttpMethod, HttpMode};
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::contract::{Probe, Sink, SinkError};

/// Sends messages to one HTTP endpoint; committed on 2xx.
pub struct HttpSink {
    config: HttpConfig,
    /// The URL without its query, for messages.
    endpoint: String,
    prepared: Option<Prepared>,
    /// Not before this instant: the last `Retry-After`.
    not_before: Option<Instant>,
    /// Per-message mode: keys the endpoint accepted in attempts of a batch that has not
    /// yet committed as a whole, so a retry does not send them again. Cleared when a
    /// write succeeds, so it never holds more than one batch's keys.
    accepted: HashSet<String>,
}

/// What one request came back with.
enum Answer {
    /// The endpoint answered with this status (and maybe a `Retry-After`). The body was
    /// read, at most `max_response_bytes` of it, and is not kept yet.
    Status { status: u16, wait: Option<Duration> },
    /// No answer: connection refused or closed, timeout, TLS failure.
    Failed(String),
}

impl HttpSink {
    /// A sink for `config`; nothing is read or opened until [`Sink::open`].
    pub fn new(config: HttpConfig) -> HttpSink {
        let endpoint = format!("{} {}", config.method.as_str(), config.endpoint());
        HttpSink {
            config,
            endpoint,
            prepared: None,
            not_before: None,
            accepted: HashSet::new(),
        }
    }

    /// Builds the client on first use (a failed build is tried again at the next write).
    fn ensure(&mut self) -> Result<(), SinkError> {
        if self.prepared.is_none() {
            self.prepared = Some(prepare(&self.config)?);
        }
        Ok(())
    }

    /// Remembers a `Retry-After` for the next write.
    fn delay_next(&mut self, wait: Option<Duration>) {
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            let at = Instant::now() + wait;
            self.not_before = Some(self.not_before.map_or(at, |b| b.max(at)));
        }
    }

    async fn write_whole(&mut self, batch: &[Envelope], written_at: &str) -> Result<(), SinkError> {
        let (body, content_type) = batch_body(batch, self.config.batch_format, written_at)
            .map_err(|e| SinkError::transient(format!("cannot encode the batch: {e}")))?;
        let key = batch_key(batch);
        self.ensure()?;
        let Some(p) = self.prepared.as_ref() else {
            return Err(SinkError::transient("http client not ready"));
        };
        let answer = send(p, &self.config, body, content_type, &key).await;
        let what = place(batch);
        match answer {
            Answer::Failed(message) => Err(SinkError::transient(format!("{what}: {message}"))),
            Answer::Status { status, wait } => {
                self.delay_next(wait);
                let index = (batch.len() == 1).then_some(0);
                verdict(status, wait, index, &what)
            }
        }
    }

    async fn write_each(&mut self, batch: &[Envelope], written_at: &str) -> Result<(), SinkError> {
        let concurrency = self.config.concurrency.max(1) as usize;
        self.ensure()?;
        let answers: Vec<(usize, Answer)> = {
            let Some(p) = self.prepared.as_ref() else {
                return Err(SinkError::transient("http client not ready"));
            };
            // Futures made up front by a named function, not a closure over the stream:
            // a closure there is not provably `Send` for every lifetime in `async_trait`.
            let requests: Vec<_> = batch
                .iter()
                .enumerate()
                .filter(|(_, e)| !self.accepted.contains(&e.idempotency_key))
                .map(|(i, e)| send_one(p, &self.config, i, e, written_at))
                .collect();
            stream::iter(requests)
                .buffer_unordered(concurrency)
                .collect()
                .await
        };
        let mut held: Option<(usize, SinkError)> = None;
        let mut refused: Option<(usize, SinkError)> = None;
        let mut failed = 0usize;
        for (i, answer) in answers {
            let what = place(&batch[i..=i]);
            let result = match answer {
                Answer::Failed(message) => Err(SinkError::transient(format!("{what}: {message}"))),
                Answer::Status { status, wait } => {
                    self.delay_next(wait);
                    verdict(status, wait, Some(i), &what)
                }
            };
            match result {
                Ok(()) => {
                    self.accepted.insert(batch[i].idempotency_key.clone());
                }
                Err(e @ SinkError::Permanent { .. }) => {
                    failed += 1;
                    if refused.as_ref().is_none_or(|(j, _)| i < *j) {
                        refused = Some((i, e));
                    }
                }
                Err(e) => {
                    failed += 1;
                    if held.as_ref().is_none_or(|(j, _)| i < *j) {
                        held = Some((i, e));
                    }
                }
            }
        }
        // Anything to hold wins over a refusal: the retry sends only what was not accepted,
        // and a refused message is refused again once the endpoint is back.
        match held.or(refused) {
            None => {
                self.accepted.clear();
                Ok(())
            }
            Some((_, e)) if failed > 1 => Err(e.with_context(&format!(
                "{failed} of {} messages not accepted; the first",
                batch.len()
            ))),
            Some((_, e)) => Err(e),
        }
    }
}

/// `POST https://host/path`-free place of the messages, for error messages: stream and
/// sequences, never content.
fn place(batch: &[Envelope]) -> String {
    match batch {
        [one] => format!("stream {} sequence {}", one.stream, one.stream_sequence),
        _ => {
            let low = batch.iter().map(|e| e.stream_sequence).min().unwrap_or(0);
            let high = batch.iter().map(|e| e.stream_sequence).max().unwrap_or(0);
            let stream = batch.first().map(|e| e.stream.as_str()).unwrap_or("");
            format!(
                "stream {stream} sequences {low}-{high} ({} messages)",
                batch.len()
            )
        }
    }
}

/// The error (or not) of an answered request. `index` names the message of a
/// per-message request (or of a batch of one), so a refusal isolates it at once.
fn verdict(
    status: u16,
    wait: Option<Duration>,
    index: Option<usize>,
    what: &str,
) -> Result<(), SinkError> {
    let retry = wait
        .map(|w| format!(", Retry-After {} ms honoured", w.as_millis()))
        .unwrap_or_default();
    match classify(status) {
        Verdict::Committed => Ok(()),
        Verdict::Transient => Err(SinkError::transient(format!(
            "{what}: HTTP {status}{retry}"
        ))),
        Verdict::Permanent => Err(SinkError::Permanent {
            index,
            message: format!("{what}: refused with HTTP {status}"),
        }),
        Verdict::Misconfigured => Err(SinkError::Misconfigured {
            message: format!(
                "{what}: HTTP {status}; check the URL, method and credentials (redirects are not followed)"
            ),
        }),
        Verdict::Unclassified => Err(SinkError::unclassified(format!(
            "{what}: HTTP status {status}"
        ))),
    }
}

/// Sends message `i` alone.
async fn send_one(
    p: &Prepared,
    c: &HttpConfig,
    i: usize,
    e: &Envelope,
    written_at: &str,
) -> (usize, Answer) {
    let answer = match message_body(e, written_at) {
        Ok((body, ct)) => send(p, c, body, ct, &e.idempotency_key).await,
        Err(err) => Answer::Failed(format!("cannot encode the message: {err}")),
    };
    (i, answer)
}

/// Sends one request and reads at most `max_response_bytes` of the answer.
async fn send(
    p: &Prepared,
    c: &HttpConfig,
    body: Vec<u8>,
    content_type: &'static str,
    key: &str,
) -> Answer {
    let method = match c.method {
        HttpMethod::Post => Method::POST,
        HttpMethod::Put => Method::PUT,
    };
    let request = p
        .client
        .request(method, &c.url)
        .headers(p.headers.clone())
        .header(CONTENT_TYPE, content_type)
        .header(&p.idempotency, key)
        .body(body);
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => return Answer::Failed(failure(&e)),
    };
    let status = response.status().as_u16();
    let wait = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            retry_after(
                v,
                SystemTime::now(),
                Duration::from_millis(c.retry_after_max_ms),
            )
        });
    let max = usize::try_from(c.max_response_bytes).unwrap_or(usize::MAX);
    // Read up to `max` (kept for the job-queue results, the message's `output`; not
    // stored anywhere yet), then the rest is left unread.
    let kept = match crate::files::body::read(response, max, crate::files::body::Over::Cut).await {
        Ok(kept) => kept,
        // The status is known but the answer broke off: not proof of acceptance.
        Err(crate::files::body::BodyError::Read(e)) => {
            return Answer::Failed(format!(
                "answer with HTTP {status} broke off: {}",
                failure(&e)
            ))
        }
        Err(crate::files::body::BodyError::TooLarge { .. }) => Vec::new(),
    };
    drop(kept);
    Answer::Status { status, wait }
}

/// A failed request as text: what went wrong and its cause, without the URL (whose query
/// may carry a token).
fn failure(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_body() || e.is_decode() {
        "body failed"
    } else {
        "request failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {cause}")
    }
}

#[async_trait]
impl Sink for HttpSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        let endpoint = self.endpoint.clone();
        self.ensure().map_err(|e| e.with_context(&endpoint))?;
        tracing::info!(endpoint = %self.endpoint, mode = ?self.config.mode, "http destination ready (the endpoint is first contacted by the first batch)");
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(at) = self.not_before.take() {
            if at > Instant::now() {
                tracing::debug!(endpoint = %self.endpoint, wait_ms = (at - Instant::now()).as_millis() as u64, "waiting out the endpoint's Retry-After");
                tokio::time::sleep_until(at).await;
            }
        }
        let written_at = rfc3339(OffsetDateTime::now_utc());
        let endpoint = self.endpoint.clone();
        let result = match self.config.mode {
            HttpMode::Batch => self.write_whole(batch, &written_at).await,
            HttpMode::Message => self.write_each(batch, &written_at).await,
        };
        result.map_err(|e| e.with_context(&endpoint))
    }

    /// The client settings (secrets, certificates) and a TCP connection to the host; no
    /// request is sent, so the endpoint's answers and TLS are first seen by a write.
    async fn probe(&mut self) -> Result<Probe, SinkError> {
        let endpoint = self.endpoint.clone();
        self.ensure().map_err(|e| e.with_context(&endpoint))?;
        let url = reqwest::Url::parse(&self.config.url).map_err(|e| SinkError::Misconfigured {
            message: format!("url: {e}"),
        })?;
        // An IPv6 host comes bracketed, as in the URL.
        let host = url
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
            .ok_or_else(|| SinkError::Misconfigured {
                message: "url has no host".into(),
            })?;
        let port = url.port_or_known_default().unwrap_or(80);
        let limit = Duration::from_millis(self.config.connect_timeout_ms);
        let place = format!("{host}:{port}");
        match tokio::time::timeout(limit, tokio::net::TcpStream::connect((host.as_str(), port)))
            .await
        {
            Ok(Ok(_)) => Ok(Probe::Ready(format!(
                "{place} accepts TCP connections (TLS and the endpoint's answers are first checked by a write)"
            ))),
            Ok(Err(e)) => Err(SinkError::transient(format!("cannot connect to {place}: {e}"))
                .with_context(&endpoint)),
            Err(_) => Err(SinkError::transient(format!(
                "no TCP connection to {place} within connect_timeout_ms = {}",
                limit.as_millis()
            ))
            .with_context(&endpoint)),
        }
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        self.ensure()
    }
}
