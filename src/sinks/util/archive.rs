//! Archives named by the stream sequences they hold — the s3 destination's objects and the
//! file destination's Parquet files, `<first>-<last>[-<hash>]` — and the pieces every
//! archive destination shares to keep a message in one unit only. Pure: names, sequence
//! sets and envelopes in, decisions out.
//!
//! Why: a crash between a write and its ACKs, a server that rolls its consumer state back,
//! or a `jetsink replay` makes messages come again, and the pulls that bring them need not
//! cut batches where the first ones did. A name follows the set of sequences written, so
//! without a look at what is stored those messages would land in a second unit overlapping
//! the first. What the archive holds is kept by [`super::holdings`]; this module gives:
//! - the names ([`object_name`], [`Named`]): a name without hash holds every sequence from
//!   first to last, a hashed one only what reading it gives back ([`gives_back`]) — a unit
//!   this naming did not write, or one that cannot be read, holds nothing;
//! - [`split`]: the members of a batch to write and those already stored (a sequence twice
//!   in one batch is written once);
//! - [`Known`]: the sets read from hashed units, kept within a bound;
//! - [`predates_stream`]: whether a unit is older than the source stream, so holds a
//!   deleted stream's messages.
//!
//! One stream per prefix: the names carry sequences, not the stream, so a prefix (a
//! folder of objects, a directory and prefix of files) must hold one stream's messages, as
//! the names already require — another stream's object with the same sequences would be
//! overwritten by this one.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::envelope::Envelope;

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

/// Whether `read` is the set `stem` was made from, sorted (the order a lookup's binary
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
/// name is a function of them — so an entry stays true while the file exists. An entry
/// dropped for room is read again when it is needed again.
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

/// Whether a unit (file or object) last modified at `modified` predates the source stream,
/// created at `created`, and so holds the messages of a deleted stream of the same name,
/// whose sequences the new stream uses again. S3 lists `LastModified` to the whole second
/// (AWS and moto alike), and some file systems keep coarse times too, so a unit written in
/// the very second the stream was created can show a time before it: only a unit of an
/// earlier whole second predates the stream. Counting a deleted stream's unit written in
/// that same second is the price; taking a fresh unit for a deleted stream's wrote its
/// messages twice after a crash before their ACKs.
pub fn predates_stream(modified: SystemTime, created: SystemTime) -> bool {
    let whole = created
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(SystemTime::UNIX_EPOCH, |d| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(d.as_secs())
        });
    modified < whole
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_unit_listed_in_the_second_its_stream_was_created_is_not_older_than_the_stream() {
        let at = |secs: u64, millis: u64| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
        };
        let created = at(1_000, 300);
        // Written at .800 of that second, listed as .000: the stream's own.
        assert!(!predates_stream(at(1_000, 0), created));
        assert!(!predates_stream(at(1_000, 800), created));
        assert!(!predates_stream(at(1_001, 0), created));
        // A whole second earlier: a deleted stream's.
        assert!(predates_stream(at(999, 0), created));
        assert!(predates_stream(at(999, 999), created));
        assert!(!predates_stream(at(0, 0), SystemTime::UNIX_EPOCH));
    }

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
