//! What the pull task does between the pulls it chains: leaves each batch in the slot,
//! deciding whether to pull another ahead, and draws the next order in which a pull
//! visits the consumers, as the runner would.

use std::sync::Mutex as StdMutex;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::order::Order;
use crate::nats::linger::Cadence;
use crate::nats::{fetch_batch, Drops, FetchLimits, Pin, Pulls};
use crate::pipeline::batch::Prepare;
use crate::pipeline::keeper::Slot;
use crate::pipeline::pause::Pause;
use crate::pipeline::room::Room;

/// Leaves what a pull of the pull task got in the slot, and says whether the task pulls
/// another ahead. A pull that took less than it could found no backlog: the next pull
/// starts when the runner takes a batch, gathering what arrived meanwhile. A failed pull
/// ends the task (the slot is no longer pulled into).
pub(super) async fn leave(
    into: &Slot,
    prepare: &Prepare,
    limits: FetchLimits,
    room: Room,
    pulled: Result<Vec<async_nats::Message>, async_nats::Error>,
) -> Result<bool, async_nats::Error> {
    leave_all(into, prepare, limits, room, pulled.map(|m| vec![m]), 0).await
}

/// [`leave`] for a pull that may have got several batches (a strict lane pull that asked
/// two lanes at once), kept in their order, the first `first_lane` of them ahead of the
/// other lanes' batches waiting ([`Slot::put_all`]); whether the task goes on is decided
/// by the last, as the one the lane behind the others gave. No batch at all leaves an
/// empty one, as an empty pull does.
pub(super) async fn leave_all(
    into: &Slot,
    prepare: &Prepare,
    limits: FetchLimits,
    room: Room,
    pulled: Result<Vec<Vec<async_nats::Message>>, async_nats::Error>,
    first_lane: usize,
) -> Result<bool, async_nats::Error> {
    let mut batches = match pulled {
        Ok(b) => b,
        Err(e) => {
            into.set_pulling(false).await;
            return Err(e);
        }
    };
    if batches.is_empty() {
        batches.push(Vec::new());
    }
    let more = batches
        .last()
        .is_some_and(|m| limits.filled_by(m.iter().map(|m| m.payload.len())));
    let prepared = batches.into_iter().map(|m| prepare.prepare(m)).collect();
    Ok(into.put_all(prepared, first_lane, room, more).await)
}

/// The next pull of sink `sink`'s single consumer, carrying on from the pulls before it
/// (`pulls`: how the last came back, [`Cadence::after`], and their reply inbox); an empty
/// pull is noted at debug level.
pub(super) async fn pull_next(
    js: &Context,
    consumer: &PullConsumer,
    limits: FetchLimits,
    drops: &Drops,
    pin: Option<&Pin>,
    pulls: &StdMutex<Pulls>,
    sink: &str,
) -> Result<Vec<async_nats::Message>, async_nats::Error> {
    // Each pull task pulls after the one before it, so this takes what the last left.
    let mut carried = std::mem::take(&mut *pulls.lock().unwrap_or_else(|p| p.into_inner()));
    let pulled = fetch_batch(js, consumer, limits, drops, pin, &mut carried).await;
    carried.cadence = match &pulled {
        Ok(m) => {
            if m.is_empty() {
                tracing::debug!(sink = %sink, "pull found no message");
            }
            let full = limits.filled_by(m.iter().map(|m| m.payload.len()));
            Cadence::after(
                carried.cadence,
                m.len(),
                full,
                limits.max_messages,
                Instant::now(),
            )
        }
        Err(_) => Cadence::Unknown,
    };
    *pulls.lock().unwrap_or_else(|p| p.into_inner()) = carried;
    pulled
}

/// How many of a strict pull's batches, at its front, came from the first lane: its
/// consumer is the first bound (`SinkSpec::consumer_bindings` binds lanes in order), so
/// one when the pull asked consumer 0 first (not a turn of the other lanes after
/// `strict_max_wait_ms`) and found messages there, else none.
pub(super) fn first_lane_batches(order: &[usize], first_empty: bool) -> usize {
    usize::from(!first_empty && order.first() == Some(&0))
}

/// The next order in which a pull visits `consumers`, leaving out those paused in the
/// server (a paused consumer would only hold the pull).
pub(super) fn visiting_order(
    order: &StdMutex<(Order, StdRng)>,
    consumers: &[PullConsumer],
    pause: &Pause,
) -> Vec<usize> {
    let drawn = {
        let mut guard = order.lock().unwrap_or_else(|p| p.into_inner());
        let (order, rng) = &mut *guard;
        order.next(consumers.len(), rng, Instant::now())
    };
    drawn
        .into_iter()
        .filter(|&i| {
            consumers
                .get(i)
                .is_some_and(|c| !pause.consumer_paused(&c.cached_info().name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::first_lane_batches;

    #[test]
    fn only_a_batch_from_the_first_lane_asked_first_goes_ahead() {
        assert_eq!(first_lane_batches(&[0, 1], false), 1, "urgent found");
        assert_eq!(first_lane_batches(&[0, 1], true), 0, "urgent empty");
        assert_eq!(
            first_lane_batches(&[1, 0], false),
            0,
            "the other lanes' turn"
        );
        assert_eq!(first_lane_batches(&[], false), 0, "every lane paused");
    }
}
