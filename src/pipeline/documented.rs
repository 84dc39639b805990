//! The numbers and names the docs state about the pipeline, public so that the tests
//! guarding those sentences (`tests/docs_drift.rs`) read them from the code instead of
//! repeating them: a changed constant then fails a test until the docs say the new value.

/// Batches a sink keeps pulled ahead of a backlog with neither in-batch or weighted lanes
/// nor the randomizer (strict lanes too); fewer when MaxAckPending cannot carry them.
pub const PULL_DEPTH: usize = super::puller::PULL_DEPTH;

/// Batches pulled ahead with in-batch or weighted priority lanes or the randomizer.
pub const SCHEDULED_DEPTH: usize = super::puller::SCHEDULED_DEPTH;

/// Failed pulls in a row after which a sink binds its consumers again; `/readyz` says
/// `consumer not bound` when that binding fails too.
pub const REBIND_AFTER: u32 = super::puller::REBIND_AFTER;

/// `delivery.linger_ms` of a sink that writes each batch as pulled, in milliseconds.
pub const DEFAULT_LINGER_MS: u64 = super::linger::DEFAULT_LINGER_MS;

/// Fewest messages a partial pull must have taken before their rate shortens the next
/// pull's wait below the linger.
pub const LINGER_RATE_SAMPLE: usize = crate::nats::linger::RATE_SAMPLE;

/// The log target of `destination failed; holding the batch`, `destination recovered`
/// and `batch abandoned at shutdown`.
pub const SETTLE_LOG_TARGET: &str = super::settle::LOG_TARGET;
