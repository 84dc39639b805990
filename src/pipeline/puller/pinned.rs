//! The puller's side of an active/standby priority group (`source.pinned`): the pin this
//! instance holds or waits for, the `jetsink_pinned` gauge and the log line of each change,
//! and the hand-over of the pin at shutdown.

use async_nats::jetstream::response::Response;
use tokio::time::Instant;

use super::{Pinned, Puller};

impl Pinned {
    /// Logs and shows a change of the pin since the last pull. A standby is healthy and
    /// ready: it only has nothing to write.
    pub(super) fn note(&mut self, sink: &str) {
        let held = self.pin.held();
        if held == self.was_held {
            return;
        }
        self.was_held = held;
        self.gauge.set(i64::from(held));
        if held {
            tracing::info!(
                sink,
                group = self.pin.group(),
                "this instance holds the pin: it is the active one and writes"
            );
        } else {
            tracing::info!(sink, group = self.pin.group(), "the pin moved to another instance: standing by (what this instance pulled is still written and ACKed)");
        }
    }
}

impl Puller {
    /// At shutdown, after the last pull: hands the pin over at once with the JetStream
    /// UNPIN request, so a standby takes the new messages now instead of after the
    /// priority timeout. Only while this instance believes it holds the pin: should the
    /// pin have moved a moment ago, the request unpins the new holder, and the server pins
    /// a waiting pull again at once, so the cost is one re-pin. A failure only costs the
    /// standby the priority timeout, as before; it is logged, not retried.
    pub(crate) async fn release_pin(&mut self, by: Instant) {
        let Some(pinned) = self.pinned.as_mut() else {
            return;
        };
        if !pinned.pin.held() {
            return;
        }
        let source = &self.spec.source;
        let subject = format!("CONSUMER.UNPIN.{}.{}", source.stream, source.consumer);
        let body = serde_json::json!({ "group": pinned.pin.group() });
        let sent = tokio::time::timeout_at(
            by,
            self.js
                .request::<_, _, Response<serde::de::IgnoredAny>>(subject, &body),
        )
        .await;
        let sink = &self.spec.name;
        match sent {
            Ok(Ok(Response::Ok(_))) => {
                pinned.pin.lost();
                pinned.was_held = false;
                pinned.gauge.set(0);
                tracing::info!(sink = %sink, group = pinned.pin.group(), "released the pin at shutdown: a standby takes over now");
            }
            Ok(Ok(Response::Err { error })) => {
                tracing::warn!(sink = %sink, error = %error, "the server refused to release the pin; a standby takes over after the priority timeout")
            }
            Ok(Err(e)) => {
                tracing::warn!(sink = %sink, error = %e, "could not release the pin; a standby takes over after the priority timeout")
            }
            Err(_) => {
                tracing::warn!(sink = %sink, "no time left to release the pin; a standby takes over after the priority timeout")
            }
        }
    }
}
