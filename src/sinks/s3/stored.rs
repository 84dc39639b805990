//! Which messages of an object about to be written its partition folder already holds, so
//! a message that comes again — after a crash between an upload and its ACKs, a server
//! that rolled its consumer state back, or a replay — is committed without a second copy
//! in an overlapping object. What a folder holds is kept in a catalog
//! ([`crate::sinks::util::holdings`]) built from one full listing of the folder the first
//! time a batch touches it, and kept in step with every object this sink uploads there;
//! every message of an object is checked against it, whatever its delivery count.
//!
//! The partition folder is a function of the message (`key::plan`), so only that folder is
//! listed. A hashed object is read (a GET, its sequences taken from the Parquet column or
//! the JSON Lines records) when a wanted sequence falls in its range, then kept in
//! [`Known`]. Objects last modified before the source stream was created are not counted:
//! they hold the messages of a stream of the same name deleted since. At most
//! [`FOLDERS`] folders are kept; one dropped is listed again when a batch needs it.
//!
//! A failed listing or GET is classified like an upload failure, so the batch is held and
//! retried, never written blind or dropped — except a GET the store refuses as not
//! allowed (a role that may write and list but not read): that object counts as
//! unreadable, and what it may hold is written again. After a failed write the catalogs
//! are dropped (an upload whose answer was lost may have stored its object) and the
//! folders listed again.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::classify::failure;
use super::config::Compression;
use super::encode::decode;
use crate::sinks::contract::SinkError;
use crate::sinks::parquet::read as parquet_read;
use crate::sinks::util::archive::{gives_back, object_name, predates_stream, Known, Named};
use crate::sinks::util::holdings::Holdings;

/// Most partition folders whose catalogs a sink keeps.
pub(super) const FOLDERS: usize = 64;

/// A batch holding a redelivery lists its folder again when the catalog is older than
/// this: another instance on the same consumer (a standby taking over, competing
/// instances) may have stored that message's object since, and died before its ACK; the
/// redelivery comes at least AckWait after that write.
pub(super) const RELIST_AFTER: Duration = Duration::from_secs(1);

/// How the objects' records are stored.
#[derive(Debug, Clone, Copy)]
pub(super) enum Records {
    /// Parquet: the `stream_sequence` column.
    Parquet,
    /// JSON Lines with this compression: each record's `stream_sequence`.
    Lines(Compression),
}

/// What a sink knows its partition folders hold.
#[derive(Debug, Default)]
pub(super) struct Catalogs {
    /// By folder, with when it was listed; the most recently used last in `order`.
    folders: HashMap<String, (Holdings, Instant)>,
    order: VecDeque<String>,
    /// The sequences of hashed objects read (or written) so far, by key.
    known: Known,
    /// When the source stream was created: older objects are not counted.
    since: Option<SystemTime>,
}

impl Catalogs {
    /// Counts only objects modified at or after `created`; a change lists again.
    pub(super) fn stream_created(&mut self, created: SystemTime) {
        if self.since != Some(created) {
            self.since = Some(created);
            self.forget();
        }
    }

    /// Drops every catalog (after a write that failed part-way).
    pub(super) fn forget(&mut self) {
        self.folders.clear();
        self.order.clear();
    }

    /// Records an object uploaded into `folder`, holding sorted `seqs`.
    pub(super) fn wrote(&mut self, folder: &Path, key: &Path, seqs: &[u64]) {
        let Some((h, _)) = self.folders.get_mut(folder.as_ref()) else {
            return;
        };
        let stem = object_name(seqs);
        h.add_unit(&stem, seqs);
        if Named::parse(&stem).is_some_and(|n| n.hashed) {
            // Kept, so a later batch finds what it holds without reading it back.
            self.known
                .insert(key.as_ref().to_string(), Some(Arc::from(seqs)));
        }
    }

    /// Makes `folder` the most recently used, dropping the oldest beyond [`FOLDERS`].
    fn touch(&mut self, folder: &str) {
        if let Some(i) = self.order.iter().position(|f| f == folder) {
            self.order.remove(i);
        }
        self.order.push_back(folder.to_string());
        while self.order.len() > FOLDERS {
            if let Some(old) = self.order.pop_front() {
                self.folders.remove(&old);
            }
        }
    }
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
    /// What is known of them.
    pub catalogs: &'a mut Catalogs,
}

impl Folders<'_> {
    /// Which of `seqs` the objects of `folder` hold; `redelivered` when one of them was
    /// delivered before (the folder is listed again when its catalog is older than
    /// [`RELIST_AFTER`]).
    pub(super) async fn held(
        &mut self,
        folder: &Path,
        seqs: impl IntoIterator<Item = u64>,
        redelivered: bool,
    ) -> Result<BTreeSet<u64>, SinkError> {
        let stale = match self.catalogs.folders.get(folder.as_ref()) {
            None => true,
            Some((_, listed)) => redelivered && listed.elapsed() > RELIST_AFTER,
        };
        if stale {
            let at = Instant::now();
            let listed = self.list(folder).await?;
            self.catalogs
                .folders
                .insert(folder.as_ref().to_string(), (listed, at));
        }
        self.catalogs.touch(folder.as_ref());
        let Some((holdings, _)) = self.catalogs.folders.get(folder.as_ref()) else {
            return Ok(BTreeSet::new());
        };
        let wanted = holdings.may_hold(seqs);
        if wanted.is_empty() {
            return Ok(wanted);
        }
        let key = |stem: &str| {
            folder
                .clone()
                .join(format!("{stem}.{}", self.extension).as_str())
        };
        for stem in holdings.to_read(&wanted) {
            let location = key(&stem);
            if self.catalogs.known.get(location.as_ref()).is_some() {
                continue;
            }
            // Gone since the listing: it holds nothing.
            let read = self.read(&location, &stem).await?.flatten();
            self.catalogs
                .known
                .insert(location.as_ref().to_string(), read);
        }
        let known = &self.catalogs.known;
        let held = holdings.held(&wanted, |stem| known.get(key(stem).as_ref()).flatten());
        if !held.is_empty() {
            tracing::debug!(bucket = self.bucket, folder = %folder, messages = held.len(), "messages delivered again are in the partition's objects; not written again");
        }
        Ok(held)
    }

    /// The catalog of the objects directly in `folder` named by the sequences they hold
    /// and modified since the stream was created.
    async fn list(&self, folder: &Path) -> Result<Holdings, SinkError> {
        let prefix = (!folder.as_ref().is_empty()).then_some(folder);
        let depth = folder.parts().count() + 1;
        let ending = format!(".{}", self.extension);
        let mut listing = self.store.list(prefix);
        let mut holdings = Holdings::new();
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
            if self
                .catalogs
                .since
                .is_some_and(|since| predates_stream(SystemTime::from(meta.last_modified), since))
            {
                continue;
            }
            holdings.add_named(stem, named);
        }
        Ok(holdings)
    }

    /// The sorted sequences of a hashed object: `None` when it is gone, `Some(None)` when
    /// it cannot tell — unreadable, not a jetsink object, or holding other sequences than
    /// its name says — which is warned about (once: the caller keeps the answer), and the
    /// messages are written again rather than trusted to it.
    async fn read(
        &self,
        location: &Path,
        stem: &str,
    ) -> Result<Option<Option<Arc<[u64]>>>, SinkError> {
        let key = location.as_ref();
        let body = match self.store.get(location).await {
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
            Ok(Some(seqs)) if gives_back(stem, &seqs) => return Ok(Some(Some(Arc::from(seqs)))),
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
        catalogs: &mut Catalogs,
        wanted: &[u64],
    ) -> BTreeSet<u64> {
        look(store, catalogs, wanted, false).await
    }

    async fn look(
        store: &Arc<dyn ObjectStore>,
        catalogs: &mut Catalogs,
        wanted: &[u64],
        redelivered: bool,
    ) -> BTreeSet<u64> {
        let mut folders = Folders {
            store,
            bucket: "b",
            extension: "jsonl",
            records: Records::Lines(Compression::None),
            catalogs,
        };
        folders
            .held(&Path::from("p/S"), wanted.iter().copied(), redelivered)
            .await
            .unwrap()
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
        // An object spanning far more sequences than any write: still found.
        let far = 200_000;
        put(&store, &at(&[5, far + 7]), &[5, far + 7]).await;
        let mut catalogs = Catalogs::default();
        assert_eq!(
            held(&store, &mut catalogs, &[2, 11, 12, 21, 22, 30, 31, 32]).await,
            BTreeSet::from([2, 12])
        );
        assert_eq!(
            held(&store, &mut catalogs, &[far + 7, far + 8]).await,
            BTreeSet::from([far + 7]),
            "an object starting far below the sequences looked for is found"
        );
        assert_eq!(held(&store, &mut catalogs, &[5]).await, BTreeSet::from([5]));
        assert_eq!(
            catalogs.known.len(),
            3,
            "the hashed objects read, once each"
        );
    }

    #[tokio::test]
    async fn an_object_written_after_the_listing_counts_once_recorded_and_older_ones_do_not() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = |seqs: &[u64]| format!("p/S/{}.jsonl", object_name(seqs));
        put(&store, &key(&[1, 2]), &[1, 2]).await;
        let mut catalogs = Catalogs::default();
        assert_eq!(
            held(&store, &mut catalogs, &[1, 3]).await,
            BTreeSet::from([1])
        );
        put(&store, &key(&[3, 5]), &[3, 5]).await;
        let folder = Path::from("p/S");
        assert_eq!(
            held(&store, &mut catalogs, &[3]).await,
            BTreeSet::new(),
            "not known yet: the listing is kept"
        );
        catalogs.wrote(&folder, &Path::from(key(&[3, 5])), &[3, 5]);
        assert_eq!(
            held(&store, &mut catalogs, &[3, 4]).await,
            BTreeSet::from([3])
        );
        // Every object predates a stream created now: none counts.
        catalogs.stream_created(SystemTime::now() + std::time::Duration::from_secs(60));
        assert_eq!(
            held(&store, &mut catalogs, &[1, 2, 3]).await,
            BTreeSet::new()
        );
    }

    /// A standby taking over, or a competing instance, gets messages another instance
    /// stored and never ACKed: their redelivery lists the folder again.
    #[tokio::test(start_paused = true)]
    async fn a_redelivery_lists_again_a_folder_listed_before_another_instance_wrote_to_it() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = |seqs: &[u64]| format!("p/S/{}.jsonl", object_name(seqs));
        let mut catalogs = Catalogs::default();
        let c = &mut catalogs;
        assert!(look(&store, c, &[1], false).await.is_empty());
        put(&store, &key(&[1, 2]), &[1, 2]).await;
        assert!(
            look(&store, c, &[1], true).await.is_empty(),
            "listed just now: kept"
        );
        tokio::time::advance(RELIST_AFTER + Duration::from_millis(1)).await;
        assert!(
            look(&store, c, &[1], false).await.is_empty(),
            "first deliveries keep the catalog"
        );
        assert_eq!(look(&store, c, &[1, 3], true).await, BTreeSet::from([1]));
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
