//! One pull of strict lane priority (`consumer_pull: "strict"`), which asks the first lane
//! of its order first on every pull.
//!
//! Asked alone, that no-wait pull is a round trip before the pull of the next lane even
//! starts. Behind a routine backlog the first lane is usually empty, and on a loaded
//! machine each such probe took 1–3 ms (jetsink's own pull log, 2 cores, nats-server 2.14),
//! about as long as writing a batch: the pull task fell behind the writer. So while the
//! first lane answered empty last time, its pull and the next lane's are sent together,
//! and a pull that finds the first lane with messages again hands back both batches, the
//! first lane's first. While the first lane has messages, it is asked alone, so a backlog
//! in it still goes out before any other lane's (one batch of the next lane can come
//! between, pulled beside the probe that found the first lane's backlog beginning).

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use async_nats::Message;

use super::connect::Drops;
use super::fetch::{first_ready, ready, FetchLimits};

/// What one strict pull got.
#[derive(Debug, Default)]
pub struct StrictPull {
    /// The batches, in the order to write them: the first lane's, then the next lane's
    /// when both were pulled together; none when every lane was empty.
    pub batches: Vec<Vec<Message>>,
    /// The first consumer of the order had nothing: the next pull asks it together with
    /// the one after it.
    pub first_empty: bool,
}

/// Pulls over `order` (the first lane's consumers first): with `together`, the first two
/// consumers at once; otherwise the first alone, then the others one by one until one has
/// messages, as [`super::fetch_any`] does. When all are empty, a short long poll on the
/// first, so an idle sink sleeps in the server.
pub async fn fetch_strict(
    js: &Context,
    consumers: &[PullConsumer],
    order: &[usize],
    limits: FetchLimits,
    drops: &Drops,
    together: bool,
) -> Result<StrictPull, async_nats::Error> {
    let pull = |i: usize| async move {
        match consumers.get(i) {
            Some(c) => ready(js, c, limits, drops).await.map(|(m, _)| m),
            None => Ok(Vec::new()),
        }
    };
    let (first, second) = match (order.first(), order.get(1)) {
        (Some(&a), Some(&b)) if together => {
            let (a, b) = tokio::join!(pull(a), pull(b));
            (a, Some(b))
        }
        (Some(&a), _) => (pull(a).await, None),
        (None, _) => return Ok(StrictPull::default()),
    };
    let mut last_err = None;
    let mut batches = Vec::with_capacity(2);
    let mut first_empty = true;
    for (k, got) in std::iter::once(first).chain(second).enumerate() {
        match got {
            Ok(m) if !m.is_empty() => {
                first_empty &= k > 0;
                batches.push(m);
            }
            Ok(_) => {}
            Err(e) => last_err = Some(e),
        }
    }
    if batches.is_empty() {
        let asked = if together { 2 } else { 1 };
        let m = first_ready(js, consumers, order, asked, limits, drops, last_err).await?;
        if !m.is_empty() {
            batches.push(m);
        }
    }
    Ok(StrictPull {
        batches,
        first_empty,
    })
}
