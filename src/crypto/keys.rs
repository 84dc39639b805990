//! The key ring: several AES-256 keys by id, one active for sealing, all usable for
//! opening, so rotation is "add a key, make it active, restart" and old rows still open.
//!
//! Key material never leaves this type: `Debug` and every description show the key id and
//! a fingerprint only. Decoding the base64 text of a key is pure and proptested.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use ring::aead::{LessSafeKey, UnboundKey, AES_256_GCM};

/// Length of an AES-256 key.
pub const KEY_LEN: usize = 32;

/// Why key text is not a key; never quotes the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not base64.
    #[error("not base64 (standard alphabet, padded): {0}")]
    Base64(String),
    /// Base64 of the wrong number of bytes.
    #[error(
        "decodes to {0} bytes, an AES-256 key is exactly 32 (generate one with `jetsink keygen`)"
    )]
    Length(usize),
}

/// Decodes key text: standard padded base64 of 32 bytes, surrounding whitespace ignored.
pub fn decode_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim().as_bytes())
        .map_err(|e| KeyError::Base64(e.to_string()))?;
    <[u8; KEY_LEN]>::try_from(bytes.as_slice()).map_err(|_| KeyError::Length(bytes.len()))
}

/// Standard padded base64 of key bytes, the form [`decode_key`] reads.
pub fn encode_key(key: &[u8; KEY_LEN]) -> String {
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// A short public name of key material: the first 8 bytes of SHA-256 over a label and
/// the key, in hex. Tells two keys apart in logs and `validate` without revealing them.
pub fn fingerprint(key: &[u8; KEY_LEN]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"jetsink key fingerprint v1\0");
    ctx.update(key);
    ctx.finish().as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One key of the ring.
struct Key {
    cipher: LessSafeKey,
    fingerprint: String,
}

/// Keys by id, one of them active.
pub struct KeyRing {
    keys: BTreeMap<String, Arc<Key>>,
    active: String,
    active_key: Arc<Key>,
}

/// Why a ring could not be built from its keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The active key id names no key.
    #[error("active key `{0}` is not among the keys")]
    NoActive(String),
}

impl KeyRing {
    /// Builds a ring from `(id, key bytes)` pairs (ids already checked and unique).
    pub fn new(
        keys: impl IntoIterator<Item = (String, [u8; KEY_LEN])>,
        active: &str,
    ) -> Result<KeyRing, RingError> {
        let mut map = BTreeMap::new();
        for (id, bytes) in keys {
            // A 32-byte slice is always a valid AES-256 key.
            let Ok(unbound) = UnboundKey::new(&AES_256_GCM, &bytes) else {
                continue;
            };
            map.insert(
                id,
                Arc::new(Key {
                    cipher: LessSafeKey::new(unbound),
                    fingerprint: fingerprint(&bytes),
                }),
            );
        }
        let active_key = map
            .get(active)
            .cloned()
            .ok_or_else(|| RingError::NoActive(active.to_string()))?;
        Ok(KeyRing {
            keys: map,
            active: active.to_string(),
            active_key,
        })
    }

    /// The active key id and key.
    pub(super) fn active(&self) -> (&str, &LessSafeKey) {
        (&self.active, &self.active_key.cipher)
    }

    /// The key with this id.
    pub(super) fn get(&self, id: &str) -> Option<&LessSafeKey> {
        self.keys.get(id).map(|k| &k.cipher)
    }

    /// The key with this id, with the id as the ring holds it.
    pub(super) fn entry(&self, id: &str) -> Option<(&str, &LessSafeKey)> {
        self.keys
            .get_key_value(id)
            .map(|(id, k)| (id.as_str(), &k.cipher))
    }

    /// Whether the ring holds a key with this id.
    pub fn contains(&self, id: &str) -> bool {
        self.keys.contains_key(id)
    }

    /// The fingerprint of the active key.
    pub fn active_fingerprint(&self) -> &str {
        &self.active_key.fingerprint
    }

    /// How many keys the ring holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the ring is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the active key.
    pub fn active_id(&self) -> &str {
        &self.active
    }

    /// Every key id with its fingerprint, in id order.
    pub fn fingerprints(&self) -> Vec<(&str, &str)> {
        self.keys
            .iter()
            .map(|(id, k)| (id.as_str(), k.fingerprint.as_str()))
            .collect()
    }

    /// `active k2; keys k1 (fp), k2 (fp)`: the secret-free line for `validate` and logs.
    pub fn describe(&self) -> String {
        let keys: Vec<String> = self
            .fingerprints()
            .into_iter()
            .map(|(id, fp)| format!("{id} (fingerprint {fp})"))
            .collect();
        format!("active key {}; keys {}", self.active, keys.join(", "))
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyRing(")?;
        f.write_str(&self.describe())?;
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn debug_and_describe_show_ids_and_fingerprints_never_the_key() {
        let key = [7u8; KEY_LEN];
        let ring = KeyRing::new([("k1".to_string(), key)], "k1").unwrap();
        let shown = format!("{ring:?} {}", ring.describe());
        assert!(shown.contains("k1"), "{shown}");
        assert!(shown.contains(&fingerprint(&key)), "{shown}");
        assert!(!shown.contains(&encode_key(&key)), "{shown}");
        assert_eq!(fingerprint(&key).len(), 16);
        assert_ne!(fingerprint(&key), fingerprint(&[8u8; KEY_LEN]));
    }

    #[test]
    fn a_ring_without_its_active_key_is_refused() {
        let err = KeyRing::new([("a".to_string(), [1u8; KEY_LEN])], "b").unwrap_err();
        assert_eq!(err, RingError::NoActive("b".into()));
    }

    #[test]
    fn key_text_must_be_base64_of_32_bytes() {
        let key = [9u8; KEY_LEN];
        assert_eq!(decode_key(&format!("  {}\n", encode_key(&key))), Ok(key));
        assert_eq!(decode_key("AAAA"), Err(KeyError::Length(3)));
        assert!(matches!(
            decode_key("not base64!"),
            Err(KeyError::Base64(_))
        ));
    }

    proptest! {
        #[test]
        fn decode_key_never_panics(text in any::<String>()) {
            let _ = decode_key(&text);
        }

        #[test]
        fn encode_then_decode_is_identity(key in any::<[u8; KEY_LEN]>()) {
            prop_assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        }
    }
}
