//! The NATS side before a replay writes: the connection, the sink's stream, the stop
//! bound of the range on it, and what a dry run reports. Temporary consumers made here to
//! read a position (`--until`, the dry run's counts) are deleted before returning.

use async_nats::jetstream::{self, stream::Stream};

use super::error::ReplayError;
use super::range::{stop_bound, End, Range};
use super::summary::Plan;
use crate::config::{Config, SinkSpec};
use crate::metrics::Metrics;
use crate::nats::replay_consumer::{
    self, replay_consumer_config, replay_consumer_name, ReplayStart, ReplayState,
};
use crate::nats::{Connection, Links};

/// A replay's connection and the sink's stream on it.
pub struct Session {
    /// The connection (its drop count feeds the runner).
    pub conn: Connection,
    /// JetStream on it, with the configured request timeout.
    pub js: jetstream::Context,
    /// The sink's stream.
    pub stream: Stream,
}

/// Connects with the config's NATS settings and finds the sink's stream, which a replay
/// never creates.
pub async fn connect(
    config: &Config,
    spec: &SinkSpec,
    metrics: &Metrics,
) -> Result<Session, ReplayError> {
    let links = Links::new(metrics);
    let conn = crate::nats::connect(&config.nats, "replay", &links, metrics)
        .await
        .map_err(|e| match e {
            crate::nats::ConnectError::Credentials { .. } => ReplayError::Config(e.to_string()),
            _ => ReplayError::Nats(e.to_string()),
        })?;
    // A one-shot command: the connection closes when it is done.
    links.closing();
    let js = jetstream::ContextBuilder::new()
        .timeout(std::time::Duration::from_millis(
            config.nats.request_timeout_ms,
        ))
        .build(conn.client.clone());
    let stream = js.get_stream(&spec.source.stream).await.map_err(|e| {
        ReplayError::Nats(format!(
            "sink {}: looking up stream {}: {e}",
            spec.name, spec.source.stream
        ))
    })?;
    Ok(Session { conn, js, stream })
}

impl Session {
    /// The stream's last sequence now.
    pub async fn last_sequence(&mut self) -> Result<u64, ReplayError> {
        let name = self.stream.cached_info().config.name.clone();
        self.stream
            .info()
            .await
            .map(|i| i.state.last_sequence)
            .map_err(|e| ReplayError::Nats(format!("reading stream {name}: {e}")))
    }

    /// Creates a consumer of the sink's subjects starting at `start`, reads its state,
    /// and deletes it: where `start` falls and what is pending from there.
    async fn probe(
        &self,
        spec: &SinkSpec,
        filters: &[String],
        start: ReplayStart,
        role: &str,
    ) -> Result<ReplayState, ReplayError> {
        let name = replay_consumer_name(&spec.source.consumer, std::process::id(), role);
        let cfg = replay_consumer_config(&name, &spec.source, filters, start);
        replay_consumer::create(&self.stream, cfg)
            .await
            .map_err(|e| ReplayError::Nats(e.to_string()))?;
        let state = replay_consumer::state(&self.stream, &name).await;
        if let Err(e) = replay_consumer::delete(&self.stream, &name).await {
            tracing::warn!(error = %e, "could not delete a short-lived replay consumer; the server removes it after its inactive threshold");
        }
        state.map_err(|e| ReplayError::Nats(e.to_string()))
    }

    /// The last stream sequence the replay writes, for a stream whose last sequence is
    /// `last`.
    pub async fn bound(
        &self,
        spec: &SinkSpec,
        filters: &[String],
        range: &Range,
        last: u64,
    ) -> Result<u64, ReplayError> {
        let before_until = match range.end {
            End::Before(t) => Some(
                self.probe(spec, filters, ReplayStart::Time(t), "until")
                    .await?
                    .delivered,
            ),
            _ => None,
        };
        Ok(stop_bound(range.end, last, before_until))
    }

    /// What a replay of `range` would do: its first and last sequence and, when the
    /// stream did not grow while counting, how many messages of the sink's subjects lie
    /// between (from two consumers' pending counts). Writes nothing.
    pub async fn plan(
        &mut self,
        spec: &SinkSpec,
        filters: &[String],
        range: &Range,
    ) -> Result<Plan, ReplayError> {
        let last = self.last_sequence().await?;
        let bound = self.bound(spec, filters, range, last).await?;
        let from = self.probe(spec, filters, range.start, "plan").await?;
        let past = if bound < last {
            let after = self
                .probe(spec, filters, ReplayStart::Sequence(bound + 1), "plan-end")
                .await?;
            Some(after.pending)
        } else {
            None
        };
        let grew = self.last_sequence().await? != last;
        let messages = (!grew).then(|| from.pending.saturating_sub(past.unwrap_or(0)));
        Ok(Plan {
            sink: spec.name.clone(),
            stream: spec.source.stream.clone(),
            destination: spec.destination.describe(),
            first: from.delivered + 1,
            last: bound,
            messages,
        })
    }
}
