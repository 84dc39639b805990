//! The encryption stage of one sink: seals an envelope's payload (and the headers the
//! config lists) with the active key, bound to the message; and the reverse for
//! `jetsink decrypt`. CPU work without I/O beyond the OS random generator, run in the
//! background preparation of the next batch, never on the write path.

use std::sync::Arc;

use base64::Engine as _;
use bytes::BytesMut;
use ring::aead::LessSafeKey;

use super::binding::{Binding, Part};
use super::cipher::{self, NonceSource, OpenError, OsNonces, SealError};
use super::keys::KeyRing;
use super::sealed::NONCE_LEN;
use crate::envelope::{Clear, Envelope};
use crate::shared::subject_match;

/// Chooses the key by subject: messages on `subjects` are sealed with `key_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRule {
    /// Subject filters (NATS wildcards).
    pub subjects: Vec<String>,
    /// The key that seals them.
    pub key_id: String,
}

/// A rule naming a key the ring does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key rule {index} names key `{key_id}`, which is not in the key ring")]
pub struct UnknownRuleKey {
    /// Position of the rule.
    pub index: usize,
    /// The id it names.
    pub key_id: String,
}

/// One sink's encryption: its key ring, the headers it seals, the subjects it covers, and
/// the rules that choose a key by subject.
pub struct Encryption {
    ring: KeyRing,
    headers: Vec<String>,
    subjects: Vec<String>,
    rules: Vec<KeyRule>,
    nonces: Box<dyn NonceSource>,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption")
            .field("ring", &self.ring)
            .field("headers", &self.headers)
            .field("subjects", &self.subjects)
            .field("rules", &self.rules)
            .finish()
    }
}

/// Most nonces taken from the OS generator in one call.
const NONCE_CHUNK: usize = 512;

/// The scratch space of sealing one batch: nonces drawn from the generator in bulk, the
/// associated data buffer, and one output buffer every sealed value of the batch is cut
/// from (one allocation per batch instead of one per message).
pub struct Sealer {
    nonces: Vec<u8>,
    next: usize,
    aad: Vec<u8>,
    out: BytesMut,
}

impl Sealer {
    fn nonce(
        &mut self,
        source: &dyn NonceSource,
        more: usize,
    ) -> Result<[u8; NONCE_LEN], SealError> {
        if self.next + NONCE_LEN > self.nonces.len() {
            let n = more.clamp(1, NONCE_CHUNK);
            self.nonces.clear();
            self.nonces.resize(n * NONCE_LEN, 0);
            self.next = 0;
            if let Err(e) = source.fill(&mut self.nonces) {
                self.nonces.clear();
                return Err(e);
            }
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&self.nonces[self.next..self.next + NONCE_LEN]);
        self.next += NONCE_LEN;
        Ok(nonce)
    }
}

impl Encryption {
    /// The stage with nonces from the OS generator. `headers`: names of headers whose
    /// values are sealed too (case-insensitive); `subjects`: filters of the subjects to
    /// encrypt, empty for all.
    pub fn new(ring: KeyRing, headers: Vec<String>, subjects: Vec<String>) -> Encryption {
        Encryption::with_nonces(ring, headers, subjects, Box::new(OsNonces::new()))
    }

    /// The stage with another nonce source (tests).
    pub fn with_nonces(
        ring: KeyRing,
        headers: Vec<String>,
        subjects: Vec<String>,
        nonces: Box<dyn NonceSource>,
    ) -> Encryption {
        Encryption {
            ring,
            headers,
            subjects,
            rules: Vec::new(),
            nonces,
        }
    }

    /// The stage choosing the key by subject: the first rule whose subjects match a
    /// message's subject names its key; a message no rule matches uses the active key.
    pub fn with_rules(mut self, rules: Vec<KeyRule>) -> Result<Encryption, UnknownRuleKey> {
        if let Some((index, r)) = rules
            .iter()
            .enumerate()
            .find(|(_, r)| !self.ring.contains(&r.key_id))
        {
            return Err(UnknownRuleKey {
                index,
                key_id: r.key_id.clone(),
            });
        }
        self.rules = rules;
        Ok(self)
    }

    /// The key ring.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// The key rules, in order.
    pub fn rules(&self) -> &[KeyRule] {
        &self.rules
    }

    /// The headers sealed too.
    pub fn sealed_headers(&self) -> &[String] {
        &self.headers
    }

    /// The subjects covered (empty: all).
    pub fn subjects(&self) -> &[String] {
        &self.subjects
    }

    /// Secret-free summary for `validate` and the start-up log.
    pub fn describe(&self) -> String {
        let mut out = format!("AES-256-GCM, {}", self.ring.describe());
        if !self.headers.is_empty() {
            out.push_str(&format!("; headers sealed: {}", self.headers.join(", ")));
        }
        if !self.subjects.is_empty() {
            out.push_str(&format!("; subjects: {}", self.subjects.join(", ")));
        }
        for r in &self.rules {
            out.push_str(&format!("; key {} for {}", r.key_id, r.subjects.join(", ")));
        }
        out
    }

    /// Whether messages on `subject` are encrypted.
    pub fn covers(&self, subject: &str) -> bool {
        self.subjects.is_empty()
            || self
                .subjects
                .iter()
                .any(|f| subject_match::matches(f, subject))
    }

    /// The id of the key that seals messages on `subject`: the first matching rule's, or
    /// the active key.
    pub fn key_id_for(&self, subject: &str) -> &str {
        self.key_for(subject).0
    }

    fn key_for(&self, subject: &str) -> (&str, &LessSafeKey) {
        self.rules
            .iter()
            .find(|r| {
                r.subjects
                    .iter()
                    .any(|f| subject_match::matches(f, subject))
            })
            .and_then(|r| self.ring.entry(&r.key_id))
            .unwrap_or_else(|| self.ring.active())
    }

    fn seals_header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    /// Scratch space for sealing `envelopes` (sized for them; it grows if more come).
    pub fn sealer<'a>(&self, envelopes: impl Iterator<Item = &'a Envelope>) -> Sealer {
        let (mut count, mut bytes) = (0usize, 0usize);
        for e in envelopes {
            count += 1;
            bytes += cipher::sealed_len(self.ring.active_id(), e.payload.len());
        }
        Sealer {
            nonces: Vec::with_capacity(count.min(NONCE_CHUNK) * NONCE_LEN),
            next: 0,
            aad: Vec::new(),
            // Room for key ids longer than the active one's chosen by a rule.
            out: BytesMut::with_capacity(bytes + count * 16),
        }
    }

    /// Seals one envelope on its own (tests, tools): [`Encryption::seal_with`] with
    /// scratch space of its own.
    pub fn seal(&self, e: &mut Envelope) -> Result<(), SealError> {
        let mut sealer = self.sealer(std::iter::once(&*e));
        self.seal_with(e, &mut sealer, 1)
    }

    /// Seals the envelope's payload and listed headers in place, keeping the clear forms
    /// in [`Envelope::clear`]. A subject the stage does not cover is left untouched.
    /// `remaining`: how many envelopes of the batch, this one included, are still to be
    /// sealed, so nonces are drawn for all of them at once.
    pub fn seal_with(
        &self,
        e: &mut Envelope,
        sealer: &mut Sealer,
        remaining: usize,
    ) -> Result<(), SealError> {
        if e.clear.is_some() || !self.covers(&e.subject) {
            return Ok(());
        }
        let key = self.key_for(&e.subject);
        let nonce = sealer.nonce(&*self.nonces, remaining)?;
        binding(e, Part::Payload).aad_into(key.0, &mut sealer.aad);
        cipher::seal_into(key, nonce, &sealer.aad, &e.payload, &mut sealer.out)?;
        let payload = sealer.out.split().freeze();
        let clear_headers = if e.headers.iter().any(|(n, _)| self.seals_header(n)) {
            let mut sealed = e.headers.clone();
            let mut value = BytesMut::new();
            for (name, values) in sealed.iter_mut() {
                if !self.seals_header(name) {
                    continue;
                }
                for (i, v) in values.iter_mut().enumerate() {
                    let nonce = sealer.nonce(&*self.nonces, remaining)?;
                    binding(e, Part::Header(name, i)).aad_into(key.0, &mut sealer.aad);
                    value.clear();
                    cipher::seal_into(key, nonce, &sealer.aad, v.as_bytes(), &mut value)?;
                    *v = base64::engine::general_purpose::STANDARD.encode(&value);
                }
            }
            Some(std::mem::replace(&mut e.headers, sealed))
        } else {
            None
        };
        let clear = Clear {
            payload: std::mem::replace(&mut e.payload, payload),
            headers: clear_headers,
        };
        e.clear = Some(Arc::new(clear));
        Ok(())
    }

    /// Opens a stored payload of the message at `stream`/`sequence`/`subject`.
    pub fn open_payload(
        &self,
        stream: &str,
        sequence: u64,
        subject: &str,
        stored: &[u8],
    ) -> Result<Vec<u8>, OpenError> {
        let b = Binding {
            stream,
            stream_sequence: sequence,
            subject,
            part: Part::Payload,
        };
        cipher::open(&self.ring, &b, stored)
    }

    /// Opens the stored (base64) value `index` of header `name`, when the stage seals that
    /// header; `Ok(None)` for a header kept clear.
    pub fn open_header(
        &self,
        (stream, sequence, subject): (&str, u64, &str),
        name: &str,
        index: usize,
        stored: &str,
    ) -> Result<Option<String>, OpenError> {
        if !self.seals_header(name) {
            return Ok(None);
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(stored.as_bytes())
            .map_err(|_| OpenError::Format(super::sealed::FormatError::NotSealed))?;
        let b = Binding {
            stream,
            stream_sequence: sequence,
            subject,
            part: Part::Header(name, index),
        };
        let clear = cipher::open(&self.ring, &b, &bytes)?;
        Ok(Some(String::from_utf8_lossy(&clear).into_owned()))
    }
}

fn binding<'a>(e: &'a Envelope, part: Part<'a>) -> Binding<'a> {
    Binding {
        stream: &e.stream,
        stream_sequence: e.stream_sequence,
        subject: &e.subject,
        part,
    }
}
