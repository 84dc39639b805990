//! What a directory's JSON Lines files hold, so a message already in a file is committed
//! without a second line ([`Catalog`]).
//!
//! A JSON Lines file's name says when it was created, not what it holds, so the writer
//! keeps the sequences of each file it closes in a small hidden file beside it, its seal
//! (`.<file name>.held`: the data file's length when sealed, then each stream's runs of
//! sequences). At open the catalog reads the seals; a file without one, or whose length
//! changed since (a file of an earlier version, or closed by a crash), is read once and
//! sealed then. The file being appended to is not sealed; its sequences are kept in
//! memory batch by batch and sealed when it is rotated.
//!
//! Files whose sequences have no gap are one run each, merged with their neighbours, so
//! an archive written in stream order costs a few runs however many files it has; a file
//! with gaps (a sink reading a few subjects of a shared stream) is filed by its range and
//! its seal read when a message falls in that range. Only lines of the sink's own stream
//! count, and only files modified at or after the stream was created (the writer starts a
//! new file rather than append to an older one): an older file holds the messages of a
//! stream of the same name deleted since.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::naming::FileStamp;
use crate::files::{self, FileError, Kind};
use crate::sinks::util::archive::{predates_stream, Known};
use crate::sinks::util::holdings::{gapless, runs_of, Holdings};

/// First line of every seal.
const SEAL_HEADER: &str = "jetsink held 1";
/// The ending of a seal's name, after the data file's name.
const SEAL_ENDING: &str = ".held";

/// The seal of the data file `name`.
pub fn seal_name(name: &str) -> String {
    format!(".{name}{SEAL_ENDING}")
}

/// What a seal says: the data file's length when sealed, and the sorted sequences of the
/// stream asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The data file's length in bytes when it was sealed.
    pub bytes: u64,
    /// Sorted sequences of the stream.
    pub sequences: Vec<u64>,
}

/// The text of a seal for a data file of `bytes` holding `streams` (stream name, sorted
/// sequences). Pure.
pub fn seal_text(bytes: u64, streams: &[(String, Vec<u64>)]) -> String {
    let mut out = format!("{SEAL_HEADER}\nbytes {bytes}\n");
    for (stream, seqs) in streams {
        out.push_str("stream ");
        out.push_str(stream);
        for (a, b) in runs_of(seqs) {
            let _ = write!(out, " {a}-{b}");
        }
        out.push('\n');
    }
    out
}

/// Reads a seal's text for `stream`; `None` when it is not a seal this version wrote (the
/// data file is then read instead). Pure.
pub fn parse_seal(text: &str, stream: Option<&str>) -> Option<Sealed> {
    let mut lines = text.lines();
    if lines.next()? != SEAL_HEADER {
        return None;
    }
    let bytes = lines.next()?.strip_prefix("bytes ")?.parse().ok()?;
    let mut sequences = Vec::new();
    for line in lines {
        let mut words = line.strip_prefix("stream ")?.split(' ');
        let name = words.next()?;
        let wanted = stream.is_none_or(|s| s == name);
        for run in words {
            let (a, b) = run.split_once('-')?;
            let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            if a > b || b - a > MAX_RUN {
                return None;
            }
            if wanted {
                sequences.extend(a..=b);
            }
        }
    }
    sequences.sort_unstable();
    sequences.dedup();
    Some(Sealed { bytes, sequences })
}

/// The longest run a seal may name: more sequences than any file can hold lines, so a
/// damaged seal cannot make the reader expand billions of numbers.
const MAX_RUN: u64 = 1 << 27;

/// Each stream's name and its sorted sequences, as a file holds them.
pub type Streams = Vec<(String, Vec<u64>)>;

/// The stream and sequence of one line; the rest is skipped.
#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    stream: std::borrow::Cow<'a, str>,
    stream_sequence: u64,
}

/// Every stream's sorted sequences in the JSON Lines file `path` (lines that are not
/// jetsink records are skipped), and its length. Only a regular file is read, a line at a
/// time, each within [`Kind::Records`]' bound.
pub fn read_file(path: &Path) -> io::Result<(u64, Streams)> {
    let file = files::open_regular(path, Kind::Records).map_err(io::Error::other)?;
    let bytes = file.metadata()?.len();
    let mut reader = BufReader::new(file);
    let name = path.display().to_string();
    let mut streams: Streams = Vec::new();
    let mut line = Vec::new();
    while files::read_line(&mut reader, &mut line, Kind::Records, &name)
        .map_err(io::Error::other)?
        == files::Line::Read
    {
        let Ok(l) = serde_json::from_slice::<Line<'_>>(&line) else {
            continue;
        };
        match streams.iter_mut().find(|(s, _)| *s == l.stream) {
            Some((_, seqs)) => seqs.push(l.stream_sequence),
            None => streams.push((l.stream.into_owned(), vec![l.stream_sequence])),
        }
    }
    for (_, seqs) in &mut streams {
        seqs.sort_unstable();
        seqs.dedup();
    }
    Ok((bytes, streams))
}

/// The sequences of `stream` (every stream's, when `None`) among `streams`, sorted.
fn of_stream(streams: &[(String, Vec<u64>)], stream: Option<&str>) -> Vec<u64> {
    let mut out: Vec<u64> = streams
        .iter()
        .filter(|(s, _)| stream.is_none_or(|w| w == s))
        .flat_map(|(_, seqs)| seqs.iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// What a directory's JSON Lines files of one prefix hold of one stream.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The sink's stream; `None` counts every stream (a writer not told its stream).
    stream: Option<String>,
    /// The closed files.
    sealed: Holdings,
    /// Sets of closed files with gaps, by file name.
    known: Known,
    /// The file being appended to: its sequences, as runs.
    current: Holdings,
}

impl Catalog {
    /// An empty catalog of `stream`'s messages.
    pub fn new(stream: Option<String>) -> Catalog {
        Catalog {
            stream,
            ..Catalog::default()
        }
    }

    /// Catalogs the files of `prefix` in `dir` modified at or after `since`, sealing those
    /// without a valid seal; `current` (the file being continued, if any) is read, not
    /// sealed. Returns the catalog and how many files were read whole.
    pub fn load(
        stream: Option<String>,
        dir: &Path,
        prefix: &str,
        since: Option<SystemTime>,
        current: Option<&Path>,
    ) -> io::Result<(Catalog, usize)> {
        let mut catalog = Catalog::new(stream);
        let mut read = 0;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if FileStamp::parse(prefix, name).is_none() {
                continue;
            }
            let path = entry.path();
            let meta = entry.metadata()?;
            if since.is_some_and(|since| meta.modified().is_ok_and(|m| predates_stream(m, since))) {
                continue;
            }
            if current == Some(path.as_path()) {
                let (_, streams) = read_file(&path)?;
                read += 1;
                for (a, b) in runs_of(&of_stream(&streams, catalog.stream.as_deref())) {
                    catalog.current.add_run(a, b);
                }
                continue;
            }
            let (seqs, was_read) = catalog.sequences_of(dir, name, meta.len())?;
            read += usize::from(was_read);
            catalog.file(name, seqs);
        }
        Ok((catalog, read))
    }

    /// Files a closed file's sorted sequences.
    fn file(&mut self, name: &str, seqs: Vec<u64>) {
        self.sealed.add_unit(name, &seqs);
        if !seqs.is_empty() && !gapless(&seqs) {
            self.known.insert(name.to_string(), Some(Arc::from(seqs)));
        }
    }

    /// The sorted sequences of the closed file `name` (of length `len`), from its seal, or
    /// read from the file itself and sealed when the seal is missing or stale; and whether
    /// the file was read.
    fn sequences_of(&self, dir: &Path, name: &str, len: u64) -> io::Result<(Vec<u64>, bool)> {
        let seal = dir.join(seal_name(name));
        match files::read_text(&seal, Kind::Seal) {
            Ok(text) => {
                if let Some(s) = parse_seal(&text, self.stream.as_deref()) {
                    if s.bytes == len {
                        return Ok((s.sequences, false));
                    }
                }
            }
            Err(FileError::Io { source, .. }) if source.kind() != io::ErrorKind::NotFound => {
                return Err(source)
            }
            // Missing, or not a seal this writer made: the file itself is read.
            Err(_) => {}
        }
        let (bytes, streams) = read_file(&dir.join(name))?;
        write_seal(dir, name, &seal_text(bytes, &streams))?;
        Ok((of_stream(&streams, self.stream.as_deref()), true))
    }

    /// Which of `batch`'s sequences the files hold, reading the seals of files with gaps
    /// whose range holds one (kept within [`Known`]'s bound).
    pub fn held(
        &mut self,
        dir: &Path,
        batch: impl IntoIterator<Item = u64> + Clone,
    ) -> io::Result<BTreeSet<u64>> {
        let mut held = self
            .current
            .held(&self.current.may_hold(batch.clone()), |_| None);
        let wanted: BTreeSet<u64> = self
            .sealed
            .may_hold(batch)
            .difference(&held)
            .copied()
            .collect();
        if wanted.is_empty() {
            return Ok(held);
        }
        for name in self.sealed.to_read(&wanted) {
            if self.known.get(&name).is_some() {
                continue;
            }
            let len = match fs::metadata(dir.join(&*name)) {
                Ok(m) => m.len(),
                // Gone (moved away by the operator): it holds nothing now.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.known.insert(name.to_string(), None);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (seqs, _) = self.sequences_of(dir, &name, len)?;
            self.known.insert(name.to_string(), Some(Arc::from(seqs)));
        }
        let known = &self.known;
        held.extend(self.sealed.held(&wanted, |name| known.get(name).flatten()));
        Ok(held)
    }

    /// Records sequences appended to the current file.
    pub fn appended(&mut self, seqs: &[u64]) {
        let mut sorted = seqs.to_vec();
        sorted.sort_unstable();
        for (a, b) in runs_of(&sorted) {
            self.current.add_run(a, b);
        }
    }

    /// Seals the closed current file `name` of `dir` (read back from disk, so lines others
    /// added count too) and files it as closed.
    pub fn close_current(&mut self, dir: &Path, name: &str) -> io::Result<()> {
        let (bytes, streams) = read_file(&dir.join(name))?;
        write_seal(dir, name, &seal_text(bytes, &streams))?;
        self.current = Holdings::new();
        let seqs = of_stream(&streams, self.stream.as_deref());
        self.file(name, seqs);
        Ok(())
    }
}

/// Writes the seal of `name` through the one writer of files jetsink owns (a temporary
/// name, renamed into place: a crash leaves the old seal or none, never half of one, and a
/// missing seal only costs a read).
fn write_seal(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    files::replace(&dir.join(seal_name(name)), text.as_bytes(), 0o666).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_seal_reads_back_the_runs_of_its_stream_only() {
        let text = seal_text(
            120,
            &[("S".into(), vec![1, 2, 3, 7, 9, 10]), ("T".into(), vec![4])],
        );
        assert_eq!(
            text,
            "jetsink held 1\nbytes 120\nstream S 1-3 7-7 9-10\nstream T 4-4\n"
        );
        assert_eq!(
            parse_seal(&text, Some("S")),
            Some(Sealed {
                bytes: 120,
                sequences: vec![1, 2, 3, 7, 9, 10]
            })
        );
        assert_eq!(parse_seal(&text, Some("T")).unwrap().sequences, vec![4]);
        assert_eq!(
            parse_seal(&text, Some("U")).unwrap().sequences,
            Vec::<u64>::new()
        );
        assert_eq!(
            parse_seal(&text, None).unwrap().sequences,
            vec![1, 2, 3, 4, 7, 9, 10]
        );
    }

    #[test]
    fn a_damaged_seal_is_not_trusted() {
        for bad in [
            "",
            "jetsink held 2\nbytes 1\n",
            "jetsink held 1\n",
            "jetsink held 1\nbytes x\n",
            "jetsink held 1\nbytes 1\nstream S 5-3\n",
            "jetsink held 1\nbytes 1\nstream S 1-999999999999\n",
            "jetsink held 1\nbytes 1\nstream S 1+3\n",
            "jetsink held 1\nbytes 1\nnot a stream line\n",
        ] {
            assert_eq!(parse_seal(bad, Some("S")), None, "{bad:?}");
        }
    }

    fn line(stream: &str, seq: u64) -> String {
        format!("{{\"idempotency_key\":\"{stream}:{seq}\",\"stream\":\"{stream}\",\"stream_sequence\":{seq},\"payload\":\"x\"}}\n")
    }

    #[test]
    fn a_catalog_holds_what_its_files_hold_and_seals_them_once() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "ev-20260101T000000.000000000Z-000000.jsonl",
            "ev-20260101T000001.000000000Z-000000.jsonl",
            "ev-20260101T000002.000000000Z-000000.jsonl",
        ];
        let a: String = (1..=5).map(|s| line("S", s)).collect();
        let b: String = [8, 10, 12]
            .iter()
            .map(|&s| line("S", s))
            .collect::<String>()
            + &line("T", 9);
        let c: String = [20, 21].iter().map(|&s| line("S", s)).collect();
        for (n, text) in names.iter().zip([a, b, c]) {
            fs::write(dir.path().join(n), text).unwrap();
        }
        fs::write(dir.path().join("other-1.jsonl"), line("S", 30)).unwrap();
        let current = dir.path().join(names[2]);
        let (mut cat, read) =
            Catalog::load(Some("S".into()), dir.path(), "ev", None, Some(&current)).unwrap();
        assert_eq!(read, 3);
        assert!(dir.path().join(seal_name(names[0])).exists());
        assert!(
            !dir.path().join(seal_name(names[2])).exists(),
            "the current file is not sealed"
        );
        let all: Vec<u64> = (0..=31).collect();
        assert_eq!(
            cat.held(dir.path(), all.iter().copied()).unwrap(),
            BTreeSet::from([1, 2, 3, 4, 5, 8, 10, 12, 20, 21])
        );
        cat.appended(&[23, 22]);
        assert!(cat.held(dir.path(), [22, 23, 24]).unwrap().contains(&22));
        let (mut again, read) =
            Catalog::load(Some("S".into()), dir.path(), "ev", None, Some(&current)).unwrap();
        assert_eq!(read, 1, "the closed files are read from their seals");
        assert!(
            again.held(dir.path(), [9, 10]).unwrap() == BTreeSet::from([10]),
            "T's 9 is not S's"
        );
    }

    #[test]
    fn a_seal_older_than_its_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let name = "ev-20260101T000000.000000000Z-000000.jsonl";
        fs::write(dir.path().join(name), line("S", 1)).unwrap();
        Catalog::load(Some("S".into()), dir.path(), "ev", None, None).unwrap();
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(name))
            .unwrap();
        use std::io::Write as _;
        f.write_all(line("S", 2).as_bytes()).unwrap();
        let (mut cat, read) =
            Catalog::load(Some("S".into()), dir.path(), "ev", None, None).unwrap();
        assert_eq!(read, 1);
        assert_eq!(
            cat.held(dir.path(), [1, 2]).unwrap(),
            BTreeSet::from([1, 2])
        );
    }

    proptest! {
        #[test]
        fn seals_round_trip(
            streams in prop::collection::vec(
                ("[A-Z][A-Z0-9_]{0,8}", prop::collection::btree_set(0u64..10_000, 0..60)),
                0..4,
            ),
            bytes in any::<u64>(),
        ) {
            let streams: Vec<(String, Vec<u64>)> = streams
                .into_iter()
                .map(|(s, seqs)| (s, seqs.into_iter().collect()))
                .collect();
            let text = seal_text(bytes, &streams);
            for (name, _) in &streams {
                let expected = of_stream(&streams, Some(name));
                prop_assert_eq!(parse_seal(&text, Some(name)), Some(Sealed { bytes, sequences: expected }));
            }
        }

        #[test]
        fn parsing_any_text_as_a_seal_never_panics(text in ".{0,200}") {
            let _ = parse_seal(&text, Some("S"));
        }
    }
}
