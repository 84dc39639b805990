//! How much the pull-ahead slot takes before the pull task stops pulling ahead: a number
//! of batches, and past the first two only while what waits is small, so pulling deeper
//! ahead of small batches never holds more payload than two full-size pulls would.

/// Batches always allowed to wait whatever their size (up to the sink's depth): two full
/// pulls, the memory bound the docs give per sink.
const FULL_SIZE_AHEAD: usize = 2;

/// The slot's room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Room {
    /// Most batches waiting in the slot.
    pub(super) batches: usize,
    /// A pull's byte cap (`delivery.max_batch_bytes`): past [`FULL_SIZE_AHEAD`] batches,
    /// one more is pulled only while those waiting carry at most this many payload bytes,
    /// so the next pull (at most this many) leaves at most two pulls' worth waiting.
    pub(super) bytes: usize,
}

impl Room {
    /// Room for `batches` batches of any size (buckets pulled at once, tests).
    pub(super) fn batches(batches: usize) -> Room {
        Room {
            batches,
            bytes: usize::MAX,
        }
    }

    /// Whether one more pull fits beside `waiting` batches carrying `waiting_bytes`.
    pub(super) fn fits(self, waiting: usize, waiting_bytes: usize) -> bool {
        waiting < self.batches && (waiting < FULL_SIZE_AHEAD || waiting_bytes <= self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_batches_go_to_the_depth_and_large_ones_stop_at_two() {
        let room = Room {
            batches: 4,
            bytes: 1_000,
        };
        assert!(room.fits(0, 0));
        assert!(room.fits(1, 1_000), "the second always");
        assert!(room.fits(2, 400), "two small ones: a third");
        assert!(
            room.fits(3, 1_000),
            "three carrying one pull's worth: a fourth"
        );
        assert!(!room.fits(4, 10), "the depth");
        assert!(
            !room.fits(2, 1_001),
            "two carrying more than one pull: no third"
        );
        assert!(!room.fits(2, 2_000), "two full pulls");
    }

    #[test]
    fn a_depth_of_one_or_two_ignores_bytes() {
        assert!(Room::batches(1).fits(0, usize::MAX));
        assert!(!Room::batches(1).fits(1, 0));
        let two = Room {
            batches: 2,
            bytes: 1,
        };
        assert!(two.fits(1, 1_000_000));
        assert!(!two.fits(2, 0));
    }

    proptest! {
        /// Filling the slot pull by pull, each pull at most `bytes` (as the server caps a
        /// pull), never leaves more than the depth waiting, nor more than two pulls'
        /// bytes once past two batches.
        #[test]
        fn what_waits_stays_within_the_depth_and_two_pulls_of_bytes(
            batches in 1usize..8,
            bytes in 1usize..10_000,
            sizes in proptest::collection::vec(0usize..10_000, 0..20),
        ) {
            let room = Room { batches, bytes };
            let (mut waiting, mut held) = (0usize, 0usize);
            for size in sizes.into_iter().map(|s| s.min(bytes)) {
                if !room.fits(waiting, held) {
                    break;
                }
                waiting += 1;
                held += size;
                prop_assert!(waiting <= batches);
                if waiting > FULL_SIZE_AHEAD {
                    prop_assert!(held <= 2 * bytes);
                }
            }
        }
    }
}
