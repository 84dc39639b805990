//! How the buckets of one concurrent pull round become one batch: a uniformly random
//! interleaving of their messages that keeps each bucket's own order, so every bucket stays
//! first-in first-out while the batch mixes them. Pure: the rng is passed in.

use rand::Rng;

/// Merges `groups` into one sequence: at each position the next element is taken from a
/// group chosen with probability proportional to what it has left, which makes every
/// interleaving that keeps the groups' orders equally likely.
pub fn interleave<T>(groups: Vec<Vec<T>>, rng: &mut impl Rng) -> Vec<T> {
    let total: usize = groups.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut left: Vec<std::vec::IntoIter<T>> = groups.into_iter().map(Vec::into_iter).collect();
    let mut remaining: Vec<usize> = left.iter().map(|g| g.len()).collect();
    let mut todo = total;
    while todo > 0 {
        let mut pick = rng.random_range(0..todo);
        let mut g = 0;
        while pick >= remaining[g] {
            pick -= remaining[g];
            g += 1;
        }
        if let Some(item) = left[g].next() {
            out.push(item);
        }
        remaining[g] -= 1;
        todo -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    proptest! {
        #[test]
        fn every_element_comes_once_and_each_group_keeps_its_order(
            sizes in proptest::collection::vec(0usize..40, 0..20),
            seed in any::<u64>(),
        ) {
            let groups: Vec<Vec<(usize, usize)>> = sizes
                .iter()
                .enumerate()
                .map(|(g, &n)| (0..n).map(|i| (g, i)).collect())
                .collect();
            let out = interleave(groups, &mut StdRng::seed_from_u64(seed));
            prop_assert_eq!(out.len(), sizes.iter().sum::<usize>());
            let mut next = vec![0usize; sizes.len()];
            for (g, i) in out {
                prop_assert_eq!(i, next[g]);
                next[g] += 1;
            }
            prop_assert_eq!(next, sizes);
        }
    }

    #[test]
    fn both_orders_of_two_single_elements_come_up_about_equally() {
        let mut rng = StdRng::seed_from_u64(7);
        let first_a = (0..10_000)
            .filter(|_| interleave(vec![vec!['a'], vec!['b']], &mut rng)[0] == 'a')
            .count();
        // Binomial(10000, 0.5): 4,700..5,300 is more than 6 standard deviations each side.
        assert!((4_700..=5_300).contains(&first_a), "{first_a}");
    }
}
