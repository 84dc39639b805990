//! Whose bytes are at the end of a file, and so which bytes this writer may cut. Pure: the
//! file's identity and length are arguments.
//!
//! A writer only ever cuts bytes it can prove are its own unACKed batch. It remembers the
//! file it writes (device and inode), the length after its last commit, and how far a
//! failed batch may have reached ([`Expected`]). A file that is not that file, or whose
//! length is outside that range, was touched by someone else: it is left alone and the
//! next batch goes to a new file. The one exception is the first open under the directory
//! lock, when no live writer can exist and a torn last line is a crashed writer's
//! unACKed batch.

/// A file as found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Device of the file.
    pub dev: u64,
    /// Inode of the file.
    pub ino: u64,
    /// Its length now.
    pub len: u64,
}

/// What this writer knows of the file it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    /// Device of the file.
    pub dev: u64,
    /// Inode of the file.
    pub ino: u64,
    /// Its length after the last commit (or after the repair at open).
    pub len: u64,
    /// The end of the last batch attempted: `len` plus the failed batch's bytes, or `len`.
    pub attempted: u64,
}

impl Expected {
    /// A file this writer has just opened or created, at `len` bytes.
    pub(crate) fn at(found: Found) -> Expected {
        Expected {
            dev: found.dev,
            ino: found.ino,
            len: found.len,
            attempted: found.len,
        }
    }

    /// After a commit of `bytes`.
    pub(crate) fn committed(self, bytes: u64) -> Expected {
        let len = self.len.saturating_add(bytes);
        Expected {
            len,
            attempted: len,
            ..self
        }
    }

    /// After a failed batch of `bytes`: the committed length stays, and up to `bytes` more
    /// may be ours if cutting them back failed.
    pub(crate) fn failed(self, bytes: u64) -> Expected {
        Expected {
            attempted: self.len.saturating_add(bytes),
            ..self
        }
    }

    fn is(&self, found: &Found) -> bool {
        self.dev == found.dev && self.ino == found.ino
    }
}

/// Why a newest file is left alone and a new file started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Foreign {
    /// It is not the file this writer was writing (replaced, deleted, or another file).
    OtherFile,
    /// It is, but its length is not one this writer left it at.
    Resized {
        /// The length this writer expected.
        expected: u64,
        /// The length found.
        found: u64,
    },
}

/// What to do with the newest file of the prefix when (re)opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reopen {
    /// Continue it as it is.
    Continue,
    /// Cut this writer's own failed bytes back to this length, then continue.
    CutTo(u64),
    /// First open under the lock: cut a torn last line back to the last line break.
    RepairTorn,
    /// Leave it alone and start a new file after it.
    StartNew(Foreign),
}

/// The decision for the newest file `found`, given what this writer knows (`None` before
/// its first open, when it holds the lock and nobody else can be writing).
pub(crate) fn reopen(found: Found, expected: Option<Expected>) -> Reopen {
    let Some(e) = expected else {
        return Reopen::RepairTorn;
    };
    if !e.is(&found) {
        return Reopen::StartNew(Foreign::OtherFile);
    }
    if found.len == e.len {
        Reopen::Continue
    } else if found.len > e.len && found.len <= e.attempted {
        Reopen::CutTo(e.len)
    } else {
        Reopen::StartNew(Foreign::Resized {
            expected: e.len,
            found: found.len,
        })
    }
}

/// Whether the bytes after `before` may be cut after a failed batch of `batch` bytes, the
/// file now being `now` long: only when everything past `before` can be this batch.
pub(crate) fn may_cut_failed_batch(before: u64, now: u64, batch: u64) -> bool {
    now > before && now <= before.saturating_add(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const F: Found = Found {
        dev: 1,
        ino: 7,
        len: 100,
    };

    #[test]
    fn first_open_repairs_whatever_the_file() {
        assert_eq!(reopen(F, None), Reopen::RepairTorn);
    }

    #[test]
    fn reopen_decision_table() {
        let ours = Expected::at(F);
        let other_inode = Found { ino: 8, ..F };
        let other_dev = Found { dev: 2, ..F };
        let failed = ours.failed(50);
        let cases = [
            (F, ours, Reopen::Continue),
            (other_inode, ours, Reopen::StartNew(Foreign::OtherFile)),
            (other_dev, ours, Reopen::StartNew(Foreign::OtherFile)),
            // Our failed batch left bytes behind: they are ours to cut.
            (Found { len: 101, ..F }, failed, Reopen::CutTo(100)),
            (Found { len: 150, ..F }, failed, Reopen::CutTo(100)),
            (Found { len: 100, ..F }, failed, Reopen::Continue),
            // More than our batch, or shorter than our commits: someone else's doing.
            (
                Found { len: 151, ..F },
                failed,
                Reopen::StartNew(Foreign::Resized {
                    expected: 100,
                    found: 151,
                }),
            ),
            (
                Found { len: 101, ..F },
                ours,
                Reopen::StartNew(Foreign::Resized {
                    expected: 100,
                    found: 101,
                }),
            ),
            (
                Found { len: 40, ..F },
                failed,
                Reopen::StartNew(Foreign::Resized {
                    expected: 100,
                    found: 40,
                }),
            ),
        ];
        for (found, expected, want) in cases {
            assert_eq!(
                reopen(found, Some(expected)),
                want,
                "{found:?} {expected:?}"
            );
        }
    }

    #[test]
    fn a_commit_moves_both_ends_and_a_failure_only_the_attempt() {
        let e = Expected::at(F).failed(30);
        assert_eq!((e.len, e.attempted), (100, 130));
        let e = e.committed(20);
        assert_eq!((e.len, e.attempted), (120, 120));
    }

    #[test]
    fn only_the_failed_batch_itself_may_be_cut() {
        assert!(!may_cut_failed_batch(100, 100, 50), "nothing to cut");
        assert!(may_cut_failed_batch(100, 101, 50));
        assert!(may_cut_failed_batch(100, 150, 50));
        assert!(
            !may_cut_failed_batch(100, 151, 50),
            "another writer appended"
        );
        assert!(!may_cut_failed_batch(100, 90, 50), "cut by someone else");
        assert!(!may_cut_failed_batch(u64::MAX, u64::MAX, 1));
    }

    proptest! {
        #[test]
        fn a_cut_never_goes_below_the_committed_length_nor_keeps_foreign_bytes(
            len in 0u64..1_000_000, batch in 0u64..1_000_000, found in 0u64..3_000_000,
        ) {
            let e = Expected::at(Found { len, ..F }).failed(batch);
            match reopen(Found { len: found, ..F }, Some(e)) {
                Reopen::CutTo(to) => {
                    prop_assert_eq!(to, len);
                    prop_assert!(found > len && found <= len + batch);
                }
                Reopen::Continue => prop_assert_eq!(found, len),
                Reopen::StartNew(_) => prop_assert!(found < len || found > len + batch),
                Reopen::RepairTorn => prop_assert!(false, "only without an expectation"),
            }
        }
    }
}
