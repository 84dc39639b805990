//! Which messages of an object about to be written its partition folder already holds, so
//! a message delivered again after a crash between an upload and its ACKs is committed
//! without a second copy in an overlapping object. The rules are
//! [`crate::sinks::util::archive`]'s; this is their I/O for a bucket.
//!
//! The partition folder is a function of the message (`key::plan`), so only that folder is
//! listed, and only from [`MOST_PER_WRITE`] sequences below the lowest one looked for (the
//! store lists in name order, and names start with the zero-padded first sequence): an
//! object without hash never spans more, so the listing is short however large the
//! archive. It stops at the first name above the highest sequence looked for. A hashed
//! object is read (a GET, its sequences taken from the Parquet column or the JSON Lines
//! records) once, then kept in [`Known`].
//!
//! A failed listing or GET is classified like an upload failure, so the batch is held and
//! retried, never written blind or dropped — except a GET the store refuses as not
//! allowed (a role that may write and list but not read): that object counts as
//! unreadable, and what it may hold is written again.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::classify::failure;
use super::config::Compression;
use super::encode::decode;
use crate::sinks::contract::SinkError;
use crate::sinks::parquet::read as parquet_read;
use crate::sinks::util::archive::{gives_back, Known, Lookup, Named, MOST_PER_WRITE};

/// How the objects' records are stored.
#[derive(Debug, Clone, Copy)]
pub(super) enum Records {
    /// Parquet: the `stream_sequence` column.
    Parquet,
    /// JSON Lines with this compression: each record's `stream_sequence`.
    Lines(Compression),
}

/// A bucket's partition folders, as one sink sees them.
pub(super) struct Folders<'a> {
    /// The store.
    pub store: &'a Arc<dyn ObjectStore>,
    /// The bucket, for error messages.
    pub bucket: &'a str,
    /// The ending of the sink's object names, without dot.
    pub extension: &'a str,
    /// How to read an object's sequences.
    pub records: Records,
    /// The sequences of hashed objects read so far.
    pub known: &'a mut Known,
}

/// One object of a listing that may hold wanted sequences.
struct Listed {
    location: Path,
    stem: String,
    named: Named,
}

impl Folders<'_> {
    /// Which of `wanted` the objects of `folder` hold.
    pub(super) async fn held(
        &mut self,
        folder: &Path,
        wanted: BTreeSet<u64>,
    ) -> Result<BTreeSet<u64>, SinkError> {
        let mut look = Lookup::new(wanted);
        let Some((low, high)) = look.bounds() else {
            return Ok(BTreeSet::new());
        };
        let mut hashed = Vec::new();
        for listed in self.list(folder, low, high).await? {
            if !look.by_name(&listed.named) {
                hashed.push(listed);
            }
        }
        for listed in hashed {
            if look.is_done() {
                break;
            }
            if !look.concerns(&listed.named) {
                continue;
            }
            let key = listed.location.as_ref().to_string();
            let read = match self.known.get(&key) {
                Some(read) => read,
                None => match self.read(&listed).await? {
                    Some(read) => {
                        self.known.insert(key, read.clone());
                        read
                    }
                    // Gone since the listing: it holds nothing.
                    None => continue,
                },
            };
            if let Some(seqs) = read {
                // The contents were checked against the name when read.
                let _ = look.read(&listed.stem, &seqs);
            }
        }
        let held = look.held();
        if !held.is_empty() {
            tracing::debug!(bucket = self.bucket, folder = %folder, messages = held.len(), "messages delivered again are in the partition's objects; not written again");
        }
        Ok(held)
    }

    /// The objects directly in `folder` whose names may hold a sequence in `low..=high`.
    async fn list(&self, folder: &Path, low: u64, high: u64) -> Result<Vec<Listed>, SinkError> {
        let from = folder
            .clone()
            .join(format!("{:020}", low.saturating_sub(MOST_PER_WRITE)).as_str());
        let prefix = (!folder.as_ref().is_empty()).then_some(folder);
        let depth = folder.parts().count() + 1;
        let ending = format!(".{}", self.extension);
        let mut listing = self.store.list_with_offset(prefix, &from);
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| failure(self.bucket, "list", folder.as_ref(), &e))?;
            if meta.location.parts().count() != depth {
                continue;
            }
            let Some(stem) = meta
                .location
                .filename()
                .and_then(|n| n.strip_suffix(ending.as_str()))
            else {
                continue;
            };
            let Some(named) = Named::parse(stem) else {
                continue;
            };
            if named.first > high {
                break;
            }
            out.push(Listed {
                stem: stem.to_string(),
                location: meta.location,
                named,
            });
        }
        Ok(out)
    }

    /// The sorted sequences of a hashed object: `None` when it is gone, `Some(None)` when
    /// it cannot tell — unreadable, not a jetsink object, or holding other sequences than
    /// its name says — which is warned about (once: the caller keeps the answer), and the
    /// messages are written again rather than trusted to it.
    async fn read(&self, listed: &Listed) -> Result<Option<Option<Arc<[u64]>>>, SinkError> {
        let key = listed.location.as_ref();
        let body = match self.store.get(&listed.location).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        let read = match body {
            Ok(body) => self.sequences(body),
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => match failure(self.bucket, "GET", key, &e) {
                // Not allowed to read (a write-only role): as unreadable, never held for it.
                SinkError::Misconfigured { message } => Err(message),
                err => return Err(err),
            },
        };
        let why = match read {
            Ok(Some(seqs)) if gives_back(&listed.stem, &seqs) => {
                return Ok(Some(Some(Arc::from(seqs))))
            }
            Ok(Some(_)) => "it holds other sequences than its name says".to_string(),
            Ok(None) => "it has no stream_sequence in every row".to_string(),
            Err(e) => e,
        };
        tracing::warn!(bucket = self.bucket, key, reason = %why, "cannot tell which messages an object with an archive name holds; messages delivered again that it may hold are written again");
        Ok(Some(None))
    }

    /// The sorted sequences of an object's body; `Ok(None)` when a record has none.
    fn sequences(&self, body: Bytes) -> Result<Option<Vec<u64>>, String> {
        match self.records {
            Records::Parquet => parquet_read::sequences(body).map_err(|e| e.to_string()),
            Records::Lines(compression) => lines(compression, &body).map(Some),
        }
    }
}

/// The stream sequence of a stored record; the rest is not read.
#[derive(serde::Deserialize)]
struct SequenceOnly {
    stream_sequence: u64,
}

/// The sorted stream sequences of a JSON Lines object's records.
fn lines(compression: Compression, body: &[u8]) -> Result<Vec<u64>, String> {
    let text = decode(compression, body).map_err(|e| format!("cannot decode it: {e}"))?;
    let mut seqs = Vec::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let record: SequenceOnly = serde_json::from_slice(line)
            .map_err(|e| format!("a line is not a jetsink record: {e}"))?;
        seqs.push(record.stream_sequence);
    }
    seqs.sort_unstable();
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::util::archive::object_name;
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    async fn put(store: &Arc<dyn ObjectStore>, key: &str, seqs: &[u64]) {
        let body: String = seqs
            .iter()
            .map(|s| format!("{{\"stream_sequence\":{s}}}\n"))
            .collect();
        store
            .put(&Path::from(key), PutPayload::from(body.into_bytes()))
            .await
            .unwrap();
    }

    async fn held(
        store: &Arc<dyn ObjectStore>,
        known: &mut Known,
        wanted: &[u64],
    ) -> BTreeSet<u64> {
        let mut folders = Folders {
            store,
            bucket: "b",
            extension: "jsonl",
            records: Records::Lines(Compression::None),
            known,
        };
        let wanted = wanted.iter().copied().collect();
        folders.held(&Path::from("p/S"), wanted).await.unwrap()
    }

    #[tokio::test]
    async fn a_folder_holds_what_its_names_and_hashed_objects_say_and_nothing_elsewhere() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let at = |seqs: &[u64]| format!("p/S/{}.jsonl", object_name(seqs));
        put(&store, &at(&[1, 2, 3, 4]), &[1, 2, 3, 4]).await;
        put(&store, &at(&[10, 12, 14]), &[10, 12, 14]).await;
        // Another set's contents under a name: holds nothing.
        put(&store, &at(&[20, 22, 24]), &[20, 21, 24]).await;
        // Deeper, another folder, another extension: not looked at.
        put(
            &store,
            &format!("p/S/x/{}.jsonl", object_name(&[30])),
            &[30],
        )
        .await;
        put(&store, &format!("p/T/{}.jsonl", object_name(&[31])), &[31]).await;
        put(
            &store,
            &format!("p/S/{}.jsonl.gz", object_name(&[32])),
            &[32],
        )
        .await;
        // Far below the lowest sequence looked for: not listed.
        let far = 200_000;
        put(&store, &at(&[5, far + 7]), &[5, far + 7]).await;
        let mut known = Known::default();
        assert_eq!(
            held(&store, &mut known, &[2, 11, 12, 21, 22, 30, 31, 32]).await,
            BTreeSet::from([2, 12])
        );
        assert_eq!(
            held(&store, &mut known, &[far + 7]).await,
            BTreeSet::new(),
            "an object starting further below than one write spans is not listed"
        );
        assert_eq!(held(&store, &mut known, &[5]).await, BTreeSet::from([5]));
        assert_eq!(known.len(), 3, "the hashed objects read, once each");
    }

    #[test]
    fn the_sequences_of_json_lines_are_read_sorted_and_a_foreign_line_is_refused() {
        let body = b"{\"stream_sequence\":7,\"x\":1}\n{\"stream_sequence\":5}\n";
        assert_eq!(lines(Compression::None, body), Ok(vec![5, 7]));
        assert!(lines(Compression::None, b"{\"seq\":1}\n")
            .is_err_and(|e| e.contains("not a jetsink record")));
        assert!(lines(Compression::Gzip, b"not gzip").is_err());
    }
}
