//! Binding a sink's consumers anew after repeated failed pulls (never for a replay's
//! consumer): binding recreates what was lost — a memory-storage stream after a server
//! restart, with `create_stream` — and says when the stream was created, since a stream
//! deleted and created again numbers its messages from 1 again.

use std::time::SystemTime;

use super::Puller;
use crate::nats::{bind, Needs};

impl Puller {
    /// Binds every consumer of the sink again; a failure leaves the sink unbound (the
    /// next failed pulls try again).
    pub(super) async fn rebind(&mut self) {
        let mut consumers = Vec::with_capacity(self.consumers.len());
        let mut created = None;
        for (source, lane) in self.spec.consumer_bindings() {
            let needs = Needs::of(&self.spec, lane);
            match bind(&self.js, &self.spec.name, &source, &needs).await {
                Ok(b) => {
                    created = Some(SystemTime::from(b.stream.cached_info().created));
                    consumers.push(b.consumer);
                }
                Err(e) => {
                    self.unbound = true;
                    self.health.set_bound(false);
                    tracing::warn!(sink = %self.spec.name, consumer = %source.consumer, error = %e, "re-binding the consumer failed");
                    return;
                }
            }
        }
        self.consumers = consumers;
        self.bound_anew = created;
        self.unbound = false;
        self.health.set_bound(true);
    }

    /// When the stream was created, once after each binding anew (the stream may have been
    /// deleted and created again while the consumers were unreachable).
    pub(in crate::pipeline) fn bound_anew(&mut self) -> Option<SystemTime> {
        self.bound_anew.take()
    }
}
