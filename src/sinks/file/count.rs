//! Counting what a file destination holds: the distinct idempotency keys of one stream in
//! its JSON Lines files, for `jetsink bench`'s proof that a pass lost nothing.
//!
//! Keys are the default `<stream>:<sequence>`, so each is remembered as one bit of a
//! bitset by its stream sequence: counting a 1,000,000-message pass must not inflate the
//! peak memory of the next one.

use std::path::{Path, PathBuf};

use crate::files::Kind;

/// The stream and sequence of one line; the rest is skipped.
#[derive(serde::Deserialize)]
struct Line<'a> {
    stream: &'a str,
    stream_sequence: u64,
}

/// Why the files of a directory could not be counted.
#[derive(Debug, thiserror::Error)]
#[error("reading {}: {source}", .dir.display())]
pub struct CountError {
    /// The directory whose listing or files could not be read.
    pub dir: PathBuf,
    /// What failed.
    pub source: std::io::Error,
}

/// Distinct stream sequences of `stream` in the `.jsonl` files of `dir` whose names start
/// with `prefix`.
pub fn distinct_sequences(dir: &Path, prefix: &str, stream: &str) -> Result<u64, CountError> {
    let fail = |source: std::io::Error| CountError {
        dir: dir.to_path_buf(),
        source,
    };
    let mut seen: Vec<u64> = Vec::new();
    let mut count = 0u64;
    let mut line = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".jsonl"));
        if !ours {
            continue;
        }
        // Through the one bounded reader: a regular file only, a line at a time.
        let bounded = |e: crate::files::FileError| fail(std::io::Error::other(e.to_string()));
        let file = crate::files::open_regular(&path, Kind::Records).map_err(bounded)?;
        let mut reader = std::io::BufReader::new(file);
        let shown = path.display().to_string();
        loop {
            let read = crate::files::read_line(&mut reader, &mut line, Kind::Records, &shown);
            if read.map_err(bounded)? == crate::files::Line::End {
                break;
            }
            let Ok(l) = serde_json::from_slice::<Line<'_>>(&line) else {
                continue;
            };
            if l.stream != stream {
                continue;
            }
            let (word, bit) = ((l.stream_sequence / 64) as usize, l.stream_sequence % 64);
            if seen.len() <= word {
                seen.resize(word + 1, 0);
            }
            if seen[word] & (1 << bit) == 0 {
                seen[word] |= 1 << bit;
                count += 1;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_written_twice_counts_once_and_other_streams_and_files_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let line = |stream: &str, seq: u64| {
            format!("{{\"stream\":\"{stream}\",\"stream_sequence\":{seq},\"payload\":\"x\"}}\n")
        };
        let a = format!("{}{}{}", line("S", 1), line("S", 2), line("T", 3));
        std::fs::write(dir.path().join("events-1.jsonl"), a).unwrap();
        std::fs::write(dir.path().join("events-2.jsonl"), line("S", 2) + "torn {").unwrap();
        std::fs::write(dir.path().join("other-1.jsonl"), line("S", 9)).unwrap();
        assert_eq!(distinct_sequences(dir.path(), "events", "S").unwrap(), 2);
        assert_eq!(distinct_sequences(dir.path(), "events", "T").unwrap(), 1);
        let gone = distinct_sequences(&dir.path().join("gone"), "events", "S").unwrap_err();
        assert!(gone.to_string().starts_with("reading "), "{gone}");
    }
}
