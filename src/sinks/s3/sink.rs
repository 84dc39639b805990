//! [`S3Sink`]: the only part of the `s3` destination that does I/O. Each batch is planned
//! into objects ([`key::plan`](super::key::plan)), each object encoded
//! ([`encode`](super::encode): JSON Lines, or Parquet one row group at a time) and
//! uploaded — in one PUT, or, once it outgrows one part, as a multipart upload fed part by
//! part while the rest is still being encoded — and the failures classified by the pure
//! [`classify`](super::classify). A Parquet value that does not fit its column stops the
//! object before it is complete (a multipart upload is aborted) and refuses that message.
//!
//! Before an object is encoded, every message of it is checked against what its partition
//! folder holds ([`stored`](super::stored)); the ones found are left out of the object and
//! reported already stored, and an object left empty is not written.
//!
//! Memory per object: the part being filled, plus at most [`PARTS_IN_FLIGHT`] parts
//! uploading; the object is never held whole twice. The look reads one hashed object at a
//! time, whole, and keeps only its sequences.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use time::OffsetDateTime;

use super::classify::failure;
use super::client::build;
use super::config::{Compression, S3Config};
use super::encode::{decode, Body, PushError, Written};
use super::format::PARQUET_EXTENSION;
use super::key::{plan, PartitionError, Planned, Template};
use super::stored::{Catalogs, Folders, Records};
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::contract::{Sink, SinkError, Written as Answer};
use crate::sinks::parquet::{read as parquet_read, Format, Options, SettingsRefused};
use crate::sinks::util::archive;

/// Parts of one object uploading at once.
pub const PARTS_IN_FLIGHT: usize = 4;

/// Writes each batch as JSON Lines or Parquet objects in one bucket; committed when every
/// upload completed.
pub struct S3Sink {
    config: S3Config,
    template: Result<Template, PartitionError>,
    /// With `format: "parquet"`, the resolved settings (a problem validation reports).
    parquet: Result<Option<Arc<Options>>, SettingsRefused>,
    store: Option<Arc<dyn ObjectStore>>,
    /// Reused buffer of one uncompressed record.
    scratch: Vec<u8>,
    /// What the partition folders hold, as far as known.
    catalogs: Catalogs,
}

impl S3Sink {
    /// A sink for `config`; nothing is read or contacted until [`Sink::open`].
    pub fn new(config: S3Config) -> S3Sink {
        let template = Template::parse(&config.partition);
        let parquet = match config.format {
            Format::Jsonl => Ok(None),
            Format::Parquet => config
                .parquet_keys()
                .resolve()
                .map(|o| Some(Arc::new(o)))
                .map_err(SettingsRefused),
        };
        S3Sink {
            config,
            template,
            parquet,
            store: None,
            scratch: Vec::new(),
            catalogs: Catalogs::default(),
        }
    }

    /// Builds the client on first use (a failed build is tried again at the next write).
    fn ensure(&mut self) -> Result<Arc<dyn ObjectStore>, SinkError> {
        if let Some(s) = &self.store {
            return Ok(s.clone());
        }
        let store = build(&self.config)?;
        self.store = Some(store.clone());
        Ok(store)
    }

    /// The error of a failed request on `key`.
    fn failure(&self, op: &str, key: &str, err: &object_store::Error) -> SinkError {
        failure(&self.config.bucket, op, key, err)
    }

    /// Writes the batch's objects, each without the messages its partition folder already
    /// holds; `Ok` names the positions of those, committed without being written again.
    async fn write_objects(&mut self, batch: &[Envelope]) -> Result<Vec<usize>, SinkError> {
        let location = self.config.location();
        let template = match &self.template {
            Ok(t) => t,
            Err(e) => {
                return Err(SinkError::Misconfigured {
                    message: format!("{location}: partition {e}"),
                })
            }
        };
        let extension = self.config.extension();
        let refused = |(index, message): (usize, String)| SinkError::Permanent {
            index: Some(index),
            message: format!(
                "{location}: stream {} sequence {}: {message}",
                batch[index].stream, batch[index].stream_sequence
            ),
        };
        let objects = plan(batch, template, &self.config.prefix, extension).map_err(refused)?;
        let store = self.ensure().map_err(|e| e.with_context(&location))?;
        let now = OffsetDateTime::now_utc();
        let written = Written {
            time: now,
            text: rfc3339(now),
        };
        let records = match self.config.format {
            Format::Jsonl => Records::Lines(self.config.jsonl_compression()),
            Format::Parquet => Records::Parquet,
        };
        let mut stored = Vec::new();
        for object in objects {
            let mut folders = Folders {
                store: &store,
                bucket: &self.config.bucket,
                extension,
                records,
                catalogs: &mut self.catalogs,
            };
            let seqs = object.members.iter().map(|&i| batch[i].stream_sequence);
            let redelivered = object.members.iter().any(|&i| batch[i].delivered > 1);
            let held = folders.held(&object.folder, seqs, redelivered).await?;
            let (members, already) = archive::split(batch, &object.members, &held);
            let object = match already.is_empty() {
                true => object,
                false if members.is_empty() => {
                    stored.extend(already);
                    continue;
                }
                false => object.without(batch, members, extension).map_err(refused)?,
            };
            stored.extend(already);
            self.upload(&store, batch, &object, &written).await?;
            let seqs: Vec<u64> = object
                .members
                .iter()
                .map(|&i| batch[i].stream_sequence)
                .collect();
            self.catalogs.wrote(&object.folder, &object.path, &seqs);
        }
        Ok(stored)
    }

    fn prefix_path(&self) -> Option<Path> {
        (!self.config.prefix.is_empty()).then(|| {
            Path::from_iter(
                self.config
                    .prefix
                    .split('/')
                    .map(object_store::path::PathPart::from),
            )
        })
    }

    /// Encodes and uploads one object.
    async fn upload(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        batch: &[Envelope],
        object: &Planned,
        written: &Written,
    ) -> Result<(), SinkError> {
        let key = object.path.as_ref().to_string();
        let part = usize::try_from(self.config.multipart_part_bytes).unwrap_or(usize::MAX);
        let location = self.config.location();
        let encode_error = |e: PushError| match e {
            PushError::Refused { index, message } => SinkError::Permanent {
                index: Some(index),
                message: format!(
                    "{location}: stream {} sequence {}: {message}",
                    batch[index].stream, batch[index].stream_sequence
                ),
            },
            PushError::Failed(m) => SinkError::transient(format!("cannot encode {key}: {m}")),
        };
        let parquet = self.parquet.clone().map_err(|e| SinkError::Misconfigured {
            message: format!("{location}: {e}"),
        })?;
        let mut body =
            Body::new(self.config.jsonl_compression(), parquet.as_ref()).map_err(encode_error)?;
        let mut multipart: Option<WriteMultipart> = None;
        for members in object.members.chunks(body.rows_per_push()) {
            let mut step = body
                .push(batch, members, written, &mut self.scratch)
                .and_then(|()| body.pending());
            if matches!(step, Ok(pending) if pending < part) {
                continue;
            }
            if let (Ok(_), None) = (&step, &multipart) {
                let upload = store
                    .put_multipart(&object.path)
                    .await
                    .map_err(|e| self.failure("start multipart upload of", &key, &e))?;
                multipart = Some(WriteMultipart::new_with_chunk_size(upload, part));
            }
            if let (Ok(_), Some(w)) = (&step, multipart.as_mut()) {
                if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT - 1).await {
                    let err = self.failure("upload a part of", &key, &e);
                    if let Some(w) = multipart.take() {
                        abort(w, &key).await;
                    }
                    return Err(err);
                }
                step = body.take().map(|bytes| {
                    w.put(Bytes::from(bytes));
                    0
                });
            }
            if let Err(e) = step {
                if let Some(w) = multipart.take() {
                    abort(w, &key).await;
                }
                return Err(encode_error(e));
            }
        }
        let rest = match body.finish() {
            Ok(rest) => rest,
            Err(e) => {
                if let Some(w) = multipart.take() {
                    abort(w, &key).await;
                }
                return Err(encode_error(e));
            }
        };
        match multipart {
            None => {
                store
                    .put(&object.path, PutPayload::from(rest))
                    .await
                    .map_err(|e| self.failure("PUT", &key, &e))?;
            }
            Some(mut w) => {
                w.put(Bytes::from(rest));
                // Every part first, so a failed part aborts the upload here (finish would
                // return without aborting it).
                if let Err(e) = w.wait_for_capacity(0).await {
                    let err = self.failure("upload a part of", &key, &e);
                    abort(w, &key).await;
                    return Err(err);
                }
                w.finish()
                    .await
                    .map_err(|e| self.failure("complete multipart upload of", &key, &e))?;
            }
        }
        Ok(())
    }
}

/// Aborts a failed multipart upload, so its parts do not linger (best effort: a bucket
/// lifecycle rule should clean up what this cannot).
async fn abort(w: WriteMultipart, key: &str) {
    if let Err(e) = w.abort().await {
        tracing::debug!(key, error = %e, "could not abort a failed multipart upload");
    }
}

/// The idempotency key and stream of a stored record; the rest is not read.
#[derive(serde::Deserialize)]
struct KeyOnly<'a> {
    #[serde(borrow)]
    idempotency_key: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    stream: std::borrow::Cow<'a, str>,
}

#[async_trait]
impl Sink for S3Sink {
    fn stream_created(&mut self, at: std::time::SystemTime) {
        self.catalogs.stream_created(at);
    }

    async fn open(&mut self) -> Result<(), SinkError> {
        let location = self.config.location();
        if let Err(e) = &self.template {
            return Err(SinkError::Misconfigured {
                message: format!("{location}: partition {e}"),
            });
        }
        let store = self.ensure().map_err(|e| e.with_context(&location))?;
        // One listing page under the prefix: the bucket exists, the credentials and the
        // region work.
        let prefix = self.prefix_path();
        let mut listing = store.list(prefix.as_ref());
        if let Some(Err(e)) = listing.next().await {
            return Err(self.failure("list", &self.config.prefix, &e));
        }
        tracing::info!(location = %location, "s3 destination ready");
        Ok(())
    }

    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        match self.write(batch).await {
            Answer::Batch(result) => result,
            Answer::Each(_) => Ok(()),
        }
    }

    /// Writes the batch, naming the messages its objects' folders already held.
    async fn write(&mut self, batch: &[Envelope]) -> Answer {
        if batch.is_empty() {
            return Answer::Batch(Ok(()));
        }
        let result = self.write_objects(batch).await;
        if matches!(&result, Err(e) if !matches!(e, SinkError::Permanent { .. })) {
            // An upload whose answer was lost may have stored its object: list again.
            self.catalogs.forget();
        }
        match result {
            Ok(already) => Answer::committed(batch.len(), &already),
            Err(e) => Answer::Batch(Err(e)),
        }
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        self.ensure().map(|_| ())
    }

    async fn stored_keys(&mut self, stream: &str) -> Result<Option<u64>, SinkError> {
        let store = self.ensure()?;
        let prefix = self.prefix_path();
        let mut listing = store.list(prefix.as_ref());
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.failure("list", &self.config.prefix, &e))?;
            let name = meta.location.as_ref().to_string();
            let parquet = name.ends_with(&format!(".{PARQUET_EXTENSION}"));
            let compression = Compression::of_name(&name);
            if compression.is_none() && !parquet {
                continue;
            }
            let body = store
                .get(&meta.location)
                .await
                .map_err(|e| self.failure("GET", &name, &e))?
                .bytes()
                .await
                .map_err(|e| self.failure("GET", &name, &e))?;
            let Some(compression) = compression.filter(|_| !parquet) else {
                if !parquet_read::stream_keys(body, stream, &mut keys)
                    .map_err(|e| SinkError::transient(format!("{name}: {e}")))?
                {
                    return Ok(None);
                }
                continue;
            };
            let text = decode(compression, &body)
                .map_err(|e| SinkError::transient(format!("cannot decode {name}: {e}")))?;
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let record: KeyOnly = serde_json::from_slice(line).map_err(|e| {
                    SinkError::transient(format!("{name}: a line is not a jetsink record: {e}"))
                })?;
                if record.stream == stream {
                    keys.insert(record.idempotency_key.into_owned());
                }
            }
        }
        Ok(Some(keys.len() as u64))
    }
}
