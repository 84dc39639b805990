//! Which configured paths are one file, when one of them is written: the pure half of the
//! check `validate` and `run` make over every local path of the config
//! ([`super::owned_files`] resolves the paths, this decides). A snapshot file at the
//! database, a database at the key file, the config file as a snapshot: each would be
//! overwritten by the other's writer, so the pair is refused, both settings named.
//!
//! Two paths collide when they resolve to the same [`Identity`] and at least one is
//! written — except two file destinations' directories: several prefixes may share a
//! directory (each takes its own lock), and two sinks on one directory and prefix are
//! already refused by their targets. Two settings that only read one file (a CA bundle
//! shared by two connections) do not collide.

use std::path::{Component, Path, PathBuf};

use crate::sinks::settings::PathRole;

/// What a configured path is, as far as the filesystem can tell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Identity {
    /// An existing file, by device and inode (links and `..` already followed).
    Inode(u64, u64),
    /// A path not there yet: absolute, with its existing directory resolved.
    Path(PathBuf),
}

/// `path` made absolute against `cwd`, with `.` dropped and `..` taken back lexically:
/// the name a path that does not exist yet will have.
pub(crate) fn lexical(cwd: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in cwd.join(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Every colliding pair `(i, j)`, `i < j`, of `entries` (role and identity), in order.
pub(crate) fn collisions(entries: &[(PathRole, Identity)]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by(|&a, &b| entries[a].1.cmp(&entries[b].1).then(a.cmp(&b)));
    let mut out = Vec::new();
    for group in order.chunk_by(|&a, &b| entries[a].1 == entries[b].1) {
        for (n, &i) in group.iter().enumerate() {
            for &j in &group[n + 1..] {
                if collide(entries[i].0, entries[j].0) {
                    out.push((i.min(j), i.max(j)));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// Whether two settings with these roles may not name one path.
fn collide(a: PathRole, b: PathRole) -> bool {
    !matches!(
        (a, b),
        (PathRole::Read, PathRole::Read) | (PathRole::WritesDirectory, PathRole::WritesDirectory)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(p: &str) -> Identity {
        Identity::Path(PathBuf::from(p))
    }

    #[test]
    fn a_written_path_collides_with_any_other_setting_naming_it() {
        let entries = [
            (PathRole::Read, at("/etc/jetsink.json")),
            (PathRole::WritesFile, at("/data/x.db")),
            (PathRole::WritesFile, at("/etc/jetsink.json")),
            (PathRole::Read, at("/keys/a.key")),
            (PathRole::Read, at("/keys/a.key")),
            (PathRole::WritesDirectory, at("/data/ev")),
            (PathRole::WritesDirectory, at("/data/ev")),
            (PathRole::WritesFile, Identity::Inode(1, 7)),
            (PathRole::Read, Identity::Inode(1, 7)),
        ];
        assert_eq!(collisions(&entries), [(0, 2), (7, 8)]);
    }

    #[test]
    fn a_path_is_made_absolute_without_dot_or_dot_dot() {
        let cwd = Path::new("/srv/app");
        assert_eq!(
            lexical(cwd, Path::new("./data/../x.db")),
            Path::new("/srv/app/x.db")
        );
        assert_eq!(lexical(cwd, Path::new("/a/./b//c")), Path::new("/a/b/c"));
        assert_eq!(lexical(cwd, Path::new("../../../..")), Path::new("/"));
    }

    fn role() -> impl Strategy<Value = PathRole> {
        prop_oneof![
            Just(PathRole::Read),
            Just(PathRole::WritesFile),
            Just(PathRole::WritesDirectory)
        ]
    }

    fn identity() -> impl Strategy<Value = Identity> {
        prop_oneof![
            (0u64..3, 0u64..4).prop_map(|(d, i)| Identity::Inode(d, i)),
            "/[ab]{1,2}".prop_map(|p| Identity::Path(PathBuf::from(p))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Exactly the pairs of one identity with a writer among them (but two
        /// directories) are found, each once, whatever the order of the settings.
        #[test]
        fn the_collisions_are_exactly_the_shared_paths_with_a_writer(
            entries in proptest::collection::vec((role(), identity()), 0..24),
        ) {
            let got = collisions(&entries);
            let mut want = Vec::new();
            for i in 0..entries.len() {
                for j in i + 1..entries.len() {
                    let (a, b) = (&entries[i], &entries[j]);
                    let writer = a.0 != PathRole::Read || b.0 != PathRole::Read;
                    let both_dirs = a.0 == PathRole::WritesDirectory
                        && b.0 == PathRole::WritesDirectory;
                    if a.1 == b.1 && writer && !both_dirs {
                        want.push((i, j));
                    }
                }
            }
            prop_assert_eq!(&got, &want);
            // Reversing the settings finds the same pairs, mirrored.
            let n = entries.len();
            let reversed: Vec<_> = entries.iter().rev().cloned().collect();
            let mut mirrored: Vec<_> = collisions(&reversed)
                .into_iter()
                .map(|(i, j)| (n - 1 - j, n - 1 - i))
                .collect();
            mirrored.sort_unstable();
            prop_assert_eq!(got, mirrored);
        }

        /// Any path comes out absolute, with no `.` or `..`, and a second pass keeps it.
        #[test]
        fn lexical_paths_are_absolute_and_stable(
            parts in proptest::collection::vec("(\\.|\\.\\.|[a-z]{1,3})", 0..8),
            absolute in any::<bool>(),
        ) {
            let path = format!("{}{}", if absolute { "/" } else { "" }, parts.join("/"));
            let once = lexical(Path::new("/w/d"), Path::new(&path));
            prop_assert!(once.is_absolute());
            prop_assert!(once.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))));
            prop_assert_eq!(lexical(Path::new("/elsewhere"), &once), once.clone());
        }
    }
}
