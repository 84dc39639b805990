//! How a batch is spread over a database sink's connections (`connections`): cut into
//! runs of the batch, one per connection, each committed on its own.
//!
//! Runs are contiguous, so each is a slice of the batch and an error's index maps back by
//! adding the run's start. A batch is not cut when it is too small for the cut to pay
//! (fewer than [`MIN_RUN`] messages per run), or when one idempotency key appears twice in
//! it: two messages for one row must meet on one connection, where the write decides the
//! winner as it does without connections (the newest for upsert, the stored row for
//! insert_ignore); on two connections the commit order would.

use std::collections::HashSet;
use std::ops::Range;

use crate::envelope::Envelope;

/// Fewest messages a run holds: below it the round trip of one more commit costs more than
/// writing the rows alongside another run saves.
pub(crate) const MIN_RUN: usize = 64;

/// The runs `batch` is written in on up to `connections` connections: one run, the whole
/// batch, unless cutting is allowed (`cut`, the table's key tells messages apart) and pays.
pub(crate) fn runs(batch: &[Envelope], connections: usize, cut: bool) -> Vec<Range<usize>> {
    let n = (batch.len() / MIN_RUN).min(connections).max(1);
    if n == 1 || !cut || repeats_a_key(batch) {
        let whole = 0..batch.len();
        return vec![whole];
    }
    let (base, extra) = (batch.len() / n, batch.len() % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let run = start..start + len;
            start += len;
            run
        })
        .collect()
}

fn repeats_a_key(batch: &[Envelope]) -> bool {
    let mut seen = HashSet::with_capacity(batch.len());
    batch
        .iter()
        .any(|e| !seen.insert(e.idempotency_key.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The batch in one run.
    fn whole(len: usize) -> Vec<Range<usize>> {
        let run = 0..len;
        vec![run]
    }

    fn batch(keys: &[u32]) -> Vec<Envelope> {
        use crate::config::IdempotencyKey;
        use crate::envelope::{normalize, Delivery};
        keys.iter()
            .map(|&k| {
                let delivery = Delivery {
                    stream: "S",
                    consumer: "c",
                    stream_sequence: u64::from(k),
                    consumer_sequence: 1,
                    delivered: 1,
                    published: time::OffsetDateTime::UNIX_EPOCH,
                };
                let none: [(&str, &str); 0] = [];
                normalize(
                    "s.x",
                    delivery,
                    none,
                    bytes::Bytes::new(),
                    IdempotencyKey::StreamSequence,
                )
            })
            .collect()
    }

    #[test]
    fn a_batch_is_cut_only_when_each_run_is_large_enough_and_no_key_repeats() {
        let keys: Vec<u32> = (0..500).collect();
        assert_eq!(runs(&batch(&keys), 2, true), [0..250, 250..500]);
        assert_eq!(runs(&batch(&keys), 3, true), [0..167, 167..334, 334..500]);
        // 500 / 64 = 7 runs at most, whatever the connections.
        assert_eq!(runs(&batch(&keys), 16, true).len(), 7);
        assert_eq!(runs(&batch(&keys), 1, true), whole(500));
        assert_eq!(runs(&batch(&keys), 2, false), whole(500));
        assert_eq!(runs(&batch(&keys[..127]), 2, true), whole(127));
        assert_eq!(runs(&batch(&keys[..128]), 2, true), [0..64, 64..128]);
        let mut twice = keys.clone();
        twice[400] = 3;
        assert_eq!(runs(&batch(&twice), 2, true), whole(500));
        assert_eq!(runs(&[], 4, true), whole(0));
    }

    proptest! {
        #[test]
        fn runs_cover_the_batch_in_order_once(
            len in 0usize..2000,
            connections in 1usize..=16,
            cut in any::<bool>(),
        ) {
            let keys: Vec<u32> = (0..len as u32).collect();
            let got = runs(&batch(&keys), connections, cut);
            prop_assert!(got.len() <= connections);
            let mut next = 0;
            for r in &got {
                prop_assert_eq!(r.start, next);
                prop_assert!(got.len() == 1 || r.len() >= MIN_RUN);
                next = r.end;
            }
            prop_assert_eq!(next, len);
        }
    }
}
