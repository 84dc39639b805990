//! The encryption stage of one sink: seals an envelope's payload (and the headers the
//! config lists) with the active key, bound to the message; and the reverse for
//! `jetsink decrypt`. CPU work without I/O beyond the OS random generator, run in the
//! background preparation of the next batch, never on the write path.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;

use super::binding::{Binding, Part};
use super::cipher::{self, NonceSource, OpenError, OsNonces, SealError};
use super::keys::KeyRing;
use crate::config::subject_match;
use crate::envelope::{Clear, Envelope};

/// One sink's encryption: its key ring, the headers it seals, the subjects it covers.
pub struct Encryption {
    ring: KeyRing,
    headers: Vec<String>,
    subjects: Vec<String>,
    nonces: Box<dyn NonceSource>,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption")
            .field("ring", &self.ring)
            .field("headers", &self.headers)
            .field("subjects", &self.subjects)
            .finish()
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
            nonces,
        }
    }

    /// The key ring.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
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

    fn seals_header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    /// Seals the envelope's payload and listed headers in place, keeping the clear forms
    /// in [`Envelope::clear`]. A subject the stage does not cover is left untouched.
    pub fn seal(&self, e: &mut Envelope) -> Result<(), SealError> {
        if e.clear.is_some() || !self.covers(&e.subject) {
            return Ok(());
        }
        let payload = cipher::seal(
            &self.ring,
            &*self.nonces,
            &binding(e, Part::Payload),
            &e.payload,
        )?;
        let clear_headers = if e.headers.iter().any(|(n, _)| self.seals_header(n)) {
            let mut sealed = e.headers.clone();
            for (name, values) in sealed.iter_mut() {
                if !self.seals_header(name) {
                    continue;
                }
                for (i, v) in values.iter_mut().enumerate() {
                    let b = binding(e, Part::Header(name, i));
                    let bytes = cipher::seal(&self.ring, &*self.nonces, &b, v.as_bytes())?;
                    *v = base64::engine::general_purpose::STANDARD.encode(bytes);
                }
            }
            Some(std::mem::replace(&mut e.headers, sealed))
        } else {
            None
        };
        let clear = Clear {
            payload: std::mem::replace(&mut e.payload, Bytes::from(payload)),
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
