//! The load of a fault matrix test and what the server says of it: a publisher that keeps
//! messages arriving while faults are injected, as fast as the server takes them but never
//! more than [`AHEAD`] past the slowest sink's acknowledgements, nor past the next fault's
//! share until that fault is in (so when the slowest has written a share, no sink has
//! finished, however fast the sinks drain: every fault lands mid-drain for every
//! destination), and each sink's consumer state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;

use super::sinks::Dest;
use super::STREAM;

/// How far the publisher may run ahead of the slowest sink's ACK floor.
pub const AHEAD: u64 = 300;

/// How often the consumers' state is read while waiting on it: each read decodes ten
/// consumer infos, which the unoptimized test build does slowly.
pub const POLL: Duration = Duration::from_millis(100);

/// What the server says of one sink's consumer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SinkState {
    pub ack_floor: u64,
    pub delivered: u64,
    pub ack_pending: usize,
    pub pending: u64,
}

impl SinkState {
    /// Messages the server has seen ACKed (every sequence up to `delivered` was delivered).
    pub fn acked(&self) -> u64 {
        self.delivered.saturating_sub(self.ack_pending as u64)
    }
}

/// The state of every sink's consumer, or `None` while one cannot be read (the server is
/// down, a consumer not created yet). One request: the stream's consumer list.
pub async fn states(js: &jetstream::Context, dests: &[Dest]) -> Option<BTreeMap<Dest, SinkState>> {
    use futures::TryStreamExt;
    let stream = js.get_stream_no_info(STREAM).await.ok()?;
    let infos: Vec<_> = stream.consumers().try_collect().await.ok()?;
    let mut out = BTreeMap::new();
    for d in dests {
        let i = infos.iter().find(|i| i.name == d.consumer())?;
        out.insert(
            *d,
            SinkState {
                ack_floor: i.ack_floor.stream_sequence,
                delivered: i.delivered.stream_sequence,
                ack_pending: i.num_ack_pending,
                pending: i.num_pending,
            },
        );
    }
    Some(out)
}

/// The lowest ACK floor among `dests` (0 while one cannot be read).
pub async fn slowest_floor(js: &jetstream::Context, dests: &[Dest]) -> u64 {
    states(js, dests)
        .await
        .and_then(|s| s.values().map(|s| s.ack_floor).min())
        .unwrap_or(0)
}

/// The background publisher of messages 1..=n: `{"i": n}` on `fm.urgent` (every fourth)
/// or `fm.routine`, each with `Nats-Msg-Id: fm-<n>`, so a publish repeated after its
/// PubAck was lost (the server killed) is stored once.
pub struct Publisher {
    task: tokio::task::JoinHandle<()>,
    /// The last message whose PubAck came.
    pub published: Arc<AtomicU64>,
    /// Published up to here whatever the sinks' floors and the ceiling say (set by a test).
    pub allowed: Arc<AtomicU64>,
    /// Never published past here unless `allowed` says so (set by a test).
    ceiling: Arc<AtomicU64>,
}

impl Publisher {
    pub fn start(js: jetstream::Context, n: u64, dests: Vec<Dest>) -> Publisher {
        let published = Arc::new(AtomicU64::new(0));
        let allowed = Arc::new(AtomicU64::new(0));
        let ceiling = Arc::new(AtomicU64::new(u64::MAX));
        let (p, a, c) = (published.clone(), allowed.clone(), ceiling.clone());
        let task = tokio::spawn(async move {
            let mut floor = 0;
            for i in 1..=n {
                let may = |floor: u64| {
                    (floor + AHEAD)
                        .min(c.load(Ordering::SeqCst))
                        .max(a.load(Ordering::SeqCst))
                };
                while i > may(floor) {
                    tokio::time::sleep(POLL).await;
                    floor = slowest_floor(&js, &dests).await;
                }
                publish_until_acked(&js, i).await;
                p.store(i, Ordering::SeqCst);
            }
        });
        Publisher {
            task,
            published,
            allowed,
            ceiling,
        }
    }

    /// Publishes no further than `up_to` until told otherwise (or allowed past it): the
    /// run holds the publisher short of a fault's share plus [`AHEAD`] until that fault is
    /// injected, so sinks that drain faster than the run observes them cannot have written
    /// every message before the last fault.
    pub fn hold_at(&self, up_to: u64) {
        self.ceiling.store(up_to, Ordering::SeqCst);
    }

    pub fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    /// Lets it publish up to `up_to` whatever the floors say.
    pub fn allow(&self, up_to: u64) {
        self.allowed.fetch_max(up_to, Ordering::SeqCst);
    }

    pub fn finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn publish_until_acked(js: &jetstream::Context, i: u64) {
    let subject = if i % 4 == 1 {
        "fm.urgent"
    } else {
        "fm.routine"
    };
    loop {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("fm-{i}").as_str());
        let payload = format!("{{\"i\":{i}}}");
        if let Ok(ack) = js.publish_with_headers(subject, h, payload.into()).await {
            if ack.await.is_ok() {
                return;
            }
        }
        // The server is down (a test killed it): the same message again, shortly.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
