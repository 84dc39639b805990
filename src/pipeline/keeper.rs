//! The one `+WPI` clock of a sink: everything the sink holds unacknowledged is kept alive
//! from the moment its pull returns until the moment its own acknowledgement is sent.
//!
//! A sink holds messages in four places: the batch pulled ahead (left in the [`Slot`] by
//! the pull task), the batch in hand (being refused, randomized, written, split, retried
//! or disposed of), a batch written ahead while the one in hand settles
//! (`delivery.batches_in_flight`), and the buffer of a shuffler or an s3 rollover. The
//! keeper sees all of them in one [`Held`] behind one lock, so a message moving between
//! them (pulled-ahead → written ahead → in hand, buffer → in hand) is never outside the
//! keeper's view, and the clock is never restarted by a hand-off: it ticks at a fixed
//! cadence whatever moves. Each message thus goes at most one tick without a `+WPI` (or
//! the delivery itself): the gap never exceeds the cadence, which is half the shortest
//! redelivery interval the consumer has
//! ([`crate::config::SourceConfig::shortest_redelivery`]: AckWait, or the shortest
//! `backoff_ms` step, which is what nats-server times each delivery by).
//!
//! Settling a message — the step right before its ACK, NAK or TERM is sent — takes the
//! same lock the tick holds while it sends, so once [`Keeper::settle`] returns no `+WPI`
//! for that message can follow (a `+WPI` after a delayed NAK would move its redelivery
//! back to AckWait). The tick runs in a task of its own, so it fires on time even while a
//! write blocks the runner's thread (file and SQLite, in `block_in_place`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use prometheus::IntCounter;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::acks::Acknowledger;
use super::batch::Prepared;
use super::room::Room;

/// What a sink holds unacknowledged, as the keeper sees it.
#[derive(Default)]
struct Held {
    /// The batches pulled ahead and not yet taken by the runner, oldest first — except
    /// that the first lane's batches of strict lane priority come before the others.
    ahead: VecDeque<Prepared>,
    /// How many batches at the front of `ahead` came from the first lane of strict lane
    /// priority: the next of that lane goes after them, before every other lane's.
    first_lane: usize,
    /// Set at shutdown: the pull task pulls nothing more ahead.
    closing: bool,
    /// A pull task is pulling into the slot (from its start until it decides, as it
    /// puts a batch, to pull no more).
    pulling: bool,
    /// The destination is failing: nothing more is pulled ahead until it writes again.
    failing: bool,
    /// The reply subjects of the batch in hand.
    hand: Arc<Vec<Subject>>,
    /// Which of `hand` are settled (their acknowledgement is being sent or was sent).
    settled: Vec<bool>,
    /// The buffer of pulls (shuffler, s3 rollover) being filled, one list per pull.
    buffer: Vec<Arc<Vec<Subject>>>,
    /// The parts of a flush still to be written, one list per part: the buffer filled
    /// before, while the next one fills.
    flushing: Vec<Arc<Vec<Subject>>>,
    /// Batches taken from the slot and written ahead (`delivery.batches_in_flight`), oldest
    /// first: their writes run while the batch in hand settles.
    writing: VecDeque<Arc<Vec<Subject>>>,
}

impl Held {
    /// Whether the batches pulled ahead leave `room` for one more pull.
    fn room_for_one(&self, room: Room) -> bool {
        let bytes = self.ahead.iter().map(|p| p.bytes).sum();
        room.fits(self.ahead.len(), bytes)
    }

    /// The batch the runner takes next from those pulled ahead.
    fn next_ahead(&mut self) -> Option<Prepared> {
        let p = self.ahead.pop_front()?;
        self.first_lane = self.first_lane.saturating_sub(1);
        Some(p)
    }

    fn set_hand(&mut self, replies: Arc<Vec<Subject>>) {
        self.settled.clear();
        self.settled.resize(replies.len(), false);
        self.hand = replies;
    }

    /// Every reply subject held and not settled.
    fn unsettled(&self) -> Vec<Subject> {
        let mut out: Vec<Subject> = self
            .hand
            .iter()
            .zip(&self.settled)
            .filter(|(_, done)| !**done)
            .map(|(r, _)| r.clone())
            .collect();
        for part in self
            .buffer
            .iter()
            .chain(&self.flushing)
            .chain(&self.writing)
        {
            out.extend(part.iter().cloned());
        }
        for p in &self.ahead {
            out.extend(p.all_replies().cloned());
        }
        out
    }
}

/// Where the pull task leaves the batches it pulled ahead; shared with the keeper, which
/// keeps them alive from the moment they are put there.
#[derive(Clone, Default)]
pub(super) struct Slot {
    held: Arc<Mutex<Held>>,
    /// Woken by each batch put, so the runner can take one while the pull task goes on
    /// to pull the next.
    arrived: Arc<Notify>,
}

impl Slot {
    /// Leaves a prepared pull for the runner, after those put before it, and says whether
    /// the pull task goes on to pull another: while what waits leaves `room` for one more,
    /// `more` (the pull was full: a backlog), the destination is not failing and shutdown
    /// has not closed the slot. Decided under the lock, so [`Slot::pulling`] is never stale.
    pub(super) async fn put(&self, p: Prepared, room: Room, more: bool) -> bool {
        self.put_all(vec![p], 0, room, more).await
    }

    /// [`Slot::put`] for the batches of one pull that got several (a strict lane pull
    /// that asked two lanes at once), in order. They are all kept whatever `room` says:
    /// they were pulled already. The first `first_lane` of them came from the first lane
    /// of strict lane priority: they go before the other lanes' batches waiting (after
    /// that lane's own), so an urgent message waits for the batch in hand, not for the
    /// routine batches pulled ahead before it arrived.
    pub(super) async fn put_all(
        &self,
        ps: Vec<Prepared>,
        first_lane: usize,
        room: Room,
        more: bool,
    ) -> bool {
        let mut held = self.held.lock().await;
        for (i, p) in ps.into_iter().enumerate() {
            if i < first_lane {
                let at = held.first_lane;
                held.ahead.insert(at, p);
                held.first_lane += 1;
            } else {
                held.ahead.push_back(p);
            }
        }
        let again = more && !held.closing && !held.failing && held.room_for_one(room);
        held.pulling = again;
        drop(held);
        self.arrived.notify_one();
        again
    }

    /// Whether a new pull task may start: none is pulling into the slot, what waits leaves
    /// `room` for one more, and shutdown has not closed the slot.
    pub(super) async fn may_pull(&self, room: Room) -> bool {
        let held = self.held.lock().await;
        !held.pulling && !held.closing && held.room_for_one(room)
    }

    /// A pull task starts pulling into the slot (`true`), or ended with a failed pull.
    pub(super) async fn set_pulling(&self, pulling: bool) {
        self.held.lock().await.pulling = pulling;
    }

    /// Whether a pull task is pulling into the slot.
    pub(super) async fn pulling(&self) -> bool {
        self.held.lock().await.pulling
    }

    /// Resolves once a batch was put since the last time it resolved (at once if one
    /// was put meanwhile).
    pub(super) async fn arrival(&self) {
        self.arrived.notified().await;
    }

    /// While the destination fails (`true`), the pull task pulls nothing more ahead after
    /// the pull it is in, so delivery counts do not climb while a batch is held.
    pub(super) async fn set_failing(&self, failing: bool) {
        self.held.lock().await.failing = failing;
    }

    /// At shutdown: the pull task pulls nothing more ahead after the pull it is in.
    pub(super) async fn close(&self) {
        self.held.lock().await.closing = true;
    }

    /// Takes the oldest batch pulled ahead into the runner's hand: in one step, so the
    /// keeper sees it either waiting or in hand, never neither. Its messages are in hand
    /// in the order of [`Prepared::all_replies`]: the batch, then the refused ones.
    pub(super) async fn take(&self) -> Option<Prepared> {
        let mut held = self.held.lock().await;
        let p = held.next_ahead()?;
        held.set_hand(Arc::new(p.all_replies().cloned().collect()));
        Some(p)
    }

    /// At shutdown: takes every batch pulled ahead into the runner's hand, in one step,
    /// and returns them, oldest first; the hand holds their reply subjects in that order,
    /// each batch's as [`Prepared::all_replies`] orders them.
    pub(super) async fn take_all(&self) -> Vec<Prepared> {
        let mut held = self.held.lock().await;
        let all: Vec<Prepared> = held.ahead.drain(..).collect();
        let replies: Vec<Subject> = all.iter().flat_map(|p| p.all_replies().cloned()).collect();
        held.first_lane = 0;
        held.set_hand(Arc::new(replies));
        all
    }

    /// Takes the batch pulled ahead to be written ahead, in one step (the keeper sees it
    /// waiting or being written, never neither) — only a batch the runner has nothing to
    /// do with before its write: nothing refused early and nothing past a replay's bound.
    /// What an empty pull left first is dropped: it only tells a runner waiting for a pull
    /// that one ended, and this runner is writing; kept, it would fill the room a pull for
    /// the second writer needs.
    pub(super) async fn take_to_write(&self) -> Option<Prepared> {
        let mut held = self.held.lock().await;
        while held
            .ahead
            .front()
            .is_some_and(|p| p.pulled == 0 && p.beyond.is_empty())
        {
            held.next_ahead();
        }
        let ready = held.ahead.front().is_some_and(|p| {
            p.refused.is_empty() && p.beyond.is_empty() && !p.batch.envelopes.is_empty()
        });
        if !ready {
            return None;
        }
        let p = held.next_ahead()?;
        held.writing.push_back(Arc::new(p.batch.replies.clone()));
        Some(p)
    }

    /// Takes the oldest batch written ahead into the runner's hand, in one step.
    pub(super) async fn hand_written(&self) {
        let mut held = self.held.lock().await;
        if let Some(replies) = held.writing.pop_front() {
            held.set_hand(replies);
        }
    }
}

/// The keep-alive of one sink. Cheap to clone; the tick stops when the last clone goes.
#[derive(Clone)]
pub(super) struct Keeper<A: Acknowledger> {
    slot: Slot,
    acks: A,
    every: Duration,
    /// Counts each `+WPI` round, so a slow destination shows on `/metrics`.
    sent: IntCounter,
    tick: Arc<Tick>,
}

/// The tick task, started at the first use (that is where a runtime surely exists) and
/// aborted when the keeper goes.
#[derive(Default)]
struct Tick(StdMutex<Option<JoinHandle<()>>>);

impl Drop for Tick {
    fn drop(&mut self) {
        if let Some(t) = self.0.get_mut().ok().and_then(Option::take) {
            t.abort();
        }
    }
}

impl<A: Acknowledger> Keeper<A> {
    /// A keeper sending through `acks` every `every` (half the shortest redelivery
    /// interval of the sink's consumer).
    pub(super) fn new(acks: A, every: Duration, sent: IntCounter) -> Keeper<A> {
        let k = Keeper {
            slot: Slot::default(),
            acks,
            every: every.max(Duration::from_millis(1)),
            sent,
            tick: Arc::default(),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            k.start();
        }
        k
    }

    /// The cadence of the `+WPI` rounds.
    pub(super) fn every(&self) -> Duration {
        self.every
    }

    /// The slot the pull task fills.
    pub(super) fn slot(&self) -> &Slot {
        &self.slot
    }

    async fn held(&self) -> tokio::sync::MutexGuard<'_, Held> {
        self.start();
        self.slot.held.lock().await
    }

    fn start(&self) {
        let mut task = self.tick.0.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_none() {
            *task = Some(tokio::spawn(tick(
                self.acks.clone(),
                self.every,
                self.slot.held.clone(),
                self.sent.clone(),
            )));
        }
    }

    /// Makes `replies` the batch in hand, all unsettled, in place of the one before (what
    /// is in both is kept alive throughout).
    pub(super) async fn hold(&self, replies: Arc<Vec<Subject>>) {
        self.held().await.set_hand(replies);
    }

    /// Settles messages of the batch in hand by position, right before their
    /// acknowledgement is sent: no `+WPI` for them follows once this returns.
    pub(super) async fn settle(&self, positions: impl IntoIterator<Item = usize>) {
        let mut held = self.held().await;
        for i in positions {
            if let Some(done) = held.settled.get_mut(i) {
                *done = true;
            }
        }
    }

    /// Turns the buffer filled so far into the parts of a flush, in one step: the buffer
    /// starts empty again, and fills while the parts are written.
    pub(super) async fn start_flush(&self, parts: Vec<Arc<Vec<Subject>>>) {
        let mut held = self.held().await;
        held.buffer.clear();
        held.flushing = parts;
    }

    /// Moves one part of a flush into hand and leaves `rest` to be written, in one step.
    pub(super) async fn hand_over(&self, part: Arc<Vec<Subject>>, rest: Vec<Arc<Vec<Subject>>>) {
        let mut held = self.held().await;
        held.set_hand(part);
        held.flushing = rest;
    }

    /// Adds a pull to the buffer and empties the hand it came from, in one step.
    pub(super) async fn buffer(&self, replies: Arc<Vec<Subject>>) {
        let mut held = self.held().await;
        if !replies.is_empty() {
            held.buffer.push(replies);
        }
        held.set_hand(Arc::default());
    }

    /// Forgets the buffer and the parts of a flush, right before they are handed back.
    pub(super) async fn clear_buffer(&self) {
        let mut held = self.held().await;
        held.buffer.clear();
        held.flushing.clear();
    }

    /// Every message held and not settled (for tests and the hand-back at shutdown).
    #[cfg(test)]
    pub(super) async fn unsettled(&self) -> Vec<Subject> {
        self.held().await.unsettled()
    }
}

/// The tick: every `every`, a `+WPI` for everything held and not settled, sent under the
/// lock. Missed ticks (a busy machine) are not bunched up: the next one is `every` later.
async fn tick<A: Acknowledger>(acks: A, every: Duration, held: Arc<Mutex<Held>>, sent: IntCounter) {
    let mut clock = tokio::time::interval_at(Instant::now() + every, every);
    clock.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        clock.tick().await;
        let held = held.lock().await;
        let replies = held.unsettled();
        if replies.is_empty() {
            continue;
        }
        acks.send(replies, AckKind::Progress).await;
        sent.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::testing::{batch, reply, Event, Kind, Log, RecordingAcks};

    fn keeper(log: &Log) -> Keeper<RecordingAcks> {
        let sent =
            crate::pipeline::SinkMetrics::new(&crate::metrics::Metrics::new(), "t").progress_acks;
        Keeper::new(RecordingAcks(log.clone()), Duration::from_secs(5), sent)
    }

    fn progress(log: &Log) -> Vec<Vec<u64>> {
        log.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Send(Kind::Progress, s) => Some(s),
                _ => None,
            })
            .collect()
    }

    fn one_batch(first: u64) -> Prepared {
        Prepared {
            pulled: 1,
            batch: batch(first..=first),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn first_lane_batches_go_before_the_other_lanes_waiting_and_keep_their_own_order() {
        let log = Log::default();
        let k = keeper(&log);
        let slot = k.slot();
        let room = Room::batches(8);
        slot.put(one_batch(1), room, true).await;
        slot.put(one_batch(2), room, true).await;
        // An urgent batch alone, then one pulled together with a routine batch.
        slot.put_all(vec![one_batch(10)], 1, room, true).await;
        slot.put_all(vec![one_batch(11), one_batch(3)], 1, room, true)
            .await;
        let first = slot.take().await.expect("waiting");
        assert_eq!(first.batch.envelopes[0].stream_sequence, 10);
        // Taken from the front: the next urgent batch goes behind the one still waiting.
        slot.put_all(vec![one_batch(12)], 1, room, true).await;
        let mut order = vec![];
        while let Some(p) = slot.take().await {
            order.push(p.batch.envelopes[0].stream_sequence);
        }
        assert_eq!(order, vec![11, 12, 1, 2, 3]);
        // With none of the first lane waiting, the next goes first again.
        slot.put(one_batch(4), room, true).await;
        slot.put_all(vec![one_batch(13)], 1, room, true).await;
        let taken = slot.take().await.expect("waiting");
        assert_eq!(taken.batch.envelopes[0].stream_sequence, 13);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_from_the_slot_keeps_the_clock_and_settled_messages_get_no_more() {
        let log = Log::default();
        let k = keeper(&log);
        let prepared = Prepared {
            pulled: 3,
            batch: batch(1..=3),
            ..Default::default()
        };
        k.slot().put(prepared, Room::batches(1), false).await;
        tokio::time::sleep(Duration::from_millis(5_100)).await;
        assert_eq!(progress(&log), vec![vec![1, 2, 3]], "waiting in the slot");
        // Taken 4.8 s into the next period: the next round is still 5 s after the last.
        tokio::time::sleep(Duration::from_millis(4_700)).await;
        let p = k.slot().take().await.expect("waiting");
        assert_eq!(p.pulled, 3);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(progress(&log).len(), 2, "no restart at the hand-off");
        k.settle([1]).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(progress(&log)[2], vec![1, 3]);
    }

    fn pulled(range: std::ops::RangeInclusive<u64>) -> Prepared {
        Prepared {
            pulled: range.clone().count(),
            batch: batch(range),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_pull_task_goes_on_only_after_a_full_pull_while_fewer_than_depth_wait() {
        let slot = Slot::default();
        assert!(
            !slot.put(pulled(1..=2), Room::batches(2), false).await,
            "not full: no backlog"
        );
        assert!(!slot.pulling().await);
        assert!(
            slot.put(pulled(3..=4), Room::batches(3), true).await,
            "two wait, three may"
        );
        assert!(slot.pulling().await);
        assert!(
            !slot.put(pulled(5..=6), Room::batches(3), true).await,
            "three wait"
        );
        assert!(!slot.pulling().await);
        // The oldest first.
        assert_eq!(slot.take().await.map(|p| p.batch.replies.len()), Some(2));
        assert!(slot.may_pull(Room::batches(3)).await);
        slot.set_failing(true).await;
        assert!(
            !slot.put(pulled(7..=7), Room::batches(9), true).await,
            "the destination fails"
        );
        slot.set_failing(false).await;
        slot.close().await;
        assert!(
            !slot.put(pulled(8..=8), Room::batches(9), true).await,
            "shutdown"
        );
        assert!(!slot.may_pull(Room::batches(9)).await);
    }

    #[tokio::test]
    async fn an_empty_pull_waiting_in_the_slot_neither_blocks_the_write_ahead_nor_the_next_pull() {
        let slot = Slot::default();
        let room = Room::batches(1);
        slot.put(Prepared::default(), room, false).await;
        assert!(!slot.may_pull(room).await, "the empty pull fills the room");
        assert!(slot.take_to_write().await.is_none(), "nothing to write");
        assert!(slot.may_pull(room).await, "dropped: room for the next pull");
        slot.put(Prepared::default(), room, false).await;
        slot.put(pulled(1..=2), Room::batches(2), false).await;
        let written = slot.take_to_write().await.expect("the batch behind it");
        assert_eq!(written.batch.replies.len(), 2);
        // A batch of nothing but messages past a replay's bound is the runner's to ACK.
        let beyond = Prepared {
            beyond: vec![async_nats::Subject::from("past.the.bound")],
            ..Prepared::default()
        };
        slot.put(beyond, room, false).await;
        assert!(slot.take_to_write().await.is_none());
        assert_eq!(slot.take().await.map(|p| p.beyond.len()), Some(1));
    }

    #[tokio::test]
    async fn past_two_batches_the_pull_task_goes_on_only_while_what_waits_is_small() {
        let slot = Slot::default();
        let room = Room {
            batches: 4,
            bytes: 100,
        };
        let sized = |range, bytes| Prepared {
            bytes,
            ..pulled(range)
        };
        assert!(slot.put(sized(1..=1, 100), room, true).await);
        assert!(
            slot.put(sized(2..=2, 0), room, true).await,
            "one pull's bytes wait"
        );
        assert!(
            !slot.put(sized(3..=3, 1), room, true).await,
            "more than one pull's bytes wait"
        );
        assert!(!slot.may_pull(room).await);
        assert!(slot.take().await.is_some());
        assert!(slot.may_pull(room).await, "two small ones wait");
    }

    #[tokio::test]
    async fn the_batches_of_one_pull_are_all_kept_in_their_order_past_the_depth() {
        let slot = Slot::default();
        assert!(slot.put(pulled(1..=1), Room::batches(2), true).await);
        assert!(
            !slot
                .put_all(
                    vec![pulled(2..=3), pulled(4..=6)],
                    0,
                    Room::batches(2),
                    true
                )
                .await,
            "three wait: no more ahead"
        );
        let mut sizes = Vec::new();
        while let Some(p) = slot.take().await {
            sizes.push(p.batch.replies.len());
        }
        assert_eq!(sizes, vec![1, 2, 3], "oldest first, none dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn every_batch_pulled_ahead_is_kept_alive_and_all_are_taken_at_shutdown() {
        let log = Log::default();
        let k = keeper(&log);
        k.slot().put(pulled(1..=2), Room::batches(2), true).await;
        k.slot().put(pulled(3..=3), Room::batches(2), true).await;
        tokio::time::sleep(Duration::from_millis(5_001)).await;
        assert_eq!(progress(&log), vec![vec![1, 2, 3]]);
        let all: Vec<Subject> = k
            .slot()
            .take_all()
            .await
            .iter()
            .flat_map(|p| p.all_replies().cloned())
            .collect();
        assert_eq!(all.len(), 3, "oldest batch first: {all:?}");
        assert_eq!(all[0], reply(1));
        assert_eq!(all[2], reply(3));
        assert!(k.slot().take().await.is_none());
        k.settle(0..3).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            progress(&log).len(),
            1,
            "handed back: nothing more to keep alive"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_buffer_and_the_part_in_hand_are_both_kept_and_nothing_when_empty() {
        let log = Log::default();
        let k = keeper(&log);
        k.buffer(Arc::new(vec![reply(7), reply(8)])).await;
        k.buffer(Arc::new(vec![reply(9)])).await;
        tokio::time::sleep(Duration::from_millis(5_001)).await;
        assert_eq!(progress(&log), vec![vec![7, 8, 9]]);
        k.start_flush(vec![
            Arc::new(vec![reply(9)]),
            Arc::new(vec![reply(7), reply(8)]),
        ])
        .await;
        k.hand_over(
            Arc::new(vec![reply(9)]),
            vec![Arc::new(vec![reply(7), reply(8)])],
        )
        .await;
        k.settle([0]).await;
        // The next buffer fills while the flush is written: both are kept.
        k.buffer(Arc::new(vec![reply(10)])).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(progress(&log)[1], vec![10, 7, 8]);
        k.clear_buffer().await;
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(progress(&log).len(), 2, "nothing held, nothing sent");
    }
}
