//! The stored form of one encrypted value: a compact, versioned, self-describing binary
//! envelope. Pure: parsing never panics, whatever bytes a table or file hands it.
//!
//! Layout of version 1 (all lengths in bytes):
//!
//! | field | size | value |
//! | --- | --- | --- |
//! | magic | 3 | `JSE` |
//! | version | 1 | `1` |
//! | key id length | 1 | 1..=64 |
//! | key id | n | `[A-Za-z0-9._-]` |
//! | nonce | 12 | random, from the OS generator |
//! | ciphertext + tag | rest | AES-256-GCM output, the 16-byte tag last |
//!
//! The magic lets a reader tell an encrypted payload from a clear one even where no
//! `payload_encoding` travels with it (a payload column exported on its own); the key id
//! travels in clear so a reader picks the right key, and is also bound into the
//! associated data so swapping it fails.

/// The first bytes of every sealed value.
pub const MAGIC: &[u8; 3] = b"JSE";
/// The only version this release writes and reads.
pub const VERSION: u8 = 1;
/// Nonce length of AES-256-GCM.
pub const NONCE_LEN: usize = 12;
/// Tag length of AES-256-GCM.
pub const TAG_LEN: usize = 16;
/// Longest key id.
pub const MAX_KEY_ID_LEN: usize = 64;

/// One sealed value, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The format version (always [`VERSION`] once parsed).
    pub version: u8,
    /// Which key of the ring sealed it.
    pub key_id: String,
    /// The per-message nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext followed by the tag.
    pub ciphertext: Vec<u8>,
}

/// Why bytes are not a sealed value; says what is wrong, never the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Too short, or the wrong magic: not something jetsink sealed.
    #[error("not an encrypted jetsink value (it does not start with the `JSE` marker)")]
    NotSealed,
    /// A version this release does not read.
    #[error("encrypted value of format version {0}, this jetsink reads version 1 only")]
    Version(u8),
    /// The key id is empty, too long or has characters outside `[A-Za-z0-9._-]`.
    #[error("encrypted value with an invalid key id")]
    KeyId,
    /// The bytes end before the nonce and tag.
    #[error("encrypted value truncated: {0} bytes where at least {1} are needed")]
    Truncated(usize, usize),
}

/// Whether `id` may name a key: 1 to 64 of `[A-Za-z0-9._-]`.
pub fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Sealed {
    /// The stored bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + self.key_id.len() + NONCE_LEN + self.ciphertext.len());
        self.write(&mut out);
        out
    }

    /// Appends the stored bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        write_header(out, &self.key_id, &self.nonce);
        out.extend_from_slice(&self.ciphertext);
    }

    /// Parses stored bytes.
    pub fn parse(bytes: &[u8]) -> Result<Sealed, FormatError> {
        if !bytes.starts_with(MAGIC) {
            return Err(FormatError::NotSealed);
        }
        let Some(&version) = bytes.get(3) else {
            return Err(FormatError::Truncated(bytes.len(), MIN_LEN));
        };
        if version != VERSION {
            return Err(FormatError::Version(version));
        }
        let id_len = *bytes.get(4).ok_or(FormatError::Truncated(bytes.len(), 5))? as usize;
        let need = 5 + id_len + NONCE_LEN + TAG_LEN;
        if bytes.len() < need {
            return Err(FormatError::Truncated(bytes.len(), need));
        }
        let key_id = std::str::from_utf8(&bytes[5..5 + id_len])
            .ok()
            .filter(|id| valid_key_id(id))
            .ok_or(FormatError::KeyId)?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&bytes[5 + id_len..5 + id_len + NONCE_LEN]);
        Ok(Sealed {
            version: VERSION,
            key_id: key_id.to_string(),
            nonce,
            ciphertext: bytes[5 + id_len + NONCE_LEN..].to_vec(),
        })
    }
}

/// Appends magic, version, key id and nonce: everything before the ciphertext.
pub fn write_header(out: &mut impl bytes::BufMut, key_id: &str, nonce: &[u8; NONCE_LEN]) {
    out.put_slice(MAGIC);
    out.put_u8(VERSION);
    // Key ids are checked to be at most 64 bytes when the ring is built.
    out.put_u8(key_id.len().min(MAX_KEY_ID_LEN) as u8);
    out.put_slice(&key_id.as_bytes()[..key_id.len().min(MAX_KEY_ID_LEN)]);
    out.put_slice(nonce);
}

/// The shortest sealed value: a one-character key id and an empty payload.
pub const MIN_LEN: usize = 5 + 1 + NONCE_LEN + TAG_LEN;

/// Whether `bytes` start like a sealed value (magic and version).
pub fn looks_sealed(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && &bytes[..3] == MAGIC && bytes[3] == VERSION
}

/// What stored bytes are, as far as the format tells without a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// Not a sealed value: a clear payload.
    Clear,
    /// A well-formed sealed value (whether it opens is the key's to tell).
    Sealed,
    /// Was sealed, but is no longer readable as such: cut, or of a version this release
    /// does not read. Never to be shown as clear text.
    Damaged(FormatError),
}

/// Tells a clear value from a sealed one, and a sealed one from a damaged one.
///
/// A value is taken as sealed when it starts with the magic and then either ends or has
/// a control byte (below 0x20, or 0x7f and above) where the version is: every version is
/// a small number, while a clear text that happens to start with `JSE` goes on with a
/// printable character. So a sealed value cut anywhere after the magic, or with another
/// version byte, is damaged, not clear. A value cut inside the magic cannot be told from
/// clear bytes.
pub fn detect(bytes: &[u8]) -> Detected {
    if !bytes.starts_with(MAGIC) {
        return Detected::Clear;
    }
    match bytes.get(3) {
        Some(&b) if (0x20..0x7f).contains(&b) => Detected::Clear,
        _ => match Sealed::parse(bytes) {
            Ok(_) => Detected::Sealed,
            Err(e) => Detected::Damaged(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sealed() -> impl Strategy<Value = Sealed> {
        (
            "[A-Za-z0-9._-]{1,64}",
            any::<[u8; NONCE_LEN]>(),
            proptest::collection::vec(any::<u8>(), TAG_LEN..200),
        )
            .prop_map(|(key_id, nonce, ciphertext)| Sealed {
                version: VERSION,
                key_id,
                nonce,
                ciphertext,
            })
    }

    proptest! {
        #[test]
        fn parse_of_serialize_is_identity(s in sealed()) {
            prop_assert_eq!(Sealed::parse(&s.to_bytes()), Ok(s));
        }

        #[test]
        fn every_truncation_is_an_error_not_a_panic(s in sealed(), cut in 0usize..400) {
            let bytes = s.to_bytes();
            let min = 5 + s.key_id.len() + NONCE_LEN + TAG_LEN;
            let cut = cut.min(bytes.len());
            let parsed = Sealed::parse(&bytes[..cut]);
            if cut < min {
                prop_assert!(parsed.is_err());
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Sealed::parse(&bytes);
        }

        #[test]
        fn garbage_after_the_magic_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let mut v = b"JSE\x01".to_vec();
            v.extend(bytes);
            let _ = Sealed::parse(&v);
        }
    }

    proptest! {
        /// A sealed value cut anywhere after its magic, or given another version byte, is
        /// damaged — never clear; and a clear text starting with `JSE` stays clear.
        #[test]
        fn a_cut_or_re_versioned_sealed_value_is_damaged_never_clear(
            s in sealed(),
            cut in 0usize..400,
            version in any::<u8>(),
            text in "[ -~]{0,20}",
        ) {
            let bytes = s.to_bytes();
            prop_assert_eq!(detect(&bytes), Detected::Sealed);
            let cut = cut.min(bytes.len() - 1).max(MAGIC.len());
            let min = 5 + s.key_id.len() + NONCE_LEN + TAG_LEN;
            if cut < min {
                prop_assert!(matches!(detect(&bytes[..cut]), Detected::Damaged(_)), "cut at {}", cut);
            }
            let mut other = bytes.clone();
            other[3] = version;
            match detect(&other) {
                Detected::Clear => prop_assert!((0x20..0x7f).contains(&version)),
                Detected::Sealed => prop_assert_eq!(version, VERSION),
                Detected::Damaged(_) => prop_assert_ne!(version, VERSION),
            }
            let clear = format!("JSE{}", text);
            let printable_after = clear.as_bytes().get(3).is_some_and(|b| (0x20..0x7f).contains(b));
            prop_assert_eq!(detect(clear.as_bytes()) == Detected::Clear, printable_after);
        }
    }

    #[test]
    fn the_magic_alone_and_an_unknown_version_are_damaged_values() {
        assert_eq!(
            detect(b"JSE"),
            Detected::Damaged(FormatError::Truncated(3, MIN_LEN))
        );
        assert_eq!(
            detect(b"JSE\x01"),
            Detected::Damaged(FormatError::Truncated(4, 5))
        );
        assert_eq!(
            detect(b"JSE\x02abc"),
            Detected::Damaged(FormatError::Version(2))
        );
        assert_eq!(detect(b"JSON text"), Detected::Clear);
        assert_eq!(detect(b"JSE is a word"), Detected::Clear);
        assert_eq!(detect(b"JS"), Detected::Clear);
        assert_eq!(detect(b""), Detected::Clear);
    }

    #[test]
    fn wrong_magic_version_and_key_id_are_told_apart() {
        assert_eq!(Sealed::parse(b"{\"a\":1}"), Err(FormatError::NotSealed));
        assert_eq!(Sealed::parse(b"JSE\x02xx"), Err(FormatError::Version(2)));
        let mut bad_id = b"JSE\x01\x02a/".to_vec();
        bad_id.extend([0u8; NONCE_LEN + TAG_LEN]);
        assert_eq!(Sealed::parse(&bad_id), Err(FormatError::KeyId));
        assert!(matches!(
            Sealed::parse(b"JSE\x01\x01a"),
            Err(FormatError::Truncated(6, 34))
        ));
    }

    #[test]
    fn key_ids_are_short_plain_names() {
        assert!(valid_key_id("2025-01_a.b"));
        assert!(!valid_key_id(""));
        assert!(!valid_key_id("a b"));
        assert!(!valid_key_id(&"k".repeat(65)));
    }
}
