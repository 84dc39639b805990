//! Archives named by the stream sequences they hold — the s3 destination's objects and the
//! file destination's Parquet files, `<first>-<last>[-<hash>]` — and which messages of a
//! batch such an archive already holds. Pure: names, sequence sets and envelopes in,
//! decisions out; the destinations list their folder and read what this asks for.
//!
//! Why: a crash between a write and its ACKs makes the server deliver the messages again,
//! and the pulls that bring them back need not cut batches where the first ones did. A
//! name follows the set of sequences written, so without a look at the archive those
//! messages would land in a second file overlapping the first, and the archive would hold
//! a message twice. With it, a message the archive holds is committed (the runner ACKs
//! it) without being written again, and the rest of the batch is written under the name
//! of what is written.
//!
//! The rules, each chosen so that a doubt writes the message again (a duplicate), never
//! skips it (a loss):
//! - Only a message delivered before (`delivered > 1`) can already be stored — or, after a
//!   write of this destination failed, any message, since a failed write may have stored
//!   some of what it was given (an upload whose answer was lost) ([`wanted`]). So first
//!   deliveries cost nothing.
//! - A name without hash holds every sequence from first to last: presence follows from the
//!   name alone ([`Lookup::by_name`]).
//! - A name with a hash is read (its sequences), and counts only when the sequences read
//!   give back its name ([`Lookup::read`]): a file this naming did not write, or one that
//!   cannot be read, holds nothing.
//! - A sequence twice in one batch is written once ([`split`]).
//!
//! One stream per prefix: the names carry sequences, not the stream, so a prefix (a
//! folder of objects, a directory and prefix of files) must hold one stream's messages, as
//! the names already require — another stream's object with the same sequences would be
//! overwritten by this one.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::envelope::Envelope;

/// The most messages one write holds (`max_messages` + `batch_size` of a rollover, a
/// shuffle buffer: the unacknowledged ceiling), so a name without hash never spans more
/// sequences. A store listing in name order is read from this far below the lowest
/// sequence looked for.
pub const MOST_PER_WRITE: u64 = 100_000;

/// Digits of each sequence in a name.
const DIGITS: usize = 20;
/// Hex digits of a name's hash.
const HASH_DIGITS: usize = 12;

/// `<first>-<last>` for a gapless sorted run of sequences, else `<first>-<last>-<hash>`,
/// the hash 12 hex digits of the SHA-256 of the distinct sorted sequences. Without it two
/// different sets with the same first and last sequence (possible after redeliveries)
/// would overwrite each other and lose messages.
pub fn object_name(sorted: &[u64]) -> String {
    let (Some(&first), Some(&last)) = (sorted.first(), sorted.last()) else {
        return "empty".into();
    };
    let mut distinct = sorted.to_vec();
    distinct.dedup();
    let gapless = last - first + 1 == distinct.len() as u64;
    if gapless {
        return format!("{first:020}-{last:020}");
    }
    let mut h = Sha256::new();
    for s in &distinct {
        h.update(s.to_be_bytes());
    }
    let digest = h.finalize();
    let mut hex = String::with_capacity(HASH_DIGITS);
    for b in &digest[..HASH_DIGITS / 2] {
        let _ = write!(hex, "{b:02x}");
    }
    format!("{first:020}-{last:020}-{hex}")
}

/// What a name made by [`object_name`] says about its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Named {
    /// The lowest sequence held.
    pub first: u64,
    /// The highest sequence held.
    pub last: u64,
    /// Whether the name has a hash: the file holds some of the sequences between, which
    /// only reading it tells.
    pub hashed: bool,
}

impl Named {
    /// Reads a name (without prefix or extension) back; anything [`object_name`] would not
    /// make (other widths, upper-case hex, first above last) is `None`.
    pub fn parse(stem: &str) -> Option<Named> {
        let mut parts = stem.split('-');
        let first = sequence(parts.next()?)?;
        let last = sequence(parts.next()?)?;
        let hashed = match parts.next() {
            None => false,
            Some(h)
                if h.len() == HASH_DIGITS
                    && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                true
            }
            Some(_) => return None,
        };
        if parts.next().is_some() || first > last || (hashed && last - first < 2) {
            return None;
        }
        Some(Named {
            first,
            last,
            hashed,
        })
    }
}

fn sequence(s: &str) -> Option<u64> {
    (s.len() == DIGITS && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The sequences of `members` (positions in `batch`) that may already be stored: those
/// delivered before — by their delivery count, or at or below `delivered_up_to`, what the
/// consumers had delivered when this process bound them or before its last connection drop
/// ([`Sink::delivered_before`]) — or all of them when `everything` (a write of this
/// destination failed since its last success).
///
/// [`Sink::delivered_before`]: crate::sinks::Sink::delivered_before
pub fn wanted(
    batch: &[Envelope],
    members: &[usize],
    everything: bool,
    delivered_up_to: u64,
) -> BTreeSet<u64> {
    members
        .iter()
        .map(|&i| &batch[i])
        .filter(|e| everything || e.delivered > 1 || e.stream_sequence <= delivered_up_to)
        .map(|e| e.stream_sequence)
        .collect()
}

/// Why the sequences read from a file do not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// They do not give back its name: not a file this naming wrote (or not whole).
    NameMismatch,
}

/// Which of the wanted sequences an archive folder holds, learnt name by name and file by
/// file.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// Wanted and not found yet.
    remaining: BTreeSet<u64>,
    /// Found.
    held: BTreeSet<u64>,
}

impl Lookup {
    /// A lookup for `wanted`.
    pub fn new(wanted: BTreeSet<u64>) -> Lookup {
        Lookup {
            remaining: wanted,
            held: BTreeSet::new(),
        }
    }

    /// Whether every wanted sequence was found (nothing more to list or read).
    pub fn is_done(&self) -> bool {
        self.remaining.is_empty()
    }

    /// The lowest and highest sequence still wanted.
    pub fn bounds(&self) -> Option<(u64, u64)> {
        Some((*self.remaining.first()?, *self.remaining.last()?))
    }

    /// Whether `named` may hold a sequence still wanted.
    pub fn concerns(&self, named: &Named) -> bool {
        self.remaining
            .range(named.first..=named.last)
            .next()
            .is_some()
    }

    /// Takes what a name without hash says: it holds every sequence of its range. A hashed
    /// name says nothing by itself (it returns false); [`Lookup::read`] it.
    pub fn by_name(&mut self, named: &Named) -> bool {
        if named.hashed {
            return false;
        }
        let found: Vec<u64> = self
            .remaining
            .range(named.first..=named.last)
            .copied()
            .collect();
        for s in &found {
            self.remaining.remove(s);
        }
        self.held.extend(found);
        true
    }

    /// Takes the sequences `read` from the file `stem` (in any order): counted only when
    /// they give back its name. Returns how many wanted sequences it held.
    pub fn read(&mut self, stem: &str, read: &[u64]) -> Result<usize, Foreign> {
        if !gives_back(stem, read) {
            return Err(Foreign::NameMismatch);
        }
        let (Some(&first), Some(&last)) = (read.first(), read.last()) else {
            return Err(Foreign::NameMismatch);
        };
        let found: Vec<u64> = self
            .remaining
            .range(first..=last)
            .copied()
            .filter(|s| read.binary_search(s).is_ok())
            .collect();
        for s in &found {
            self.remaining.remove(s);
        }
        let n = found.len();
        self.held.extend(found);
        Ok(n)
    }

    /// The wanted sequences found.
    pub fn held(self) -> BTreeSet<u64> {
        self.held
    }
}

/// Whether `read` is the set `stem` was made from, sorted (the order [`Lookup::read`]'s
/// search needs; an unsorted `read` does not give it back).
pub fn gives_back(stem: &str, read: &[u64]) -> bool {
    read.windows(2).all(|w| w[0] <= w[1]) && object_name(read) == stem
}

/// Splits `members` (positions in `batch`, sorted by stream sequence) into those to write
/// and those already stored: a sequence in `held`, or one already met in `members` (a
/// message twice in one batch is written once and both copies are committed).
pub fn split(
    batch: &[Envelope],
    members: &[usize],
    held: &BTreeSet<u64>,
) -> (Vec<usize>, Vec<usize>) {
    let mut write = Vec::with_capacity(members.len());
    let mut stored = Vec::new();
    let mut last = None;
    for &i in members {
        let s = batch[i].stream_sequence;
        if held.contains(&s) || last == Some(s) {
            stored.push(i);
        } else {
            write.push(i);
        }
        last = Some(s);
    }
    (write, stored)
}

/// What reading a hashed file gave, kept so the next batches that need it do not read it
/// again: its sorted sequences, or `None` when it cannot tell (unreadable, foreign, no
/// sequence column), which was warned about once. A name's contents never change — the
/// name is a function of them — so an entry stays true while the file exists; callers
/// consult it only for names their fresh listing shows.
#[derive(Debug, Default)]
pub struct Known {
    entries: HashMap<String, Option<Arc<[u64]>>>,
    order: VecDeque<String>,
    sequences: usize,
}

/// Most sequences [`Known`] keeps (8 bytes each).
const KNOWN_SEQUENCES: usize = 1_000_000;
/// Most files [`Known`] keeps.
const KNOWN_FILES: usize = 4_096;

impl Known {
    /// What is known of the file `key`: `None` when it was not read yet.
    pub fn get(&self, key: &str) -> Option<Option<Arc<[u64]>>> {
        self.entries.get(key).cloned()
    }

    /// Keeps what reading `key` gave, dropping the oldest entries beyond the bounds.
    pub fn insert(&mut self, key: String, read: Option<Arc<[u64]>>) {
        if self.entries.contains_key(&key) {
            return;
        }
        self.sequences += read.as_ref().map_or(0, |r| r.len());
        self.entries.insert(key.clone(), read);
        self.order.push_back(key);
        while self.order.len() > KNOWN_FILES
            || (self.sequences > KNOWN_SEQUENCES && self.order.len() > 1)
        {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(Some(r)) = self.entries.remove(&old) {
                self.sequences -= r.len();
            }
        }
    }

    /// Files known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn envelope(seq: u64, delivered: u64) -> Envelope {
        crate::envelope::normalize(
            "s.x",
            crate::envelope::Delivery {
                stream: "S",
                consumer: "c",
                stream_sequence: seq,
                consumer_sequence: seq,
                delivered,
                published: time::OffsetDateTime::UNIX_EPOCH,
            },
            [],
            bytes::Bytes::new(),
            crate::config::IdempotencyKey::StreamSequence,
        )
    }

    #[test]
    fn the_write_ceiling_is_the_unacknowledged_ceiling() {
        assert_eq!(
            MOST_PER_WRITE,
            crate::config::randomizer::MAX_UNACKED as u64
        );
    }

    #[test]
    fn names_parse_back_and_other_names_do_not() {
        assert_eq!(
            Named::parse(&object_name(&[5, 6, 7])),
            Some(Named {
                first: 5,
                last: 7,
                hashed: false
            })
        );
        assert_eq!(
            Named::parse(&object_name(&[5, 7, 9])),
            Some(Named {
                first: 5,
                last: 9,
                hashed: true
            })
        );
        let hashed = object_name(&[5, 7, 9]);
        for other in [
            "",
            "empty",
            "5-7",
            "00000000000000000005",
            "00000000000000000007-00000000000000000005",
            "00000000000000000005-00000000000000000007-",
            "00000000000000000005-00000000000000000007-ABCDEF012345",
            "00000000000000000005-00000000000000000007-abcdef01234",
            "00000000000000000005-00000000000000000006-abcdef012345",
            "00000000000000000005-00000000000000000007-abcdef012345-x",
            "+0000000000000000005-00000000000000000007",
            "99999999999999999999-99999999999999999999",
        ] {
            assert_eq!(Named::parse(other), None, "{other}");
        }
        assert_eq!(Named::parse(&hashed.to_uppercase()), None);
    }

    #[test]
    fn first_deliveries_are_not_looked_for_unless_a_write_failed() {
        let batch = [
            envelope(1, 1),
            envelope(2, 2),
            envelope(3, 1),
            envelope(4, 5),
        ];
        let all = [0, 1, 2, 3];
        assert_eq!(wanted(&batch, &all, false, 0), BTreeSet::from([2, 4]));
        assert_eq!(wanted(&batch, &all, true, 0), BTreeSet::from([1, 2, 3, 4]));
        assert_eq!(wanted(&batch, &[0, 2], false, 0), BTreeSet::new());
    }

    /// nats-server before 2.10.14 may send a message delivered to an earlier process as
    /// delivery 1 again: up to what the consumers had delivered at bind, a first delivery
    /// is looked for too, and above it not.
    #[test]
    fn first_deliveries_up_to_what_was_delivered_before_the_bind_are_looked_for() {
        let batch = [
            envelope(1, 1),
            envelope(2, 1),
            envelope(3, 1),
            envelope(4, 2),
        ];
        let all = [0, 1, 2, 3];
        assert_eq!(wanted(&batch, &all, false, 2), BTreeSet::from([1, 2, 4]));
        assert_eq!(wanted(&batch, &all, false, 3), BTreeSet::from([1, 2, 3, 4]));
        assert_eq!(wanted(&batch, &[2], false, 2), BTreeSet::new());
    }

    #[test]
    fn a_gapless_name_holds_its_range_and_a_hashed_one_only_what_it_gives_back() {
        let mut look = Lookup::new(BTreeSet::from([3, 8, 12, 20]));
        assert!(look.by_name(&Named::parse(&object_name(&[1, 2, 3, 4])).unwrap()));
        let hashed_name = object_name(&[6, 8, 13]);
        let hashed = Named::parse(&hashed_name).unwrap();
        assert!(
            !look.by_name(&hashed),
            "a hashed name tells nothing by itself"
        );
        assert!(look.concerns(&hashed));
        assert_eq!(look.read(&hashed_name, &[6, 8, 13]), Ok(1));
        assert!(
            look.concerns(&hashed),
            "8 found; 12 is still wanted and in its range: only reading tells it is not in it"
        );
        assert_eq!(
            look.read(&object_name(&[10, 12, 20]), &[10, 12, 21]),
            Err(Foreign::NameMismatch),
            "what it holds does not give its name back"
        );
        assert_eq!(
            look.read(&object_name(&[10, 12, 20]), &[20, 12, 10]),
            Err(Foreign::NameMismatch),
            "unsorted"
        );
        assert_eq!(look.bounds(), Some((12, 20)));
        assert!(!look.is_done());
        assert_eq!(look.held(), BTreeSet::from([3, 8]));
    }

    #[test]
    fn a_split_writes_a_repeated_sequence_once() {
        let batch = [
            envelope(1, 1),
            envelope(2, 2),
            envelope(2, 1),
            envelope(3, 2),
        ];
        let (write, stored) = split(&batch, &[0, 1, 2, 3], &BTreeSet::from([3]));
        assert_eq!(write, vec![0, 1]);
        assert_eq!(stored, vec![2, 3]);
    }

    #[test]
    fn known_files_stay_within_their_bounds() {
        let mut k = Known::default();
        k.insert("a".into(), None);
        k.insert("b".into(), Some(Arc::from(vec![1u64; KNOWN_SEQUENCES - 1])));
        assert_eq!(k.len(), 2);
        k.insert("c".into(), Some(Arc::from(vec![2u64; 5])));
        assert_eq!(k.get("a"), None, "the oldest went first");
        assert_eq!(k.get("b"), None, "then enough to fit the sequences");
        assert_eq!(k.get("c").flatten().map(|r| r.len()), Some(5));
        for i in 0..KNOWN_FILES + 10 {
            k.insert(format!("f{i}"), None);
        }
        assert_eq!(k.len(), KNOWN_FILES);
    }

    /// An archive of files each holding a random set; which of the wanted sequences it
    /// holds, by the rules (a hashed file read whole), against the sets themselves.
    fn archive() -> impl Strategy<Value = (Vec<BTreeSet<u64>>, BTreeSet<u64>)> {
        let file = prop::collection::btree_set(1u64..200, 1..30);
        (
            prop::collection::vec(file, 0..8),
            prop::collection::btree_set(1u64..200, 0..60),
        )
    }

    proptest! {
        #[test]
        fn names_round_trip(set in prop::collection::btree_set(0u64..1_000_000, 1..50)) {
            let sorted: Vec<u64> = set.iter().copied().collect();
            let name = object_name(&sorted);
            let named = Named::parse(&name).unwrap();
            prop_assert_eq!(named.first, sorted[0]);
            prop_assert_eq!(named.last, *sorted.last().unwrap());
            prop_assert_eq!(named.hashed, named.last - named.first + 1 != sorted.len() as u64);
        }

        #[test]
        fn the_lookup_finds_exactly_what_the_files_hold((files, wanted) in archive()) {
            let mut look = Lookup::new(wanted.clone());
            let names: Vec<(String, Named, Vec<u64>)> = files
                .iter()
                .map(|f| {
                    let sorted: Vec<u64> = f.iter().copied().collect();
                    let name = object_name(&sorted);
                    (name.clone(), Named::parse(&name).unwrap(), sorted)
                })
                .collect();
            for (_, named, _) in &names {
                look.by_name(named);
            }
            for (name, named, sorted) in &names {
                if named.hashed && look.concerns(named) {
                    prop_assert!(look.read(name, sorted).is_ok());
                }
            }
            let expected: BTreeSet<u64> = wanted
                .iter()
                .copied()
                .filter(|s| files.iter().any(|f| f.contains(s)))
                .collect();
            prop_assert_eq!(look.held(), expected);
        }

        #[test]
        fn a_file_whose_contents_are_not_its_name_holds_nothing(
            (files, wanted) in archive(),
            extra in 1u64..200,
        ) {
            let mut look = Lookup::new(wanted);
            for f in &files {
                let sorted: Vec<u64> = f.iter().copied().collect();
                let name = object_name(&sorted);
                let mut other = f.clone();
                if !other.insert(extra) {
                    other.remove(&extra);
                }
                let read: Vec<u64> = other.iter().copied().collect();
                if object_name(&read) != name {
                    prop_assert_eq!(look.read(&name, &read), Err(Foreign::NameMismatch));
                }
            }
            prop_assert!(look.held().is_empty());
        }

        #[test]
        fn a_split_keeps_every_position_once_and_writes_each_sequence_at_most_once(
            seqs in prop::collection::vec(1u64..50, 0..80),
            held in prop::collection::btree_set(1u64..50, 0..20),
        ) {
            let batch: Vec<Envelope> = seqs.iter().map(|&s| envelope(s, 2)).collect();
            let mut members: Vec<usize> = (0..batch.len()).collect();
            members.sort_by_key(|&i| batch[i].stream_sequence);
            let (write, stored) = split(&batch, &members, &held);
            let mut all: Vec<usize> = write.iter().chain(&stored).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..batch.len()).collect::<Vec<_>>());
            let written: Vec<u64> = write.iter().map(|&i| batch[i].stream_sequence).collect();
            let distinct: BTreeSet<u64> = written.iter().copied().collect();
            prop_assert_eq!(distinct.len(), written.len());
            prop_assert!(distinct.is_disjoint(&held));
            let every: BTreeSet<u64> = seqs.iter().copied().filter(|s| !held.contains(s)).collect();
            prop_assert_eq!(distinct, every, "every sequence not held is written");
        }
    }
}
