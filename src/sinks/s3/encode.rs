//! An object's bytes: the file destination's JSON Lines records
//! ([`crate::sinks::file::record`]), optionally gzip- or zstd-compressed, produced
//! incrementally so the sink can upload parts while it encodes. Pure: no I/O.

use std::io::{self, Read, Write};

use flate2::write::GzEncoder;

use super::config::Compression;
use crate::envelope::Envelope;
use crate::sinks::file::record;

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
        })
    }

    /// Appends `e`'s record. `scratch` is a reused buffer for the uncompressed line.
    pub fn push(&mut self, e: &Envelope, written_at: &str, scratch: &mut Vec<u8>) -> io::Result<()> {
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
    }
    Ok(out)
}
