//! [`NatsRepublishSink`]: the I/O of the republish destination — its own connection, the
//! checks of the target stream at open, and one pipelined publish per batch.

use std::collections::HashSet;
use std::future::IntoFuture;
use std::time::Duration;

use async_nats::jetstream::context::{Context, ContextBuilder, GetStreamErrorKind, PublishError};
use async_trait::async_trait;

use super::atomic::{self, Outgoing};
use super::batch::{mark, verdict, Verdict};
use super::classify::{classify, Outcome};
use super::config::NatsRepublishConfig;
use super::copy::headers;
use super::template::{Template, TemplateError};
use crate::envelope::Envelope;
use crate::metrics::Metrics;
use crate::nats::connect::{connect, Links};
use crate::nats::inbox::Inbox;
use crate::nats::server_version::ServerVersion;
use crate::shared::subject_match::overlap;
use crate::sinks::contract::{Feed, Probe, Sink, SinkError};

/// PubAcks one connection may wait for at once: two full batches (the largest batch is
/// 10,000), since the copies of a failed batch keep their slots until their PubAck
/// timeout while the retry publishes again.
const MAX_INFLIGHT: usize = 32_768;

/// JetStream API error code: stream not found.
const STREAM_NOT_FOUND: u64 = 10059;

/// Publishes each batch to the target stream and reports it committed once every copy
/// has its PubAck.
pub struct NatsRepublishSink {
    config: NatsRepublishConfig,
    template: Result<Template, TemplateError>,
    feed: Feed,
    js: Option<Context>,
    /// The state of `js`'s connection: a client that gave up reconnecting is replaced at
    /// the next write, and one closed by dropping the sink is expected.
    links: Option<Links>,
    /// Where the replies of atomic batches arrive, once the first one is sent.
    inbox: Option<Inbox>,
    /// Source streams already checked for a loop on the target.
    checked: HashSet<String>,
    subject: String,
}

impl Drop for NatsRepublishSink {
    /// The client's `Closed` event that follows is jetsink's own doing, not a failure.
    fn drop(&mut self) {
        if let Some(links) = &self.links {
            links.closing();
        }
    }
}

impl NatsRepublishSink {
    /// A sink for `config`; nothing is connected before `open`.
    pub fn new(config: NatsRepublishConfig) -> Self {
        let template = Template::parse(&config.subject);
        NatsRepublishSink {
            config,
            template,
            feed: Feed::default(),
            js: None,
            links: None,
            inbox: None,
            checked: HashSet::new(),
            subject: String::new(),
        }
    }

    fn where_(&self) -> String {
        format!(
            "stream {} at {}",
            self.config.stream,
            self.config.servers.join(",")
        )
    }

    fn template(&self) -> Result<&Template, SinkError> {
        self.template
            .as_ref()
            .map_err(|e| SinkError::Misconfigured {
                message: format!("subject template {:?}: {e}", self.config.subject),
            })
    }

    /// The filter every copy's subject matches.
    fn filter(&self) -> Result<String, SinkError> {
        Ok(self.template()?.filter(&self.feed.sink))
    }

    async fn connect(&mut self) -> Result<Context, SinkError> {
        let given_up = self
            .links
            .as_ref()
            .is_some_and(|l| l.gone().borrow().is_some());
        if given_up {
            self.js = None;
            self.inbox = None;
            self.links = None;
        }
        if let Some(js) = &self.js {
            return Ok(js.clone());
        }
        // A private registry: the target connection's gauges are not the source's
        // `jetsink_nats_connected`, which the alerts read as "reading from NATS works".
        let metrics = Metrics::new();
        let label = if self.feed.sink.is_empty() {
            "republish".to_string()
        } else {
            format!("{}-republish", self.feed.sink)
        };
        let links = Links::for_destination(&metrics);
        let conn = connect(&self.config.connection(), &label, &links, &metrics)
            .await
            .map_err(super::connect_error::classify)?;
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let js = ContextBuilder::new()
            .timeout(timeout)
            .ack_timeout(timeout)
            .max_ack_inflight(MAX_INFLIGHT)
            .build(conn.client);
        self.js = Some(js.clone());
        self.links = Some(links);
        Ok(js)
    }

    /// The subjects of `stream` on the target; `None` when it does not exist.
    async fn subjects_of(js: &Context, stream: &str) -> Result<Option<Vec<String>>, SinkError> {
        match js.get_stream(stream).await {
            Ok(mut s) => Ok(Some(
                s.info()
                    .await
                    .map_err(|e| SinkError::transient(format!("info of stream {stream}: {e}")))?
                    .config
                    .subjects
                    .clone(),
            )),
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(j) if j.error_code().0 == STREAM_NOT_FOUND => {
                    Ok(None)
                }
                _ => Err(SinkError::transient(format!(
                    "info of stream {stream}: {e}"
                ))),
            },
        }
    }

    /// The target stream exists and captures what the template makes.
    async fn check_target(&mut self, js: &Context) -> Result<(), SinkError> {
        let filter = self.filter()?;
        let stream = &self.config.stream;
        let Some(subjects) = Self::subjects_of(js, stream).await? else {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "target stream {stream} does not exist; create it (capturing {filter}) before starting"
                ),
            });
        };
        if !subjects.iter().any(|s| overlap(s, &filter)) {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "target stream {stream} captures {subjects:?}, none of the subjects the template {:?} makes ({filter})",
                    self.config.subject
                ),
            });
        }
        Ok(())
    }

    /// With `atomic`, the target server (2.12.1+: 2.12.0 refuses `Nats-Msg-Id` in a
    /// batch, the header that absorbs redeliveries) and the target stream (`allow_atomic`)
    /// must accept atomic batches.
    async fn check_atomic(&self, js: &Context) -> Result<(), SinkError> {
        let stream = &self.config.stream;
        let reported = js.client().server_info().version;
        let version = ServerVersion::parse(&reported);
        if !version.is_some_and(ServerVersion::has_atomic_batches_with_message_ids) {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "destination.atomic needs nats-server 2.12.1 or later (atomic batch publish with Nats-Msg-Id); the target server is {reported:?}"
                ),
            });
        }
        let mut s = js
            .get_stream(stream)
            .await
            .map_err(|e| SinkError::transient(format!("info of stream {stream}: {e}")))?;
        let info = s
            .info()
            .await
            .map_err(|e| SinkError::transient(format!("info of stream {stream}: {e}")))?;
        if !info.config.allow_atomic_publish {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "destination.atomic needs a target stream that allows atomic publish; stream {stream} has allow_atomic false (set allow_atomic: true in its config)"
                ),
            });
        }
        Ok(())
    }

    /// Publishes the batch as one atomic batch; a batch holding a copy the target already
    /// stored (a redelivery after a commit whose ACK was lost) is refused whole by the
    /// server and then published message by message, where the duplicate window drops
    /// the copies already there.
    async fn write_atomic(&mut self, js: &Context, batch: &[Envelope]) -> Result<(), SinkError> {
        let id = nuid::next().to_string();
        let n = batch.len();
        let mut copies: Vec<Outgoing> = Vec::with_capacity(n);
        {
            let template = self.template()?;
            for (i, e) in batch.iter().enumerate() {
                let mut subject = String::new();
                if let Err(r) = template.render(&e.subject, &self.feed.sink, &mut subject) {
                    return Err(SinkError::Permanent {
                        index: Some(i),
                        message: format!("message {i}: {r}"),
                    });
                }
                let mut h = headers(e);
                mark(&mut h, &id, i + 1, i + 1 == n);
                copies.push((subject, h, e.payload.clone()));
            }
        }
        let client = js.client();
        if self.inbox.is_none() {
            self.inbox =
                Some(Inbox::open(&client).await.map_err(|e| {
                    SinkError::transient(format!("subscribe to the reply inbox: {e}"))
                })?);
        }
        let Some(inbox) = self.inbox.as_mut() else {
            return Err(SinkError::transient("no reply inbox"));
        };
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let attempt = atomic::publish(&client, inbox, &id, copies, timeout).await?;
        match verdict(&attempt, n, &id, &self.config.stream) {
            Verdict::Committed => Ok(()),
            Verdict::Failed(e) => Err(e),
            Verdict::Absorb => {
                tracing::info!(
                    sink = %self.feed.sink,
                    stream = %self.config.stream,
                    messages = n,
                    "atomic batch holds a copy the target stream already stored (a redelivery); publishing it message by message so the duplicate window absorbs the stored copies"
                );
                let outcomes = self.publish(js, batch).await;
                classify(&outcomes, &self.config.stream)
            }
        }
    }

    /// Refuses a template whose copies the source stream itself would capture: each copy
    /// would be read again and republished, forever. The source stream is looked up on
    /// the target servers, so a source on other servers never matches unless the target
    /// holds a stream of the same name capturing the copies (refused too: name them
    /// apart).
    async fn check_loop(&mut self, js: &Context, source: &str) -> Result<(), SinkError> {
        if self.checked.contains(source) {
            return Ok(());
        }
        let filter = self.filter()?;
        let looped = source == self.config.stream
            || Self::subjects_of(js, source)
                .await?
                .is_some_and(|subjects| subjects.iter().any(|s| overlap(s, &filter)));
        if looped {
            return Err(SinkError::Misconfigured {
                message: format!(
                    "the source stream {source} would capture the copies ({filter}) and read them back, a loop; choose a subject template outside the source stream's subjects and a different target stream"
                ),
            });
        }
        self.checked.insert(source.to_string());
        Ok(())
    }

    /// Sends every copy, then waits for every PubAck, all within one request timeout.
    async fn publish(&mut self, js: &Context, batch: &[Envelope]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut pending = Vec::with_capacity(batch.len());
        let Ok(template) = self.template.as_ref() else {
            return Vec::new();
        };
        let mut stop: Option<String> = None;
        for (i, e) in batch.iter().enumerate() {
            if let Some(why) = &stop {
                outcomes[i] = Some(Outcome::Failed {
                    kind: async_nats::jetstream::context::PublishErrorKind::BrokenPipe,
                    code: None,
                    text: format!("not sent: {why}"),
                });
                continue;
            }
            if let Err(r) = template.render(&e.subject, &self.feed.sink, &mut self.subject) {
                outcomes[i] = Some(Outcome::NoSubject {
                    reason: r.to_string(),
                });
                continue;
            }
            let sent = js
                .publish_with_headers(self.subject.clone(), headers(e), e.payload.clone())
                .await;
            match sent {
                Ok(ack) => pending.push((i, ack)),
                Err(err) => {
                    let outcome = failed(&err);
                    if !matches!(
                        err.kind(),
                        async_nats::jetstream::context::PublishErrorKind::MaxPayloadExceeded
                    ) {
                        stop = Some(format!("publish of message {i} failed: {err}"));
                    }
                    outcomes[i] = Some(outcome);
                }
            }
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.request_timeout_ms);
        for (i, ack) in pending {
            outcomes[i] = Some(
                match tokio::time::timeout_at(deadline, ack.into_future()).await {
                    Ok(Ok(ack)) => Outcome::Stored { stream: ack.stream },
                    Ok(Err(err)) => failed(&err),
                    Err(_) => Outcome::Failed {
                        kind: async_nats::jetstream::context::PublishErrorKind::TimedOut,
                        code: None,
                        text: "no PubAck within request_timeout_ms".into(),
                    },
                },
            );
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or(Outcome::Failed {
                    kind: async_nats::jetstream::context::PublishErrorKind::Other,
                    code: None,
                    text: "not published".into(),
                })
            })
            .collect()
    }
}

/// One publish failure as an [`Outcome`], with the JetStream error code when the server
/// answered with one.
fn failed(err: &PublishError) -> Outcome {
    let code = std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
        .map(|j| j.error_code().0);
    Outcome::Failed {
        kind: err.kind(),
        code,
        text: err.to_string(),
    }
}

#[async_trait]
impl Sink for NatsRepublishSink {
    fn attach(&mut self, feed: &Feed) {
        self.feed = feed.clone();
    }

    async fn open(&mut self) -> Result<(), SinkError> {
        let template = self.template()?;
        if template.uses_sink() && self.feed.sink.is_empty() {
            return Err(SinkError::Misconfigured {
                message: "the subject template uses {sink}, which only `jetsink run` knows".into(),
            });
        }
        let place = self.where_();
        let js = self.connect().await.map_err(|e| e.with_context(&place))?;
        self.check_target(&js)
            .await
            .map_err(|e| e.with_context(&place))?;
        if self.config.atomic {
            self.check_atomic(&js)
                .await
                .map_err(|e| e.with_context(&place))?;
        }
        if !self.feed.stream.is_empty() {
            let source = self.feed.stream.clone();
            self.check_loop(&js, &source)
                .await
                .map_err(|e| e.with_context(&place))?;
        }
        Ok(())
    }

    /// What `open` checks is already read-only: the connection, the target stream and
    /// what it captures, and the loop check.
    async fn probe(&mut self) -> Result<Probe, SinkError> {
        self.open().await?;
        Ok(Probe::Ready(format!(
            "target stream {} exists and captures {}",
            self.config.stream,
            self.filter()?
        )))
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        let place = self.where_();
        let js = self.connect().await.map_err(|e| e.with_context(&place))?;
        // A source not announced by `attach` (a tool driving the sink) is checked the
        // first time it appears, before anything of it is published.
        let sources: HashSet<&str> = batch.iter().map(|e| e.stream.as_str()).collect();
        for source in sources {
            self.check_loop(&js, source)
                .await
                .map_err(|e| e.with_context(&place))?;
        }
        if self.config.atomic {
            return self
                .write_atomic(&js, batch)
                .await
                .map_err(|e| e.with_context(&place));
        }
        let outcomes = self.publish(&js, batch).await;
        classify(&outcomes, &self.config.stream).map_err(|e| e.with_context(&place))
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        let place = self.where_();
        let js = self.connect().await.map_err(|e| e.with_context(&place))?;
        match Self::subjects_of(&js, &self.config.stream).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(SinkError::transient("target stream not found").with_context(&place)),
            Err(e) => Err(e.with_context(&place)),
        }
    }
}
