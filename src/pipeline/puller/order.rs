//! In which order one pull visits a sink's consumers: one consumer; random subject buckets
//! (a fresh random order each pull, or all at once); per-lane consumers, whose lanes take
//! turns by weight or, with `consumer_pull: "strict"`, put the first lane first on every
//! pull. The orders themselves are pure functions ([`lanes::pull_order`],
//! [`lanes::strict_pull_order`]); this keeps the state between pulls (the cycle position,
//! when the other lanes last came first) and the clock reading the strict bound needs.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use tokio::time::Instant;

use crate::config::buckets::BucketPull;
use crate::config::lanes::ConsumerPull;
use crate::config::SinkSpec;
use crate::pipeline::lanes;

/// How a sink's pulls visit its consumers.
pub(super) enum Order {
    /// One consumer.
    Single,
    /// Random subject buckets: a random order kept for `every` pulls
    /// (`source.buckets.reshuffle_every`, a fresh one each pull by default); with
    /// `concurrent`, every bucket pulled at once and interleaved (`source.buckets.pull`).
    Buckets {
        concurrent: bool,
        every: u32,
        /// The order in use, and how many more pulls it serves.
        kept: Vec<usize>,
        left: u32,
    },
    /// Per-lane consumers.
    Lanes {
        /// The lane of each consumer.
        of_consumer: Vec<usize>,
        /// Lane weights.
        weights: Vec<u32>,
        /// Position in the weighted cycle of lanes (of the lanes after the first, when
        /// strict); it turns every pull.
        cursor: usize,
        /// With `consumer_pull: "strict"`.
        strict: Option<Strict>,
    },
}

/// The state of strict lane priority between pulls.
pub(super) struct Strict {
    /// `strict_max_wait_ms`.
    max_wait: Duration,
    /// When a pull last asked the other lanes first (or the sink started).
    others_first_at: Option<Instant>,
}

impl Order {
    /// The order `spec` asks for over its `consumers` bound consumers.
    pub(super) fn for_sink(spec: &SinkSpec, consumers: usize) -> Order {
        let of_consumer: Option<Vec<usize>> = spec
            .consumer_bindings()
            .into_iter()
            .map(|(_, lane)| lane)
            .collect();
        let lanes = &spec.delivery.priority_lanes;
        match of_consumer {
            _ if consumers == 1 => Order::Single,
            Some(of_consumer) => Order::Lanes {
                of_consumer,
                weights: lanes.lanes.iter().map(|l| l.weight).collect(),
                cursor: usize::MAX,
                strict: (lanes.consumer_pull == ConsumerPull::Strict).then(|| Strict {
                    max_wait: Duration::from_millis(lanes.strict_max_wait_ms),
                    others_first_at: None,
                }),
            },
            None => {
                let b = spec.source.buckets.as_ref();
                Order::Buckets {
                    concurrent: b.is_some_and(|b| b.pull == BucketPull::Concurrent),
                    every: b.map_or(1, |b| b.reshuffle_every.max(1)),
                    kept: Vec::new(),
                    left: 0,
                }
            }
        }
    }

    /// Whether the sink reads one consumer.
    pub(super) fn is_single(&self) -> bool {
        matches!(self, Order::Single)
    }

    /// Whether the buckets are pulled all at once.
    pub(super) fn concurrent(&self) -> bool {
        matches!(
            self,
            Order::Buckets {
                concurrent: true,
                ..
            }
        )
    }

    /// Whether per-lane consumers pull with strict priority (`consumer_pull: "strict"`).
    pub(super) fn is_strict(&self) -> bool {
        matches!(
            self,
            Order::Lanes {
                strict: Some(_),
                ..
            }
        )
    }

    /// The visiting order of the next pull over `consumers` consumers, at `now`.
    pub(super) fn next(&mut self, consumers: usize, rng: &mut StdRng, now: Instant) -> Vec<usize> {
        match self {
            Order::Single => vec![0],
            Order::Buckets {
                every, kept, left, ..
            } => {
                if *left == 0 || kept.len() != consumers {
                    *kept = (0..consumers).collect();
                    kept.shuffle(rng);
                    *left = *every;
                }
                *left -= 1;
                kept.clone()
            }
            Order::Lanes {
                of_consumer,
                weights,
                cursor,
                strict: None,
            } => {
                *cursor = cursor.wrapping_add(1);
                lanes::pull_order(of_consumer, weights, *cursor)
            }
            Order::Lanes {
                of_consumer,
                weights,
                cursor,
                strict: Some(strict),
            } => {
                // The others' cycle turns every pull, so they share by weight the pulls
                // the first lane leaves them (it had nothing) as well as their due ones.
                *cursor = cursor.wrapping_add(1);
                let since = *strict.others_first_at.get_or_insert(now);
                let others_first = now.duration_since(since) >= strict.max_wait;
                if others_first {
                    strict.others_first_at = Some(now);
                }
                lanes::strict_pull_order(of_consumer, weights, *cursor, others_first)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn buckets(every: u32) -> Order {
        Order::Buckets {
            concurrent: false,
            every,
            kept: Vec::new(),
            left: 0,
        }
    }

    #[test]
    fn a_bucket_order_is_kept_for_reshuffle_every_pulls_then_drawn_again() {
        let mut rng = StdRng::seed_from_u64(7);
        let now = Instant::now();
        let mut o = buckets(3);
        let first: Vec<Vec<usize>> = (0..3).map(|_| o.next(8, &mut rng, now)).collect();
        assert!(first.iter().all(|x| *x == first[0]), "{first:?}");
        let mut sorted = first[0].clone();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..8).collect::<Vec<_>>(),
            "a permutation of the buckets"
        );
        // Drawn anew every third pull after that: among ten draws of 8! orders, some differ.
        let later: Vec<Vec<usize>> = (0..30).map(|_| o.next(8, &mut rng, now)).collect();
        assert!(later.iter().any(|x| *x != first[0]));
        let mut fresh = buckets(1);
        let a = fresh.next(8, &mut rng, now);
        let b: Vec<Vec<usize>> = (0..10).map(|_| fresh.next(8, &mut rng, now)).collect();
        assert!(b.iter().any(|x| *x != a), "the default draws every pull");
    }

    fn strict(max_wait_ms: u64) -> Order {
        Order::Lanes {
            of_consumer: vec![0, 1, 2],
            weights: vec![1, 1, 1],
            cursor: usize::MAX,
            strict: Some(Strict {
                max_wait: Duration::from_millis(max_wait_ms),
                others_first_at: None,
            }),
        }
    }

    #[test]
    fn strict_puts_the_others_first_once_the_wait_bound_passed_and_restarts_it() {
        let mut o = strict(1_000);
        let mut rng = StdRng::seed_from_u64(1);
        let t0 = Instant::now();
        let first = |o: &mut Order, rng: &mut StdRng, ms: u64| {
            o.next(3, rng, t0 + Duration::from_millis(ms))[0]
        };
        assert_eq!(first(&mut o, &mut rng, 0), 0);
        assert_eq!(first(&mut o, &mut rng, 999), 0);
        // Due: one of the others (by their cycle) is asked first, and the bound restarts.
        assert_ne!(first(&mut o, &mut rng, 1_000), 0);
        assert_eq!(first(&mut o, &mut rng, 1_001), 0);
        assert_eq!(first(&mut o, &mut rng, 1_999), 0);
        assert_ne!(first(&mut o, &mut rng, 2_000), 0);
    }

    #[test]
    fn the_others_share_their_turns_by_their_cycle() {
        let mut o = strict(1);
        let mut rng = StdRng::seed_from_u64(2);
        let t0 = Instant::now();
        let firsts: Vec<usize> = (0..6)
            .map(|i| o.next(3, &mut rng, t0 + Duration::from_millis(1 + i))[0])
            .collect();
        // From the second pull on, every pull is due (1 ms bound): lanes 1 and 2 alternate.
        assert_eq!(&firsts[1..], &[2, 1, 2, 1, 2]);
    }
}
