//! The delayed-NAK randomizer: which messages of a fetched batch are processed now and
//! which are NAKed with a random delay, so that later messages overtake them.
//!
//! This is the specification's algorithm, as pure functions with the rng and the clock
//! passed in. For each message: a redelivery (delivered count > 1) is always processed at
//! once, so no message is ever delayed twice; a first delivery is processed with
//! probability `process_immediately_probability` and otherwise delayed by a uniformly
//! random [`Duration`] in [`min_delay_ms`, `max_delay_ms`]. The delayed set, the *window*,
//! is bounded: no message is delayed while `max_window` are out, and with `adaptive` the
//! delay probability shrinks smoothly to 0 as the window fills.
//!
//! [`Randomizer::split`] applies the decision to a batch (after the lane scheduler, on what
//! remains); the runner NAKs the delayed part with its delays, writes the kept part, and
//! ACKs it after commit as always. [`Window`] tracks the delayed messages by stream
//! sequence until they come back. Nothing here touches the server: disorder is bounded,
//! and a message is never lost or starved, because a delayed message stays in the stream
//! until it is redelivered, written and ACKed.
//!
//! [`min_delay_ms`]: RandomizerConfig::min_delay_ms
//! [`max_delay_ms`]: RandomizerConfig::max_delay_ms

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use rand::Rng;

use crate::config::randomizer::RandomizerConfig;

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Keep it in the batch: write it now and ACK it after commit.
    Process,
    /// Take it out of the batch and NAK it with this delay; it comes back as a redelivery.
    Delay(Duration),
}

/// A validated `delivery.randomizer`, ready to decide.
#[derive(Debug, Clone)]
pub struct Randomizer {
    enabled: bool,
    /// 1 − `process_immediately_probability`: the delay probability of an empty window.
    delay_share: f64,
    min_delay_ms: u64,
    max_delay_ms: u64,
    max_window: usize,
    adaptive: bool,
}

impl Randomizer {
    /// Builds the randomizer from a section that validation
    /// ([`crate::config::randomizer::validate_randomizer`]) has already accepted, as every
    /// section of a loaded [`crate::config::Config`] has: it is not checked again.
    pub fn new(cfg: &RandomizerConfig) -> Randomizer {
        Randomizer {
            enabled: cfg.enabled,
            delay_share: (1.0 - cfg.process_immediately_probability).clamp(0.0, 1.0),
            min_delay_ms: cfg.min_delay_ms.min(cfg.max_delay_ms),
            max_delay_ms: cfg.max_delay_ms.max(cfg.min_delay_ms),
            max_window: cfg.max_window,
            adaptive: cfg.adaptive,
        }
    }

    /// Whether any message can be delayed at all; when false, [`Randomizer::decide`] always
    /// answers [`Decision::Process`] and the runner may skip the stage.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The configured `max_window`.
    pub fn max_window(&self) -> usize {
        self.max_window
    }

    /// The probability that a first delivery is delayed while `window` messages are out.
    ///
    /// Without `adaptive` it is 1 − P. With `adaptive` it is (1 − P) × (1 − window /
    /// max_window): linear in the window, continuous, 1 − P on an empty window and 0 on a
    /// full one, so the window settles where the delays coming back balance the new ones
    /// (see [`crate::config::randomizer::settled_window`]) instead of hitting the cap and
    /// switching the shuffle off and on. It is 0 when the randomizer is disabled and
    /// whenever `window >= max_window`, and never increases with `window`.
    pub fn delay_probability(&self, window: usize) -> f64 {
        if !self.enabled || window >= self.max_window {
            return 0.0;
        }
        if !self.adaptive {
            return self.delay_share;
        }
        let fill = window as f64 / self.max_window as f64;
        self.delay_share * (1.0 - fill)
    }

    /// Decides one message: `delivered` is its delivery count (1 = first delivery) and
    /// `window` the number of messages currently delayed and not yet back.
    ///
    /// A redelivery is always processed, never delayed again; so is a count of 0, which the
    /// server never sends, since a message the randomizer does not understand must not be
    /// held back. A first delivery is delayed with [`Randomizer::delay_probability`]
    /// (one uniform draw in [0, 1); delay when it falls below the probability, which with
    /// the window empty and no adaptation is the specification's `random() <
    /// process_immediately_probability → process`, mirrored), by a delay uniform in
    /// [`min_delay_ms`, `max_delay_ms`] (a second draw). No draw is made when nothing can
    /// be delayed.
    ///
    /// [`min_delay_ms`]: RandomizerConfig::min_delay_ms
    /// [`max_delay_ms`]: RandomizerConfig::max_delay_ms
    pub fn decide(&self, delivered: u64, window: usize, rng: &mut impl Rng) -> Decision {
        if delivered != 1 {
            return Decision::Process;
        }
        let p = self.delay_probability(window);
        if p <= 0.0 || rng.random::<f64>() >= p {
            return Decision::Process;
        }
        let ms = rng.random_range(self.min_delay_ms..=self.max_delay_ms);
        Decision::Delay(Duration::from_millis(ms))
    }

    /// Applies [`Randomizer::decide`] to every item of a batch in order, counting each
    /// delayed item into the window before deciding the next, so the batch can never push
    /// the window past `max_window`. `delivered_of` reads an item's delivery count and
    /// `window` is the window before the batch.
    ///
    /// Returns the kept items in their input order, and the delayed items in input order
    /// with their delays. Every item is in exactly one of the two.
    pub fn split<T>(
        &self,
        batch: Vec<T>,
        delivered_of: impl Fn(&T) -> u64,
        window: usize,
        rng: &mut impl Rng,
    ) -> (Vec<T>, Vec<(T, Duration)>) {
        let mut kept = Vec::with_capacity(batch.len());
        let mut delayed = Vec::new();
        let mut window = window;
        for item in batch {
            match self.decide(delivered_of(&item), window, rng) {
                Decision::Process => kept.push(item),
                Decision::Delay(d) => {
                    delayed.push((item, d));
                    window = window.saturating_add(1);
                }
            }
        }
        (kept, delayed)
    }
}

/// The messages delayed and not yet back, by stream sequence: its [`Window::len`] is the
/// window the randomizer bounds and the `jetsink_randomizer_window` gauge.
///
/// The clock is passed in as milliseconds from any fixed origin the runner picks (e.g. the
/// elapsed time since it started), so the tracker stays pure.
///
/// An entry leaves the window when its message comes back (seen with a delivered count
/// above 1), or `grace` after it was due. The grace exists because a delayed message may
/// never come back to this runner: it can be deleted from the stream or purged, ACKed by
/// another process bound to the same durable, or pulled by another bucket consumer; after a
/// reconnect the server may also have forgotten the NAK's delay and redelivered it in a
/// batch the runner did not observe. Without expiry each such message would pin one slot of
/// the window forever, and enough of them would switch the randomizer off for good. The
/// grace must cover the time a due message can take to be seen: the server redelivers it
/// on the next pull, and the runner pulls between batches, so one fetch-write cycle, which
/// is bounded by AckWait (kept messages must be ACKed within it). Pass the source's
/// AckWait: a shorter grace drops messages still outstanding and lets the real window
/// overshoot `max_window` (the consumer's MaxAckPending remains the hard cap); a longer one
/// only keeps a lost message counted a little longer. The window also starts empty when
/// jetsink restarts, while the server still holds the earlier delays; those come back as
/// redeliveries and are processed at once.
#[derive(Debug, Clone)]
pub struct Window {
    grace_ms: u64,
    /// Stream sequence → the time its entry expires.
    expiry_of: HashMap<u64, u64>,
    /// (expiry, stream sequence), ordered by expiry.
    by_expiry: BTreeSet<(u64, u64)>,
}

impl Window {
    /// An empty window whose entries expire `grace` after they are due (see [`Window`]
    /// for the choice of `grace`: the source's AckWait).
    pub fn new(grace: Duration) -> Window {
        Window {
            grace_ms: duration_ms(grace),
            expiry_of: HashMap::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    /// The current window: messages delayed and neither back nor expired.
    pub fn len(&self) -> usize {
        self.expiry_of.len()
    }

    /// True when no message is out.
    pub fn is_empty(&self) -> bool {
        self.expiry_of.is_empty()
    }

    /// Whether the message with this stream sequence is in the window.
    pub fn contains(&self, stream_sequence: u64) -> bool {
        self.expiry_of.contains_key(&stream_sequence)
    }

    /// Records that the message with this stream sequence was NAKed at `now_ms` with
    /// `delay`: it is due at `now_ms + delay` and expires `grace` later. Recording a
    /// sequence already in the window replaces its entry.
    pub fn delayed(&mut self, stream_sequence: u64, now_ms: u64, delay: Duration) {
        self.remove(stream_sequence);
        let expiry = now_ms
            .saturating_add(duration_ms(delay))
            .saturating_add(self.grace_ms);
        self.expiry_of.insert(stream_sequence, expiry);
        self.by_expiry.insert((expiry, stream_sequence));
    }

    /// Notes a fetched message: a redelivery (`delivered` > 1) leaves the window. Returns
    /// true when it was in the window, that is when a delayed message came back (the
    /// `jetsink_randomizer_redelivered_total` counter); false for first deliveries and for
    /// redeliveries the randomizer did not cause (AckWait expiry, a restart).
    pub fn observe(&mut self, stream_sequence: u64, delivered: u64) -> bool {
        delivered > 1 && self.remove(stream_sequence)
    }

    /// Removes a message from the window whatever its delivery count, e.g. when its delayed
    /// NAK could not be sent (it then comes back through AckWait instead). Returns true
    /// when it was there.
    pub fn remove(&mut self, stream_sequence: u64) -> bool {
        match self.expiry_of.remove(&stream_sequence) {
            Some(expiry) => {
                self.by_expiry.remove(&(expiry, stream_sequence));
                true
            }
            None => false,
        }
    }

    /// Drops every entry whose due time plus grace is at or before `now_ms`, and returns
    /// their stream sequences in expiry order (for a debug log: these messages did not come
    /// back in time).
    pub fn expire(&mut self, now_ms: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        while let Some(&(expiry, seq)) = self.by_expiry.first() {
            if expiry > now_ms {
                break;
            }
            self.by_expiry.pop_first();
            self.expiry_of.remove(&seq);
            gone.push(seq);
        }
        gone
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The bucket a publisher sends one message to: uniform in `0..count`, or 0 when `count` is
/// 0 (validation requires at least 2). With
/// [`crate::config::buckets::bucket_subject`] it gives the subject.
pub fn random_bucket(count: u32, rng: &mut impl Rng) -> u32 {
    if count == 0 {
        0
    } else {
        rng.random_range(0..count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn cfg(p: f64, min: u64, max: u64, max_window: usize, adaptive: bool) -> RandomizerConfig {
        RandomizerConfig {
            enabled: true,
            process_immediately_probability: p,
            min_delay_ms: min,
            max_delay_ms: max,
            max_window,
            adaptive,
            ..RandomizerConfig::default()
        }
    }

    fn randomizer(p: f64, min: u64, max: u64, max_window: usize, adaptive: bool) -> Randomizer {
        Randomizer::new(&cfg(p, min, max, max_window, adaptive))
    }

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn with_p_0_every_first_delivery_is_delayed_until_the_window_is_full_and_redeliveries_are_written(
    ) {
        let r = randomizer(0.0, 100, 200, 50, false);
        let mut rng = StdRng::seed_from_u64(7);
        let (kept, delayed) = r.split((0..80).collect::<Vec<u64>>(), |_| 1, 0, &mut rng);
        assert_eq!(
            delayed.len(),
            50,
            "every first delivery while the window has room"
        );
        assert_eq!(
            kept,
            (50..80).collect::<Vec<u64>>(),
            "then the full window writes"
        );
        for (_, d) in &delayed {
            assert!((100..=200).contains(&ms(*d)));
        }
        let (kept, delayed) = r.split((0..80).collect::<Vec<u64>>(), |_| 2, 0, &mut rng);
        assert_eq!(
            (kept.len(), delayed.len()),
            (80, 0),
            "a redelivery is never delayed"
        );
    }

    #[test]
    fn decision_table() {
        // (P, delivered, window, max_window, adaptive) → delayed at all over 200 draws?
        let cases: &[(f64, u64, usize, usize, bool, bool)] = &[
            (0.5, 1, 0, 10, false, true),
            (0.5, 1, 9, 10, false, true),
            (0.5, 1, 10, 10, false, false),
            (0.5, 1, 11, 10, false, false),
            (0.5, 1, 10, 10, true, false),
            (0.5, 2, 0, 10, false, false),
            (0.5, 7, 0, 10, true, false),
            (0.5, 0, 0, 10, false, false),
            (1.0, 1, 0, 10, false, false),
            (0.01, 1, 0, 10, true, true),
        ];
        for &(p, delivered, window, max_window, adaptive, can_delay) in cases {
            let r = randomizer(p, 10, 20, max_window, adaptive);
            let mut rng = StdRng::seed_from_u64(7);
            let delayed = (0..200)
                .map(|_| r.decide(delivered, window, &mut rng))
                .filter(|d| matches!(d, Decision::Delay(_)))
                .count();
            assert_eq!(
                delayed > 0,
                can_delay,
                "P={p} delivered={delivered} window={window}/{max_window} adaptive={adaptive}: {delayed}"
            );
        }
    }

    #[test]
    fn a_disabled_randomizer_processes_everything() {
        let r = Randomizer::new(&RandomizerConfig::default());
        assert!(!r.enabled());
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..1_000 {
            assert_eq!(r.decide(1, 0, &mut rng), Decision::Process);
        }
        assert_eq!(r.delay_probability(0), 0.0);
    }

    #[test]
    fn delay_probability_table() {
        let r = randomizer(0.6, 10, 20, 100, true);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(r.delay_probability(0), 0.4));
        assert!(close(r.delay_probability(25), 0.3));
        assert!(close(r.delay_probability(50), 0.2));
        assert!(close(r.delay_probability(99), 0.004));
        assert_eq!(r.delay_probability(100), 0.0);
        assert_eq!(r.delay_probability(usize::MAX), 0.0);
        let flat = randomizer(0.6, 10, 20, 100, false);
        assert!(close(flat.delay_probability(0), 0.4));
        assert!(close(flat.delay_probability(99), 0.4));
        assert_eq!(flat.delay_probability(100), 0.0);
    }

    #[test]
    fn same_seed_same_decisions() {
        let r = randomizer(0.5, 50, 500, 1_000, true);
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            r.split((0..100u64).collect(), |_| 1, 0, &mut rng)
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn an_invalid_config_is_refused_before_any_randomizer_is_built() {
        let issues =
            crate::config::randomizer::validate_randomizer_fields(&cfg(1.5, 20, 10, 0, true), "");
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "process_immediately_probability",
                "max_delay_ms",
                "max_window"
            ]
        );
    }

    #[test]
    fn split_keeps_order_and_separates_redeliveries() {
        let r = randomizer(0.5, 100, 100, 1_000, false);
        let mut rng = StdRng::seed_from_u64(11);
        // (stream sequence, delivered)
        let batch: Vec<(u64, u64)> = (1..=40)
            .map(|s| (s, if s % 4 == 0 { 2 } else { 1 }))
            .collect();
        let (kept, delayed) = r.split(batch, |m| m.1, 0, &mut rng);
        assert!(kept.iter().filter(|m| m.0 % 4 == 0).count() == 10);
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(delayed.windows(2).all(|w| w[0].0 .0 < w[1].0 .0));
        assert!(delayed.iter().all(|((_, d), t)| *d == 1 && ms(*t) == 100));
        assert!(!delayed.is_empty());
        assert_eq!(kept.len() + delayed.len(), 40);
    }

    #[test]
    fn split_stops_delaying_when_the_window_is_full() {
        let r = randomizer(0.01, 1, 5, 3, false);
        let mut rng = StdRng::seed_from_u64(5);
        let (kept, delayed) = r.split((0..50).collect::<Vec<u32>>(), |_| 1, 1, &mut rng);
        assert_eq!(delayed.len(), 2);
        assert_eq!(kept.len(), 48);
    }

    #[test]
    fn delayed_fraction_approaches_one_minus_p() {
        // 200 000 first deliveries per P on an empty window: the standard deviation of the
        // fraction is at most 0.0012, so 0.01 is more than 8 of them; the seed is fixed.
        for (i, p) in [0.1, 0.5, 0.8, 0.95, 0.999].into_iter().enumerate() {
            for adaptive in [false, true] {
                let r = randomizer(p, 1, 1_000, 10, adaptive);
                let mut rng = StdRng::seed_from_u64(1_000 + i as u64);
                let n = 200_000;
                let delayed = (0..n)
                    .filter(|_| matches!(r.decide(1, 0, &mut rng), Decision::Delay(_)))
                    .count();
                let frac = delayed as f64 / n as f64;
                assert!((frac - (1.0 - p)).abs() < 0.01, "P={p}: delayed {frac}");
            }
        }
    }

    #[test]
    fn delays_are_uniform_over_the_range() {
        let r = randomizer(0.5, 100, 199, 10, false);
        let mut rng = StdRng::seed_from_u64(2);
        let mut counts = [0u32; 100];
        let mut n = 0;
        while n < 100_000 {
            if let Decision::Delay(d) = r.decide(1, 0, &mut rng) {
                counts[(ms(d) - 100) as usize] += 1;
                n += 1;
            }
        }
        // Expected 1000 per value, standard deviation about 31.
        assert!(
            counts.iter().all(|&c| (820..=1180).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn adaptive_window_settles_where_the_config_module_predicts() {
        // One first delivery per millisecond (R = 1000/s), delays 500-1500 ms (D = 1 s),
        // P = 0.5, max_window 1000: a = 500, settled a·M/(a+M) = 333.
        for (adaptive, want) in [(true, 1_000.0 * 500.0 / 1_500.0), (false, 500.0)] {
            let c = cfg(0.5, 500, 1_500, 1_000, adaptive);
            let r = Randomizer::new(&c);
            let predicted = crate::config::randomizer::settled_window(1_000.0, &c);
            assert!((predicted - want).abs() < 1e-9);
            let mut rng = StdRng::seed_from_u64(9);
            let mut window = Window::new(Duration::from_millis(1_000));
            let mut due: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
            let mut sum = 0.0;
            let mut samples = 0.0;
            for now in 0..30_000u64 {
                for seq in due.remove(&now).unwrap_or_default() {
                    assert!(window.observe(seq, 2));
                }
                if let Decision::Delay(d) = r.decide(1, window.len(), &mut rng) {
                    window.delayed(now, now, d);
                    due.entry(now + ms(d)).or_default().push(now);
                }
                assert!(window.len() <= 1_000);
                if now >= 10_000 {
                    sum += window.len() as f64;
                    samples += 1.0;
                }
            }
            let mean = sum / samples;
            assert!(
                (mean - want).abs() < want * 0.05,
                "adaptive={adaptive}: {mean} vs {want}"
            );
        }
    }

    #[test]
    fn window_tracks_delays_until_they_return_or_expire() {
        let mut w = Window::new(Duration::from_millis(1_000));
        assert!(w.is_empty());
        w.delayed(10, 0, Duration::from_millis(100)); // expires at 1100
        w.delayed(11, 0, Duration::from_millis(500)); // expires at 1500
        w.delayed(12, 50, Duration::from_millis(100)); // expires at 1150
        assert_eq!(w.len(), 3);
        assert!(w.contains(11));
        // A first delivery of a sequence in the window does not remove it.
        assert!(!w.observe(11, 1));
        assert!(w.observe(11, 2));
        assert!(!w.observe(11, 3));
        assert!(!w.observe(99, 2));
        assert_eq!(w.len(), 2);
        assert!(w.expire(1_099).is_empty());
        assert_eq!(w.expire(1_100), [10]);
        assert_eq!(w.expire(u64::MAX), [12]);
        assert!(w.is_empty());
        // Re-recording replaces the entry; remove works whatever the count.
        w.delayed(5, 0, Duration::from_millis(10));
        w.delayed(5, 5_000, Duration::from_millis(10));
        assert_eq!(w.len(), 1);
        assert!(w.expire(2_000).is_empty());
        assert!(w.remove(5));
        assert!(!w.remove(5));
        // Huge clocks and delays saturate instead of overflowing.
        w.delayed(6, u64::MAX - 1, Duration::MAX);
        assert!(w.expire(u64::MAX - 1).is_empty());
        assert_eq!(w.expire(u64::MAX), [6]);
    }

    #[test]
    fn random_bucket_is_in_range_and_covers_every_bucket() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut seen = [0u32; 16];
        for _ in 0..16_000 {
            seen[random_bucket(16, &mut rng) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..=1200).contains(&c)), "{seen:?}");
        assert_eq!(random_bucket(0, &mut rng), 0);
        assert_eq!(random_bucket(1, &mut rng), 0);
    }

    fn any_randomizer() -> impl Strategy<Value = Randomizer> {
        (
            0.001f64..=1.0,
            0u64..5_000,
            0u64..5_000,
            1usize..200,
            any::<bool>(),
        )
            .prop_map(|(p, a, b, max_window, adaptive)| {
                let (min, max) = (a.min(b), a.max(b).max(1));
                randomizer(p, min, max, max_window, adaptive)
            })
    }

    proptest! {
        #[test]
        fn a_redelivered_message_is_never_delayed(
            r in any_randomizer(), delivered in 2u64.., window in 0usize..300, seed in any::<u64>()
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            for _ in 0..20 {
                prop_assert_eq!(r.decide(delivered, window, &mut rng), Decision::Process);
            }
        }

        #[test]
        fn split_never_exceeds_the_window_bound(
            r in any_randomizer(),
            delivered in proptest::collection::vec(1u64..=3, 0..400),
            window in 0usize..300,
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let n = delivered.len();
            let (kept, delayed) = r.split(delivered, |d| *d, window, &mut rng);
            prop_assert_eq!(kept.len() + delayed.len(), n);
            if window >= r.max_window() {
                prop_assert!(delayed.is_empty());
            } else {
                prop_assert!(window + delayed.len() <= r.max_window());
            }
            prop_assert!(delayed.iter().all(|(d, _)| *d == 1));
        }

        #[test]
        fn delays_stay_within_min_and_max(
            p in 0.001f64..0.999, a in 0u64..100_000, b in 0u64..100_000, seed in any::<u64>()
        ) {
            let (min, max) = (a.min(b), a.max(b).max(1));
            let r = randomizer(p, min, max, 1_000, false);
            let mut rng = StdRng::seed_from_u64(seed);
            for _ in 0..50 {
                if let Decision::Delay(d) = r.decide(1, 0, &mut rng) {
                    prop_assert!((min..=max).contains(&ms(d)), "{} not in [{}, {}]", ms(d), min, max);
                }
            }
        }

        #[test]
        fn with_p_one_nothing_is_delayed(
            adaptive in any::<bool>(),
            delivered in proptest::collection::vec(0u64..4, 0..300),
            window in 0usize..100,
            seed in any::<u64>(),
        ) {
            let r = randomizer(1.0, 0, 10, 50, adaptive);
            let mut rng = StdRng::seed_from_u64(seed);
            let (kept, delayed) = r.split(delivered.clone(), |d| *d, window, &mut rng);
            prop_assert!(delayed.is_empty());
            prop_assert_eq!(kept, delivered);
        }

        #[test]
        fn kept_and_delayed_keep_the_input_order(
            r in any_randomizer(),
            delivered in proptest::collection::vec(1u64..=2, 0..300),
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let items: Vec<(usize, u64)> = delivered.into_iter().enumerate().collect();
            let (kept, delayed) = r.split(items.clone(), |m| m.1, 0, &mut rng);
            prop_assert!(kept.windows(2).all(|w| w[0].0 < w[1].0));
            prop_assert!(delayed.windows(2).all(|w| w[0].0 .0 < w[1].0 .0));
            // Together they are exactly the input.
            let mut all: Vec<(usize, u64)> = kept.into_iter().chain(delayed.into_iter().map(|(m, _)| m)).collect();
            all.sort_unstable();
            prop_assert_eq!(all, items);
        }

        #[test]
        fn delay_probability_never_increases_with_the_window(
            r in any_randomizer(), a in 0usize..300, b in 0usize..300
        ) {
            let (lo, hi) = (a.min(b), a.max(b));
            let (p_lo, p_hi) = (r.delay_probability(lo), r.delay_probability(hi));
            prop_assert!(p_hi <= p_lo, "p({})={} < p({})={}", lo, p_lo, hi, p_hi);
            prop_assert!((0.0..=1.0).contains(&p_lo));
            if hi >= r.max_window() {
                prop_assert_eq!(p_hi, 0.0);
            }
        }

        #[test]
        fn window_len_counts_recorded_minus_returned(
            ops in proptest::collection::vec((0u64..50, any::<bool>(), 0u64..100), 0..200)
        ) {
            // Model: a set of sequences; delays are recorded at time 0 and never expire
            // before the end (grace one hour).
            let mut w = Window::new(Duration::from_secs(3_600));
            let mut model = std::collections::BTreeSet::new();
            for (seq, record, delay) in ops {
                if record {
                    w.delayed(seq, 0, Duration::from_millis(delay));
                    model.insert(seq);
                } else {
                    prop_assert_eq!(w.observe(seq, 2), model.remove(&seq));
                }
                prop_assert_eq!(w.len(), model.len());
            }
            let expired = w.expire(u64::MAX);
            prop_assert_eq!(expired.len(), model.len());
            prop_assert!(w.is_empty());
        }
    }
}
