//! The buffer of prepared batches collected across pulls: the shuffler's
//! (`delivery.shuffle`, shuffled uniformly and cut into write batches) and the s3
//! rollover's (written whole, in arrival order, as one batch so one object holds several
//! pulls). Pure: the clock (milliseconds since an origin the runner keeps) and the rng are
//! passed in; the runner does the I/O, and the settler ACKs each write batch after it
//! committed.

use async_nats::Subject;
use rand::Rng;

use super::batch::Batch;
use crate::envelope::Envelope;

/// Shuffles `items` in place with the Fisher-Yates algorithm: every permutation is equally
/// likely (given a uniform rng), every element kept exactly once.
pub(super) fn fisher_yates<T>(items: &mut [T], rng: &mut impl Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.random_range(0..=i);
        items.swap(i, j);
    }
}

/// Why the buffer was handed to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlushReason {
    /// Another full pull could take it past `buffer`.
    Full,
    /// Its oldest message waited `flush_ms`.
    Timer,
}

impl FlushReason {
    /// The `reason` label of `jetsink_shuffle_flushes_total` and
    /// `jetsink_rollover_flushes_total`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            FlushReason::Full => "full",
            FlushReason::Timer => "timer",
        }
    }
}

/// What a flush makes of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Shuffled, cut into batches of `batch_size` (`delivery.shuffle`).
    Shuffle,
    /// One batch in arrival order (a destination that accumulates, s3 `rollover`).
    Whole,
}

/// Messages waiting to be written, with their reply subjects (same order).
#[derive(Debug)]
pub(super) struct ShuffleBuffer {
    mode: Mode,
    buffer: usize,
    batch_size: usize,
    /// Most payload bytes held, and the most one pull may bring.
    max_bytes: usize,
    pull_bytes: usize,
    /// Payload bytes held.
    bytes: usize,
    flush_ms: u64,
    envelopes: Vec<Envelope>,
    replies: Vec<Subject>,
    /// When the oldest buffered message arrived; `None` while empty.
    since_ms: Option<u64>,
}

impl ShuffleBuffer {
    /// An empty buffer of `size` messages for a validated section (`size` ≥ `batch_size`
    /// ≥ 1), flushed by the timer after `flush_ms`. No bound on bytes until
    /// [`ShuffleBuffer::with_bytes`].
    pub(super) fn new(mode: Mode, size: usize, flush_ms: u64, batch_size: usize) -> ShuffleBuffer {
        ShuffleBuffer {
            mode,
            buffer: size.max(1),
            batch_size: batch_size.max(1),
            max_bytes: usize::MAX,
            pull_bytes: 0,
            bytes: 0,
            flush_ms,
            envelopes: Vec::new(),
            replies: Vec::new(),
            since_ms: None,
        }
    }

    /// Bounds the payload bytes held by `max_bytes`, for pulls of at most `pull_bytes`.
    pub(super) fn with_bytes(mut self, max_bytes: usize, pull_bytes: usize) -> ShuffleBuffer {
        self.max_bytes = max_bytes;
        self.pull_bytes = pull_bytes;
        self
    }

    /// Messages held.
    pub(super) fn len(&self) -> usize {
        self.envelopes.len()
    }

    /// Adds a prepared batch that arrived at `now_ms`.
    pub(super) fn push(&mut self, batch: Batch, now_ms: u64) {
        if batch.envelopes.is_empty() {
            return;
        }
        self.since_ms.get_or_insert(now_ms);
        self.bytes = batch
            .envelopes
            .iter()
            .fold(self.bytes, |n, e| n.saturating_add(e.payload.len()));
        self.envelopes.extend(batch.envelopes);
        self.replies.extend(batch.replies);
    }

    /// Whether another full pull fits, in messages and in bytes: while it does not, the
    /// buffer is due (`Full`) and is not pulled into.
    pub(super) fn has_room(&self) -> bool {
        self.len() + self.batch_size <= self.buffer
            && self.bytes.saturating_add(self.pull_bytes) <= self.max_bytes
    }

    /// When a flush falls due by the timer, if anything is held.
    pub(super) fn deadline_ms(&self) -> Option<u64> {
        self.since_ms.map(|s| s.saturating_add(self.flush_ms))
    }

    /// Whether to flush now: `Full` once another full pull could overflow the buffer (so
    /// the buffer never holds more than `buffer`), `Timer` once the oldest message waited
    /// `flush_ms`, `None` otherwise (and always for an empty buffer).
    pub(super) fn due(&self, now_ms: u64) -> Option<FlushReason> {
        let deadline = self.deadline_ms()?;
        if !self.has_room() {
            Some(FlushReason::Full)
        } else if now_ms >= deadline {
            Some(FlushReason::Timer)
        } else {
            None
        }
    }

    /// Empties the buffer into the batches to write, each envelope still beside its reply
    /// subject: in `Whole` mode one batch in arrival order, in `Shuffle` mode the messages
    /// shuffled and cut into batches of `batch_size` (the last one may be shorter).
    pub(super) fn take(&mut self, rng: &mut impl Rng) -> Vec<Batch> {
        self.since_ms = None;
        self.bytes = 0;
        let envelopes = std::mem::take(&mut self.envelopes);
        let replies = std::mem::take(&mut self.replies);
        if self.mode == Mode::Whole {
            return if envelopes.is_empty() {
                Vec::new()
            } else {
                vec![Batch { envelopes, replies }]
            };
        }
        let mut pairs: Vec<(Envelope, Subject)> = envelopes.into_iter().zip(replies).collect();
        fisher_yates(&mut pairs, rng);
        let mut out = Vec::with_capacity(pairs.len().div_ceil(self.batch_size));
        let mut rest = pairs.into_iter().peekable();
        while rest.peek().is_some() {
            let (envelopes, replies) = rest.by_ref().take(self.batch_size).unzip();
            out.push(Batch { envelopes, replies });
        }
        out
    }

    /// Empties the buffer without writing, in arrival order: what shutdown hands back (or
    /// writes, for messages on their last allowed delivery).
    pub(super) fn take_unwritten(&mut self) -> Batch {
        self.since_ms = None;
        self.bytes = 0;
        Batch {
            envelopes: std::mem::take(&mut self.envelopes),
            replies: std::mem::take(&mut self.replies),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::testing::envelope;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn batch(seqs: std::ops::Range<u64>) -> Batch {
        Batch {
            envelopes: seqs.clone().map(|s| envelope(s, 1)).collect(),
            replies: seqs.map(|s| Subject::from(format!("ack.{s}"))).collect(),
        }
    }

    fn buffer(buffer: usize, batch_size: usize, flush_ms: u64) -> ShuffleBuffer {
        ShuffleBuffer::new(Mode::Shuffle, buffer, flush_ms, batch_size)
    }

    fn whole(buffer: usize, batch_size: usize, flush_ms: u64) -> ShuffleBuffer {
        ShuffleBuffer::new(Mode::Whole, buffer, flush_ms, batch_size)
    }

    proptest! {
        #[test]
        fn fisher_yates_is_a_permutation(n in 0usize..300, seed: u64) {
            let mut v: Vec<usize> = (0..n).collect();
            fisher_yates(&mut v, &mut StdRng::seed_from_u64(seed));
            let mut sorted = v.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        }

        #[test]
        fn a_flush_writes_every_message_once_in_batches_with_its_own_reply(
            pulls in proptest::collection::vec(1u64..50, 1..10),
            batch_size in 1usize..60,
            seed: u64,
        ) {
            let mut b = buffer(10_000, batch_size, 1000);
            let mut next = 0;
            for n in &pulls {
                b.push(batch(next..next + n), 0);
                next += n;
            }
            let out = b.take(&mut StdRng::seed_from_u64(seed));
            prop_assert_eq!(b.len(), 0);
            prop_assert_eq!(b.deadline_ms(), None);
            let mut seen = Vec::new();
            for (i, part) in out.iter().enumerate() {
                prop_assert!(!part.envelopes.is_empty());
                prop_assert!(part.envelopes.len() <= batch_size);
                if i + 1 < out.len() {
                    prop_assert_eq!(part.envelopes.len(), batch_size);
                }
                for (e, r) in part.envelopes.iter().zip(&part.replies) {
                    prop_assert_eq!(r.as_str(), format!("ack.{}", e.stream_sequence));
                    seen.push(e.stream_sequence);
                }
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..next).collect::<Vec<_>>());
        }

        #[test]
        fn the_buffer_never_passes_its_size_when_flushed_as_due(
            pulls in proptest::collection::vec(0u64..=100, 1..40),
            extra in 0usize..500,
        ) {
            let size = 100 + extra;
            let mut b = buffer(size, 100, u64::MAX);
            let mut next = 0;
            for n in pulls {
                b.push(batch(next..next + n), 0);
                next += n;
                prop_assert!(b.len() <= size);
                if b.due(0).is_some() {
                    b.take(&mut StdRng::seed_from_u64(1));
                }
            }
        }
    }

    #[test]
    fn whole_mode_flushes_every_pull_as_one_batch_in_arrival_order() {
        let mut b = whole(1000, 100, 500);
        b.push(batch(0..100), 0);
        b.push(batch(100..150), 10);
        b.push(batch(150..250), 20);
        let out = b.take(&mut StdRng::seed_from_u64(3));
        assert_eq!(out.len(), 1);
        let seqs: Vec<u64> = out[0].envelopes.iter().map(|e| e.stream_sequence).collect();
        assert_eq!(seqs, (0..250).collect::<Vec<_>>());
        for (e, r) in out[0].envelopes.iter().zip(&out[0].replies) {
            assert_eq!(r.as_str(), format!("ack.{}", e.stream_sequence));
        }
        assert_eq!((b.len(), b.deadline_ms()), (0, None));
        assert!(b.take(&mut StdRng::seed_from_u64(3)).is_empty());
    }

    #[test]
    fn whole_mode_is_due_full_before_a_pull_could_pass_max_messages_else_by_timer() {
        let mut b = whole(1000, 100, 60_000);
        assert_eq!(b.due(u64::MAX), None);
        b.push(batch(0..900), 5);
        assert_eq!(b.due(60_004), None);
        assert_eq!(b.due(60_005), Some(FlushReason::Timer));
        b.push(batch(900..901), 6);
        assert_eq!(b.due(6), Some(FlushReason::Full));
    }

    #[test]
    fn every_position_is_reached_about_equally_often() {
        // The first element ends in each of 4 places about a quarter of the time.
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let mut v = [0, 1, 2, 3];
            fisher_yates(&mut v, &mut rng);
            let at = v.iter().position(|x| *x == 0).unwrap_or(0);
            counts[at] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn an_empty_buffer_is_never_due() {
        let b = buffer(100, 10, 5);
        assert_eq!(b.due(u64::MAX), None);
    }

    #[test]
    fn the_timer_counts_from_the_oldest_message() {
        let mut b = buffer(1000, 10, 500);
        b.push(batch(0..3), 100);
        b.push(batch(3..6), 400);
        assert_eq!(b.deadline_ms(), Some(600));
        assert_eq!(b.due(599), None);
        assert_eq!(b.due(600), Some(FlushReason::Timer));
    }

    #[test]
    fn full_once_another_pull_could_overflow() {
        let mut b = buffer(100, 10, 500);
        b.push(batch(0..90), 0);
        assert_eq!(b.due(0), None);
        b.push(batch(90..91), 0);
        assert_eq!(b.due(0), Some(FlushReason::Full));
    }

    #[test]
    fn a_byte_bound_makes_the_buffer_full_before_its_message_count() {
        // Each payload is 2 bytes (`{}`).
        let mut b = whole(100, 10, 500).with_bytes(35, 10);
        b.push(batch(0..5), 0);
        assert!(
            b.has_room(),
            "10 payload bytes held, a pull of 10 more fits in 35"
        );
        b.push(batch(5..10), 0);
        assert!(b.has_room());
        b.push(batch(10..13), 0);
        assert_eq!(
            b.due(0),
            Some(FlushReason::Full),
            "26 held: another pull could pass 35"
        );
        assert_eq!(b.take(&mut StdRng::seed_from_u64(1)).len(), 1);
        assert!(b.has_room(), "emptied, the count starts again");
    }

    #[test]
    fn handing_back_empties_the_buffer() {
        let mut b = buffer(100, 10, 500);
        b.push(batch(0..5), 0);
        b.push(batch(5..7), 1);
        let unwritten = b.take_unwritten();
        assert_eq!(unwritten.replies.len(), 7);
        let seqs: Vec<u64> = unwritten
            .envelopes
            .iter()
            .map(|e| e.stream_sequence)
            .collect();
        assert_eq!(seqs, (0..7).collect::<Vec<_>>(), "in arrival order");
        assert_eq!((b.len(), b.due(u64::MAX)), (0, None));
    }
}
