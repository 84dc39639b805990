//! Sealing and opening one value with AES-256-GCM through `ring`: the only code that calls
//! the AEAD. The nonce source is passed in so tests can count or fix nonces; the daemon
//! uses the OS generator ([`OsNonces`]).

use bytes::{BufMut, Bytes, BytesMut};
use ring::aead::{Aad, LessSafeKey, Nonce};
use ring::rand::{SecureRandom, SystemRandom};

use super::binding::Binding;
use super::keys::KeyRing;
use super::sealed::{self, Sealed, NONCE_LEN};

/// Where nonces come from.
pub trait NonceSource: Send + Sync {
    /// Fills `out` with fresh random bytes: the nonces of a whole batch at once (one call
    /// of the OS generator per batch instead of one per message).
    fn fill(&self, out: &mut [u8]) -> Result<(), SealError>;
}

/// The operating system's generator (`getrandom`), through `ring`.
#[derive(Debug)]
pub struct OsNonces(SystemRandom);

impl OsNonces {
    /// A handle on the OS generator.
    pub fn new() -> OsNonces {
        OsNonces(SystemRandom::new())
    }
}

impl Default for OsNonces {
    fn default() -> OsNonces {
        OsNonces::new()
    }
}

impl NonceSource for OsNonces {
    fn fill(&self, out: &mut [u8]) -> Result<(), SealError> {
        self.0.fill(out).map_err(|_| SealError::Random)
    }
}

/// Why a value could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The OS random generator failed.
    #[error("the operating system's random generator failed")]
    Random,
    /// The AEAD refused (a value over AES-GCM's length limit).
    #[error("the value could not be encrypted (too large for AES-256-GCM)")]
    Aead,
}

/// Why a stored value could not be opened. Names the key id and the binding, never the
/// content or the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The bytes are not a sealed value.
    #[error(transparent)]
    Format(#[from] sealed::FormatError),
    /// The key ring has no key with this id.
    #[error("no key with id `{0}` in the key ring (the value was encrypted with it)")]
    UnknownKey(String),
    /// Authentication failed: wrong key material, altered bytes, or a value that belongs
    /// to another message or part.
    #[error("authentication failed with key `{key_id}`: the value was altered, or it belongs to another message than stream {stream} sequence {sequence} subject {subject} ({part}), or the key `{key_id}` is not the one that encrypted it")]
    Authentication {
        /// The key tried.
        key_id: String,
        /// The stream of the binding tried.
        stream: String,
        /// Its sequence.
        sequence: u64,
        /// Its subject.
        subject: String,
        /// Which part.
        part: String,
    },
}

/// Appends the sealed value of `plaintext` to `out`: header, ciphertext, tag, with `key`
/// (named `key_id`) and `nonce`; `aad` is the binding's associated data for `key_id`.
/// Seals in place in `out`, so the plaintext is copied once and nothing is allocated when
/// `out` has room. On error `out` is left as it was.
pub fn seal_into(
    (key_id, key): (&str, &LessSafeKey),
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    plaintext: &[u8],
    out: &mut BytesMut,
) -> Result<(), SealError> {
    let at = out.len();
    out.reserve(sealed_len(key_id, plaintext.len()));
    sealed::write_header(out, key_id, &nonce);
    let start = out.len();
    out.extend_from_slice(plaintext);
    match seal_in_place(key, nonce, aad, &mut out[start..]) {
        Ok(tag) => {
            out.put_slice(tag.as_ref());
            Ok(())
        }
        Err(e) => {
            out.truncate(at);
            Err(e)
        }
    }
}

/// Length of the sealed value of `len` plaintext bytes under `key_id`.
pub fn sealed_len(key_id: &str, len: usize) -> usize {
    5 + key_id.len() + NONCE_LEN + len + sealed::TAG_LEN
}

/// Seals `plaintext` for `binding` with the ring's active key; the stored bytes. One value
/// on its own (tests, tools); the pipeline seals a batch through [`seal_into`].
pub fn seal(
    ring: &KeyRing,
    nonces: &dyn NonceSource,
    binding: &Binding<'_>,
    plaintext: &[u8],
) -> Result<Bytes, SealError> {
    let active = ring.active();
    let mut nonce = [0u8; NONCE_LEN];
    nonces.fill(&mut nonce)?;
    let mut aad = Vec::new();
    binding.aad_into(active.0, &mut aad);
    let mut out = BytesMut::new();
    seal_into(active, nonce, &aad, plaintext, &mut out)?;
    Ok(out.freeze())
}

fn seal_in_place(
    key: &LessSafeKey,
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    data: &mut [u8],
) -> Result<ring::aead::Tag, SealError> {
    key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
        .map_err(|_| SealError::Aead)
}

/// Opens stored bytes that should belong to `binding`; the plaintext.
pub fn open(ring: &KeyRing, binding: &Binding<'_>, stored: &[u8]) -> Result<Vec<u8>, OpenError> {
    let sealed = Sealed::parse(stored)?;
    let key = ring
        .get(&sealed.key_id)
        .ok_or_else(|| OpenError::UnknownKey(sealed.key_id.clone()))?;
    let aad = binding.aad(&sealed.key_id);
    let mut data = sealed.ciphertext;
    let len = key
        .open_in_place(
            Nonce::assume_unique_for_key(sealed.nonce),
            Aad::from(&aad[..]),
            &mut data,
        )
        .map_err(|_| OpenError::Authentication {
            key_id: sealed.key_id.clone(),
            stream: binding.stream.to_string(),
            sequence: binding.stream_sequence,
            subject: binding.subject.to_string(),
            part: match binding.part {
                super::binding::Part::Payload => "payload".to_string(),
                super::binding::Part::Header(n, i) => format!("header {n} value {i}"),
            },
        })?
        .len();
    data.truncate(len);
    Ok(data)
}
