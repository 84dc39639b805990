//! Payload encryption at rest: AES-256-GCM through `ring`, each value bound to its message
//! (stream, sequence, subject, key id, part) and stored in a versioned envelope.
//!
//! Split by job so each piece is small and the pure ones are proptested alone:
//! [`sealed`] is the stored format, [`binding`] the associated data, [`keys`] the key ring
//! and key text, [`load`] reads keys from files and environment variables (the only I/O),
//! [`cipher`] the one caller of the AEAD, [`stage`] what the pipeline and
//! `jetsink decrypt` apply to an envelope or a stored record.

pub mod binding;
pub mod cipher;
pub mod keys;
pub mod load;
pub mod sealed;
pub mod stage;

pub use cipher::{NonceSource, OpenError, OsNonces, SealError};
pub use keys::KeyRing;
pub use stage::Encryption;

#[cfg(test)]
mod tests;
