//! Settings of a stream jetsink creates, shared by a source's `create_stream` and the
//! dead-letter queue's. A leaf, so both sections use it without importing each other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Stream retention policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Keep messages until limits (age, size, count) remove them.
    #[default]
    Limits,
    /// Remove a message once a consumer acknowledges it (job queue).
    Workqueue,
    /// Keep a message while some consumer has not acknowledged it.
    Interest,
}

/// Stream storage backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// On disk; survives a server restart.
    #[default]
    File,
    /// In memory; lost on a server restart.
    Memory,
}
