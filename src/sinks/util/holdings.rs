//! What an archive holds: the catalog an archive destination (Parquet files, s3 objects,
//! JSON Lines files) keeps of the stream sequences it has stored, so that every message of
//! a batch — first delivery or not — is checked against what is stored, and one already
//! stored is committed without a second copy. Pure: names, ranges and sets in, decisions
//! out; the destinations list their folder, read what this asks for, and tell it what they
//! wrote.
//!
//! Why every message: the server's own view of what it delivered cannot be trusted to say
//! which messages are new. A nats-server killed and restarted can roll its consumer state
//! back and send written messages again as first deliveries (delivered 1); a `jetsink
//! replay` writes messages the sink's consumer has not reached yet, which that consumer
//! later delivers as first deliveries too. Only the archive knows what it holds.
//!
//! The catalog is built from one listing of the folder and then kept in step with every
//! write of this process (a destination that may have lost track — a write that failed
//! part-way — builds it again from a fresh listing). It holds:
//! - **runs**: ranges every sequence of which is stored — a name without hash, a file
//!   whose sequences have no gap — merged when they touch, so an archive written in stream
//!   order is a handful of runs however many files it has;
//! - **gapped** entries: a stored unit whose sequences have gaps (a hashed name, a file
//!   written from several consumers or around refused messages), known by its range and
//!   name; its sequences are read only when a wanted sequence falls in its range, and kept
//!   in a bounded cache ([`super::archive::Known`]) by the caller.
//!
//! The common case costs one comparison per batch: a batch whose lowest sequence is above
//! the highest one stored ([`Holdings::top`]) holds nothing stored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::archive::Named;

/// A stored unit with gaps: its highest sequence and its name (its lowest is the key it
/// is filed under).
#[derive(Debug, Clone)]
struct Gapped {
    last: u64,
    stem: Arc<str>,
}

/// What one archive folder is known to hold.
#[derive(Debug, Default)]
pub struct Holdings {
    /// Every sequence of each run is stored: first -> last, disjoint and not touching.
    runs: BTreeMap<u64, u64>,
    /// Units with gaps, by their lowest sequence.
    gapped: BTreeMap<u64, Vec<Gapped>>,
    /// The widest `last - first` of a gapped unit, so those that may hold a sequence `s`
    /// are all filed in `s - span ..= s`.
    span: u64,
    /// The highest sequence stored, or that a gapped unit may hold.
    top: Option<u64>,
    /// Gapped units filed.
    units: usize,
}

impl Holdings {
    /// An empty catalog: nothing stored.
    pub fn new() -> Holdings {
        Holdings::default()
    }

    /// Takes a name made by [`super::archive::object_name`] as listed or just written: one
    /// without hash holds its whole range, a hashed one is filed to be read when needed.
    pub fn add_named(&mut self, stem: &str, named: Named) {
        if named.hashed {
            self.add_gapped(stem, named.first, named.last);
        } else {
            self.add_run(named.first, named.last);
        }
    }

    /// Takes the sorted sequences a unit named `stem` holds: as runs when they have no
    /// gap, else filed as gapped (the caller keeps the set where [`Holdings::held`] can
    /// find it by `stem`, or lets it be read again).
    pub fn add_unit(&mut self, stem: &str, sorted: &[u64]) {
        let (Some(&first), Some(&last)) = (sorted.first(), sorted.last()) else {
            return;
        };
        if gapless(sorted) {
            self.add_run(first, last);
        } else {
            self.add_gapped(stem, first, last);
        }
    }

    /// Records that every sequence of `first..=last` is stored.
    pub fn add_run(&mut self, first: u64, last: u64) {
        if first > last {
            return;
        }
        let (mut lo, mut hi) = (first, last);
        // A run that starts at or before `hi + 1` and ends at or after `lo - 1` touches.
        let touching: Vec<(u64, u64)> = self
            .runs
            .range(..=hi.saturating_add(1))
            .rev()
            .take_while(|(_, &end)| end.saturating_add(1) >= lo)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.runs.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.runs.insert(lo, hi);
        self.raise_top(hi);
    }

    fn add_gapped(&mut self, stem: &str, first: u64, last: u64) {
        let filed = self.gapped.entry(first).or_default();
        if filed.iter().any(|g| g.last == last && *g.stem == *stem) {
            return;
        }
        filed.push(Gapped {
            last,
            stem: stem.into(),
        });
        self.units += 1;
        self.span = self.span.max(last - first);
        self.raise_top(last);
    }

    fn raise_top(&mut self, last: u64) {
        self.top = Some(self.top.map_or(last, |t| t.max(last)));
    }

    /// The highest sequence stored (or that a gapped unit may hold); `None` when nothing
    /// is. A sequence above it is not stored.
    pub fn top(&self) -> Option<u64> {
        self.top
    }

    /// Gapped units filed (each costs its name in memory).
    pub fn gapped_units(&self) -> usize {
        self.units
    }

    /// Runs kept.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Whether the runs hold `seq`.
    fn in_runs(&self, seq: u64) -> bool {
        self.runs
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &end)| end >= seq)
    }

    /// The sequences of `batch` that may be stored: those at or below [`Holdings::top`].
    /// Sorted, without repeats.
    pub fn may_hold(&self, batch: impl IntoIterator<Item = u64>) -> BTreeSet<u64> {
        match self.top {
            None => BTreeSet::new(),
            Some(top) => batch.into_iter().filter(|&s| s <= top).collect(),
        }
    }

    /// The names of the gapped units whose range holds a sequence of `wanted` that the
    /// runs do not: the units whose sets [`Holdings::held`] will need.
    pub fn to_read(&self, wanted: &BTreeSet<u64>) -> Vec<Arc<str>> {
        let rest: BTreeSet<u64> = wanted
            .iter()
            .copied()
            .filter(|&s| !self.in_runs(s))
            .collect();
        let (Some(&lo), Some(&hi)) = (rest.first(), rest.last()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (&first, filed) in self.gapped.range(lo.saturating_sub(self.span)..=hi) {
            for g in filed {
                if rest.range(first..=g.last).next().is_some() {
                    out.push(g.stem.clone());
                }
            }
        }
        out
    }

    /// Which of `wanted` are stored: held by a run, or found in the set of a gapped unit
    /// whose range holds it. `set` gives a unit's sorted sequences by name; `None` (not
    /// read, unreadable, not a unit this naming wrote) holds nothing, so a doubt writes
    /// the message again rather than skipping it.
    pub fn held(
        &self,
        wanted: &BTreeSet<u64>,
        mut set: impl FnMut(&str) -> Option<Arc<[u64]>>,
    ) -> BTreeSet<u64> {
        let mut held = BTreeSet::new();
        let mut rest = BTreeSet::new();
        for &s in wanted {
            if self.in_runs(s) {
                held.insert(s);
            } else {
                rest.insert(s);
            }
        }
        let (Some(&lo), Some(&hi)) = (rest.first(), rest.last()) else {
            return held;
        };
        for (&first, filed) in self.gapped.range(lo.saturating_sub(self.span)..=hi) {
            for g in filed {
                let inside: Vec<u64> = rest.range(first..=g.last).copied().collect();
                if inside.is_empty() {
                    continue;
                }
                let Some(seqs) = set(&g.stem) else {
                    continue;
                };
                for s in inside {
                    if seqs.binary_search(&s).is_ok() {
                        rest.remove(&s);
                        held.insert(s);
                    }
                }
            }
        }
        held
    }
}

/// Whether sorted `seqs` (repeats allowed) have no gap.
pub fn gapless(sorted: &[u64]) -> bool {
    sorted.windows(2).all(|w| w[1] - w[0] <= 1)
}

/// The runs of sorted `seqs` (repeats allowed): `first..=last` ranges without gaps.
pub fn runs_of(sorted: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &s in sorted {
        match out.last_mut() {
            Some((_, last)) if s <= last.saturating_add(1) => *last = (*last).max(s),
            _ => out.push((s, s)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::util::archive::object_name;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn set(seqs: &[u64]) -> BTreeSet<u64> {
        seqs.iter().copied().collect()
    }

    #[test]
    fn runs_merge_when_they_touch_and_stay_apart_when_they_do_not() {
        let mut h = Holdings::new();
        h.add_run(10, 20);
        h.add_run(21, 30);
        h.add_run(40, 50);
        assert_eq!(h.runs(), 2);
        h.add_run(5, 9);
        assert_eq!(h.runs(), 2);
        h.add_run(31, 39);
        assert_eq!(h.runs(), 1, "5..=50 in one run");
        h.add_run(0, u64::MAX);
        assert_eq!(h.runs(), 1);
        assert_eq!(h.top(), Some(u64::MAX));
        assert_eq!(
            h.held(&set(&[0, 7, u64::MAX]), |_| None),
            set(&[0, 7, u64::MAX])
        );
    }

    #[test]
    fn an_empty_catalog_holds_nothing_and_a_batch_above_the_top_is_not_looked_for() {
        let mut h = Holdings::new();
        assert!(h.may_hold([1, 2, 3]).is_empty());
        h.add_run(1, 100);
        assert_eq!(h.may_hold([99, 100, 101, 5000]), set(&[99, 100]));
    }

    #[test]
    fn a_gapped_unit_is_read_only_for_a_sequence_in_its_range_and_holds_only_its_set() {
        let mut h = Holdings::new();
        let a = [10, 12, 14];
        let name = object_name(&a);
        h.add_named(&name, Named::parse(&name).unwrap());
        h.add_run(1, 5);
        assert_eq!(h.top(), Some(14));
        assert!(h.to_read(&set(&[3, 20])).is_empty(), "3 is in a run");
        assert_eq!(
            h.to_read(&set(&[11])),
            vec![Arc::<str>::from(name.as_str())]
        );
        let sets: HashMap<&str, Arc<[u64]>> = HashMap::from([(name.as_str(), Arc::from(a))]);
        let found = h.held(&set(&[3, 11, 12, 14, 15]), |s| sets.get(s).cloned());
        assert_eq!(found, set(&[3, 12, 14]));
        assert_eq!(
            h.held(&set(&[12]), |_| None),
            BTreeSet::new(),
            "a unit that cannot be read holds nothing"
        );
    }

    #[test]
    fn a_unit_added_with_its_sequences_becomes_a_run_when_gapless() {
        let mut h = Holdings::new();
        h.add_unit("a", &[3, 4, 4, 5]);
        assert_eq!((h.runs(), h.gapped_units()), (1, 0));
        h.add_unit("b", &[7, 9]);
        assert_eq!((h.runs(), h.gapped_units()), (1, 1));
        h.add_unit("b", &[7, 9]);
        assert_eq!(h.gapped_units(), 1, "the same unit filed twice counts once");
        h.add_unit("c", &[]);
        assert_eq!(h.top(), Some(9));
    }

    #[test]
    fn runs_of_sorted_sequences() {
        assert_eq!(runs_of(&[]), vec![]);
        assert_eq!(
            runs_of(&[1, 2, 2, 3, 5, 7, 8]),
            vec![(1, 3), (5, 5), (7, 8)]
        );
        assert_eq!(
            runs_of(&[u64::MAX - 1, u64::MAX]),
            vec![(u64::MAX - 1, u64::MAX)]
        );
        assert!(gapless(&[4, 4, 5]));
        assert!(!gapless(&[4, 6]));
    }

    /// An archive of units, each a random set of sequences, some written in several
    /// steps; the catalog finds exactly what the units hold.
    fn units() -> impl Strategy<Value = (Vec<BTreeSet<u64>>, BTreeSet<u64>)> {
        let unit = prop::collection::btree_set(1u64..400, 1..40);
        (
            prop::collection::vec(unit, 0..12),
            prop::collection::btree_set(1u64..420, 0..80),
        )
    }

    proptest! {
        #[test]
        fn the_catalog_holds_exactly_what_its_units_hold((units, wanted) in units()) {
            let mut h = Holdings::new();
            let mut sets: HashMap<String, Arc<[u64]>> = HashMap::new();
            for u in &units {
                let sorted: Vec<u64> = u.iter().copied().collect();
                let name = object_name(&sorted);
                h.add_unit(&name, &sorted);
                sets.insert(name, Arc::from(sorted));
            }
            let expected: BTreeSet<u64> = wanted
                .iter()
                .copied()
                .filter(|s| units.iter().any(|u| u.contains(s)))
                .collect();
            let may = h.may_hold(wanted.iter().copied());
            prop_assert!(expected.is_subset(&may), "a stored sequence is never above the top");
            let to_read = h.to_read(&may);
            let read: HashMap<&str, Arc<[u64]>> = to_read
                .iter()
                .map(|s| (&**s, sets[&**s].clone()))
                .collect();
            prop_assert_eq!(h.held(&may, |s| read.get(s).cloned()), expected);
        }

        #[test]
        fn runs_cover_exactly_their_sequences(seqs in prop::collection::btree_set(0u64..300, 0..120)) {
            let sorted: Vec<u64> = seqs.iter().copied().collect();
            let mut h = Holdings::new();
            for (a, b) in runs_of(&sorted) {
                h.add_run(a, b);
            }
            prop_assert_eq!(h.runs(), runs_of(&sorted).len());
            let all: BTreeSet<u64> = (0..310).collect();
            prop_assert_eq!(h.held(&all, |_| None), seqs);
        }
    }
}
