//! Which value makes a write idempotent.
//!
//! A leaf, imported by [`crate::envelope`] to build each envelope's key: keeping it apart
//! from the rest of `config` means the pure message model does not depend on the config
//! loader.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which value identifies a message for idempotent writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyKey {
    /// `<stream>:<stream_sequence>`: unique per stored message, stable across redeliveries.
    #[default]
    StreamSequence,
    /// The publisher's `Nats-Msg-Id`, so a message republished with the same id is
    /// written once; falls back to `<stream>:<stream_sequence>` without the header.
    MessageId,
}

/// The header a publisher sets to name its message; JetStream deduplicates on it.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";
