//! An object's bytes: the file destination's JSON Lines records
//! ([`crate::sinks::file::record`]), optionally gzip- or zstd-compressed, or a Parquet
//! file ([`crate::sinks::parquet`]), produced incrementally so the sink can upload parts
//! while it encodes. Pure: no I/O.

use std::io::{self, Read, Write};
use std::sync::Arc;

use flate2::write::GzEncoder;
use time::OffsetDateTime;

use super::config::Compression;
use crate::envelope::Envelope;
use crate::sinks::file::record;
use crate::sinks::parquet::{EncodeError, Encoder, Options};

/// When a batch was written, in both forms the encoders need.
pub struct Written {
    /// The time (Parquet's `written_at`).
    pub time: OffsetDateTime,
    /// RFC 3339 (the JSON Lines record's `written_at`).
    pub text: String,
}

/// Why records could not be added to an object.
#[derive(Debug)]
pub enum PushError {
    /// The message at this batch position cannot be stored (a Parquet column's value).
    Refused {
        /// Batch position.
        index: usize,
        /// What is wrong, without content.
        message: String,
    },
    /// The encoder failed.
    Failed(String),
}

impl From<EncodeError> for PushError {
    fn from(e: EncodeError) -> PushError {
        match e {
            EncodeError::Refused { index, message } => PushError::Refused { index, message },
            EncodeError::Failed(m) => PushError::Failed(m),
        }
    }
}

impl From<io::Error> for PushError {
    fn from(e: io::Error) -> PushError {
        PushError::Failed(e.to_string())
    }
}

/// An object being encoded: JSON Lines records, or a Parquet file in row groups.
pub enum Body {
    /// JSON Lines, one record per push.
    Lines(ObjectEncoder),
    /// Parquet, one row group per push.
    Parquet(Box<Encoder<Vec<u8>>>),
}

impl Body {
    /// JSON Lines with `compression`, or Parquet with `parquet`'s options.
    pub fn new(
        compression: Compression,
        parquet: Option<&Arc<Options>>,
    ) -> Result<Body, PushError> {
        Ok(match parquet {
            Some(o) => Body::Parquet(Box::new(Encoder::new(Vec::new(), o.clone())?)),
            None => Body::Lines(ObjectEncoder::new(compression)?),
        })
    }

    /// How many messages one [`Body::push`] takes: 1 record, or one row group.
    pub fn rows_per_push(&self) -> usize {
        match self {
            Body::Lines(_) => 1,
            Body::Parquet(p) => p.rows_per_group(),
        }
    }

    /// Appends the messages at `members` of `batch`.
    pub fn push(
        &mut self,
        batch: &[Envelope],
        members: &[usize],
        written: &Written,
        scratch: &mut Vec<u8>,
    ) -> Result<(), PushError> {
        match self {
            Body::Lines(l) => {
                for &i in members {
                    l.push(&batch[i], &written.text, scratch)?;
                }
                Ok(())
            }
            Body::Parquet(p) => Ok(p.write_group(batch, members, written.time)?),
        }
    }

    /// Bytes produced and not yet taken.
    pub fn pending(&mut self) -> Result<usize, PushError> {
        Ok(match self {
            Body::Lines(l) => l.pending(),
            Body::Parquet(p) => p.output()?.len(),
        })
    }

    /// Takes the bytes produced so far.
    pub fn take(&mut self) -> Result<Vec<u8>, PushError> {
        Ok(match self {
            Body::Lines(l) => l.take(),
            Body::Parquet(p) => std::mem::take(p.output()?),
        })
    }

    /// Ends the object and returns the bytes not taken yet.
    pub fn finish(self) -> Result<Vec<u8>, PushError> {
        Ok(match self {
            Body::Lines(l) => l.finish()?,
            Body::Parquet(p) => p.finish()?,
        })
    }
}

/// zstd's default level: fast, about gzip's ratio.
const ZSTD_LEVEL: i32 = 3;

/// Encodes records into an object's bytes, which can be taken out as they are produced.
pub enum ObjectEncoder {
    /// Records as they are.
    Plain(Vec<u8>),
    /// Records through gzip.
    Gzip(GzEncoder<Vec<u8>>),
    /// Records through zstd.
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl ObjectEncoder {
    /// An encoder for `compression`.
    pub fn new(compression: Compression) -> io::Result<ObjectEncoder> {
        Ok(match compression {
            Compression::None => ObjectEncoder::Plain(Vec::new()),
            Compression::Gzip => {
                ObjectEncoder::Gzip(GzEncoder::new(Vec::new(), flate2::Compression::default()))
            }
            Compression::Zstd => {
                ObjectEncoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?)
            }
            Compression::Snappy => return Err(snappy_lines()),
        })
    }

    /// Appends `e`'s record. `scratch` is a reused buffer for the uncompressed line.
    pub fn push(
        &mut self,
        e: &Envelope,
        written_at: &str,
        scratch: &mut Vec<u8>,
    ) -> io::Result<()> {
        match self {
            ObjectEncoder::Plain(out) => record::encode(e, written_at, out),
            ObjectEncoder::Gzip(z) => {
                scratch.clear();
                record::encode(e, written_at, scratch)?;
                z.write_all(scratch)
            }
            ObjectEncoder::Zstd(z) => {
                scratch.clear();
                record::encode(e, written_at, scratch)?;
                z.write_all(scratch)
            }
        }
    }

    /// Bytes produced and not yet taken.
    pub fn pending(&self) -> usize {
        match self {
            ObjectEncoder::Plain(out) => out.len(),
            ObjectEncoder::Gzip(z) => z.get_ref().len(),
            ObjectEncoder::Zstd(z) => z.get_ref().len(),
        }
    }

    /// Takes the bytes produced so far (the compressors keep what they have not emitted).
    pub fn take(&mut self) -> Vec<u8> {
        match self {
            ObjectEncoder::Plain(out) => std::mem::take(out),
            ObjectEncoder::Gzip(z) => std::mem::take(z.get_mut()),
            ObjectEncoder::Zstd(z) => std::mem::take(z.get_mut()),
        }
    }

    /// Ends the object and returns the bytes not taken yet.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            ObjectEncoder::Plain(out) => Ok(out),
            ObjectEncoder::Gzip(z) => z.finish(),
            ObjectEncoder::Zstd(z) => z.finish(),
        }
    }
}

/// The JSON Lines of a stored object, decompressed as its `compression` says.
pub fn decode(compression: Compression, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match compression {
        Compression::None => out.extend_from_slice(bytes),
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out)?;
        }
        Compression::Zstd => {
            zstd::stream::read::Decoder::new(bytes)?.read_to_end(&mut out)?;
        }
        Compression::Snappy => return Err(snappy_lines()),
    }
    Ok(out)
}

/// Snappy is a Parquet codec here; validation refuses it for JSON Lines.
fn snappy_lines() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "snappy compresses Parquet objects only",
    )
}
